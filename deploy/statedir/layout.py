"""Where things live under a host's ``state_dir``, and the one shell reader of that layout.

    lock                          flock(1) file; its content describes the holder (JSON)
    runs/<run-id>/journal.jsonl   the run's records (`deploy.statedir.records`)
    runs/<run-id>/manifest.json   each file touched: path, sha256 before/after, mode, owner, size
    runs/<run-id>/files/<sha256>  saved copies, content-addressed
    services/<name>.log, .pid     servers deploy started itself (manager: process)
    compiled/<sha256>             passed compile checks (a cache, safe to delete)
    validate.XXXXXXXX             a step's new content while its ``validate`` command runs
                                  (mktemp; removed when the command ends, safe to delete)

Paths are built here and nowhere else. ``deploy/hostsh/scan.sh`` is the only shell that reads
journals (the lock's exec and ``deploy status`` both run it); `parse_scan` turns its output into
`RunInfo` values with the same fold the engine uses. `trust_paths` lists what a trust check of
the state directory must look at (owner and mode of state_dir and its parents).
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from deploy.statedir.records import Record, decode_line
from deploy.statedir.runs import RunInfo, summarize

#: The records that decide a run's state (`deploy.statedir.runs.advance`); the scan
#: (``deploy/hostsh/scan.sh``, whose awk pattern lists them) reads only these lines, so a service intent's large environment never crosses the wire for it.
STATE_EVENTS = ("begin", "end", "rollback_begin", "rollback_end", "rollback_failed", "resolved")


@dataclass(frozen=True)
class Layout:
    """The paths of one host's state directory (no I/O)."""

    state_dir: str

    @property
    def root(self) -> str:
        """state_dir without its trailing slash ("" for "/"): every path is root + "/name"."""
        return self.state_dir.rstrip("/")

    @property
    def lock(self) -> str:
        return f"{self.root}/lock"

    @property
    def runs(self) -> str:
        return f"{self.root}/runs"

    def run_dir(self, run_id: str) -> str:
        if not run_id or "/" in run_id or run_id in (".", ".."):
            raise ValueError(f"not a run id: {run_id!r}")
        return f"{self.runs}/{run_id}"

    def journal(self, run_id: str) -> str:
        return f"{self.run_dir(run_id)}/journal.jsonl"

    def manifest(self, run_id: str) -> str:
        return f"{self.run_dir(run_id)}/manifest.json"

    def copies(self, run_id: str) -> str:
        return f"{self.run_dir(run_id)}/files"

    def copy(self, run_id: str, digest: str) -> str:
        return f"{self.copies(run_id)}/{digest}"

    @property
    def validate_template(self) -> str:
        """``mktemp`` template of the copy a ``validate`` command checks (`deploy.steps.put`)."""
        return f"{self.root}/validate.XXXXXXXX"

    @property
    def services(self) -> str:
        return f"{self.root}/services"

    @property
    def compiled(self) -> str:
        return f"{self.root}/compiled"

    def write_probe(self) -> str:
        """The command `--check` runs as a non-root user without become (`deploy.engine`):
        it prints the nearest existing directory on the way to `runs` if the acting user may
        not write in it (so the real run's lock would fail to create or open it)."""
        return (
            f'd={shlex.quote(self.runs)}; while [ ! -e "$d" ]; do d=$(dirname -- "$d"); done; '
            '[ -w "$d" ] || printf "%s\\n" "$d"'
        )

    def trust_paths(self) -> list[str]:
        """state_dir and each parent up to /, the directories whose owner and mode matter."""
        paths = [posixpath.normpath(self.state_dir)]
        while paths[-1] != "/":
            paths.append(posixpath.dirname(paths[-1]))
        return paths


def _run_id(path: str) -> str:
    return path.rsplit("/journal.jsonl", 1)[0].rsplit("/", 1)[-1]


def parse_scan(lines: Iterable[str]) -> list[RunInfo]:
    """``scan.sh``'s output to one `RunInfo` per run (pure; for tests too).

    A state line that does not decode is tolerated only as the journal's last line (torn by a
    crash); elsewhere the run is marked damaged, naming file and line.
    """
    order: list[str] = []
    records: dict[str, list[Record]] = {}
    bad: dict[str, tuple[int, str, str]] = {}
    damaged: dict[str, str] = {}
    current = current_path = ""
    for line in lines:
        kind, _, rest = line.partition("\t")
        if kind == "RUN":
            run_id = _run_id(rest)
            order.append(run_id)
            records.setdefault(run_id, [])
        elif kind == "F":
            current, current_path = _run_id(rest), rest
        elif kind == "L" and current:
            number, _, text = rest.partition("\t")
            try:
                records[current].append(decode_line(text))
            except ValueError as exc:
                bad.setdefault(current, (int(number), current_path, str(exc)))
        elif kind == "N" and current:
            total = int(rest or 0)
            if current in bad and bad[current][0] != total:
                line_no, path, why = bad[current]
                damaged[current] = f"{path}:{line_no}: journal damaged: {why}"
    return [summarize(r, records.get(r, []), damaged.get(r)) for r in order]
