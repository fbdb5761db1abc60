"""Files beside the playbook that a step's arguments name: read (and rendered) while resolving.

A step's arguments model may define ``read_local_files(args, files) -> args``, a classmethod
that `deploy.config.resolve` calls with the step's rendered arguments (a dict, before
validation) and a `LocalFiles` for that step: ``copy`` reads its ``src``, ``template`` reads
and renders it with the host's variables. Everything a run sends is then known before any host
is touched, and a missing or unreadable file, or a template that does not render, is bad input
(exit 2) at the ``file:line:col`` of the key that names it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from deploy.config.template import Origin, Variables
from deploy.config.yamlpos import KeyPath, Positions, one_line
from deploy.errors import InputError

#: Largest file a step may read beside the playbook (it travels in the run, and in memory).
MAX_LOCAL_FILE = 16 * 1024 * 1024


@dataclass
class LocalFiles:
    """What one step may read on the workstation: paths relative to the playbook's directory."""

    playbook_dir: Path
    positions: Positions
    #: The step's arguments in the playbook: ``("steps", 3, "copy")``.
    base: KeyPath
    variables: Variables

    def error(self, key: str, message: str) -> InputError:
        """Bad input at the position of ``key`` of the step's arguments."""
        return InputError(one_line(message), self.positions.locate((*self.base, key)))

    def path(self, name: str) -> Path:
        """``name`` as a path: relative to the playbook's directory, ``~`` expanded."""
        path = Path(name).expanduser()
        return path if path.is_absolute() else self.playbook_dir / path

    def read(self, key: str, name: str) -> bytes:
        """The bytes of the file ``name`` (the value of ``key``).

        Raises:
            InputError: it does not exist, is not a regular file, cannot be read or is too
                large; at ``key``'s position.
        """
        path = self.path(name)
        try:
            if not path.is_file():
                what = "not found" if not path.exists() else "not a regular file"
                raise self.error(key, f"{key} {what}: {path}")
            if path.stat().st_size > MAX_LOCAL_FILE:
                raise self.error(key, f"{key} {path} is larger than 16 MiB")
            return path.read_bytes()
        except OSError as exc:
            raise self.error(key, f"cannot read {key} {path}: {exc.strerror or exc}") from None

    def render(self, key: str, text: str, name: str) -> str:
        """``text`` (the file ``name``) rendered with the host's variables, sandboxed as every
        playbook string is (`deploy.config.template`).

        Raises:
            InputError: an undefined variable or a template error, at ``key``'s position,
                naming the file.
        """
        origin = Origin(self.positions, (*self.base, key))
        try:
            return self.variables.render_string(text, origin)
        except InputError as exc:
            raise InputError(f"{name}: {exc.message}", exc.position) from None
