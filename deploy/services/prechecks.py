"""What is checked before a running server is stopped, so that a typo costs seconds, not a load.

First, that the undo has a target known to start (`drift_problem`): the running server and the
files it imports were seen serving together, i.e. no such file changed after the server
started, unless deploy itself wrote it (a run's journaled write, as ``--skip-tags service``
leaves it). Otherwise "the state before this run" — those files with the running command line
— never served, an undo to it could fail to start (the motivating case: a ``git checkout``
reverted the model file under a running EAGLE-3 server), and the run refuses before the stop
(exit 4): see docs/operations.md for why it refuses rather than fall back.

A restart that fails after the stop costs the old server's downtime twice: the new server's
load, then the old one's. Everything that can be known without stopping is checked first, with
the server's own interpreter, environment and cwd (run by the process helper's ``pycheck``
under the same trust rule as the ``imports`` lookup):

- the server's working directory (`cwd_problem`): one removed since the server started
  (``/proc`` shows ``PATH (deleted)``, a checkout made again) can start no server, new or old;
- the draft model (``--speculative-draft-model-path``): a local path must be a directory
  holding ``config.json``; a Hugging Face id (``org/name``) passes;
- the new command line against the server's own argument parser
  (``sglang.srt.server_args.ServerArgs.add_cli_args``, what ``launch_server`` parses with),
  for a server started as ``-m sglang.launch_server``;
- the patched module importing (`import_check`, once the new file is in place): a NameError
  costs seconds; bounded in time, with progress (importing sglang pulls in torch);
- the GPUs the server uses (its ``CUDA_VISIBLE_DEVICES``, or all): a compute process on them
  outside the server's own process tree (another user's job) would fail the after-stop memory
  check, so it is found now. With no server running, a start is refused while a compute
  process holds the service's GPUs: a server started by hand still loading (SGLang binds its
  port once loaded) would otherwise get a second one beside it, and an undo that is not its
  own to make.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from deploy.checks.nvidia_smi import (
    COMPUTE_APP_FIELDS,
    GPU_FIELDS,
    parse_compute_apps,
    parse_query_gpu,
)
from deploy.config.services import ServiceSpec
from deploy.errors import CheckFailed, StepFailed
from deploy.remote.api import Host
from deploy.remote.host import quote
from deploy.services.control import ServiceControl
from deploy.services.gpus import server_gpus
from deploy.services.state import ServiceState
from deploy.statedir.layout import Layout
from deploy.statedir.records import sha256

SERVER_MODULE = "sglang.launch_server"
DRAFT_FLAGS = ("--speculative-draft-model-path", "--speculative-draft-model")
#: What huggingface_hub accepts as a repo id (``validate_repo_id``: ``name`` or ``org/name``);
#: a local directory of that name wins, as in transformers.
_HUB_ID = re.compile(r"(\b[\w\-.]+\b/)?\b[\w\-.]+\b")
ARGPARSE_CHECK = (
    "import argparse, sys\n"
    "from sglang.srt.server_args import ServerArgs\n"
    "parser = argparse.ArgumentParser()\n"
    "ServerArgs.add_cli_args(parser)\n"
    "parser.parse_args(sys.argv[1:])\n"
)
IMPORT_CHECK = (
    "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
)
#: Seconds an import or a parser check may take (sglang imports torch: tens of seconds).
CHECK_TIMEOUT = 600.0


def drift_problem(
    remote: Host, state_dir: str, state: ServiceState, paths: list[str]
) -> str | None:
    """Why the running server and ``paths`` (the files its restart imports) were never seen
    serving together, or None: a file changed (mtime) after the server started and holds
    content no deploy run wrote there (the runs' manifests on the host)."""
    if not state.running or state.started_at is None:
        return None
    changed = []
    for path in paths:
        info = remote.stat(path)
        if info is not None and info.mtime > state.started_at + 1.0:
            changed.append((path, info.mtime))
    if not changed:
        return None
    written = _deploy_writes(remote, state_dir)
    for path, mtime in changed:
        if sha256(remote.read(path)) in written.get(path, set()):
            continue  # deploy's own journaled write (e.g. a run with --skip-tags service)
        when = datetime.fromtimestamp(mtime, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        since = datetime.fromtimestamp(state.started_at, UTC).strftime("%H:%M:%S UTC")
        return (
            f"drift: {path} changed at {when}, after the running server (pid {state.pid}) "
            f"started ({since}), and not by deploy: the state before this run was never seen "
            "serving, so an undo to it might not start. Restart the server on the file as it "
            "is now (or put the file back as the server loaded it), then run again"
        )
    return None


def _deploy_writes(remote: Host, state_dir: str) -> dict[str, set[str]]:
    """Per path, the contents (sha256) deploy itself left there: what a committed run wrote
    (its manifest's ``after``) and what an undo put back (a write intent's ``before`` in a
    run whose journal records that path ``undone`` — a rollback's, or the recovery of a run
    killed mid-change)."""
    layout = Layout(state_dir)
    runs = quote(layout.runs)
    command = (
        f"for m in {runs}/*/manifest.json; do "
        '[ -f "$m" ] && [ ! -h "$m" ] && cat "$m" && echo; done; echo; echo "#journals"; '
        f"for j in {runs}/*/journal.jsonl; do "
        '[ -f "$j" ] && [ ! -h "$j" ] && echo "#run" && cat "$j" && echo; done; true'
    )
    manifests, _, journals = remote.run(command, timeout=60).stdout.partition("\n#journals\n")
    written: dict[str, set[str]] = {}
    for document in _documents(manifests):
        for entry in document.get("files", []):
            if isinstance(entry, dict) and entry.get("path") and entry.get("sha256_after"):
                written.setdefault(str(entry["path"]), set()).add(str(entry["sha256_after"]))
    for journal in journals.split("#run\n"):
        befores: dict[str, set[str]] = {}
        undone: set[str] = set()
        for record in _documents(journal):
            if record.get("event") == "intent" and record.get("op") == "write":
                befores.setdefault(str(record.get("path")), set()).add(str(record.get("before")))
            elif record.get("event") == "undone" and record.get("path"):
                undone.add(str(record["path"]))
        for path in undone:
            written.setdefault(path, set()).update(befores.get(path, set()))
    return written


def _documents(text: str) -> list[dict[str, Any]]:
    """The JSON objects in ``text``, one after another (a torn last one is left out)."""
    found: list[dict[str, Any]] = []
    decoder = json.JSONDecoder()
    position = 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position >= len(text):
            return found
        try:
            document, position = decoder.raw_decode(text, position)
        except ValueError:
            return found
        if isinstance(document, dict):
            found.append(document)


def foreign_gpu_problem(remote: Host, spec: ServiceSpec, state: ServiceState) -> str | None:
    """A compute process on the server's GPUs outside its own process tree (its session or
    process group): another user's job. After the stop the GPU would not be released, and the
    run would fail there with the old server already stopped; so it is found now. With no
    server running, any compute process on the service's GPUs: a server still loading (not
    listening yet) or another job, beside which a server must not be started."""
    gpus = server_gpus(state, spec)
    if gpus is None:
        return None
    smi = quote(spec.nvidia_smi)
    command = (
        f"command -v {smi} >/dev/null 2>&1 || {{ echo NO_NVIDIA_SMI; exit 0; }}; "
        f"_a=$({smi} --query-compute-apps={','.join(COMPUTE_APP_FIELDS)} "
        "--format=csv,noheader,nounits) || exit 0; "
        'printf "%s\n" "$_a"; echo ---; '
        f"{smi} --query-gpu={','.join(GPU_FIELDS)} --format=csv,noheader,nounits; echo ---; "
        'printf "%s\n" "$_a" | while IFS=, read -r _p _rest; do '
        '[ -n "$_p" ] || continue; '
        "_s=$(sed 's/.*) //' /proc/$_p/stat 2>/dev/null | cut -d' ' -f3,4); "
        '_u=$(stat -c %u /proc/$_p 2>/dev/null); echo "$_p $_s $_u"; done'
    )
    out = remote.run(command, timeout=60).stdout
    if "NO_NVIDIA_SMI" in out:
        return None
    apps_text, _, rest = out.partition("---")
    gpu_text, _, owners_text = rest.partition("---")
    try:
        apps, infos = parse_compute_apps(apps_text), parse_query_gpu(gpu_text)
    except CheckFailed:
        return None  # unreadable now: the check after the stop still judges
    owners = {}
    for line in owners_text.split("\n"):
        fields = line.split()
        if len(fields) == 4 and all(f.isdigit() for f in fields):
            owners[int(fields[0])] = (int(fields[1]), int(fields[2]), int(fields[3]))
    by_uuid = {info.uuid: info.index for info in infos if info.uuid}
    selected = set(by_uuid.values()) if gpus == "all" else set(gpus)
    for app in apps:
        index = by_uuid.get(app.gpu_uuid)
        if index is None or index not in selected or app.pid == state.pid:
            continue
        pgid, sid, uid = owners.get(app.pid, (None, None, None))
        if (state.sid and sid == state.sid) or (state.pgid and pgid == state.pgid):
            continue  # the server's own scheduler
        if pgid is not None and pgid in state.leftover_pgids:
            continue  # a dead server's orphan on the port: the stop reaps it
        memory = f"{app.used_memory_mib} MiB" if app.used_memory_mib is not None else "memory"
        if not state.running:
            return (
                f"no server listens on port {spec.port}, yet GPU {index} is used by pid "
                f"{app.pid} ({app.process_name}, uid {uid}, {memory}): a server still loading "
                "(SGLang binds its port once loaded), a dead server's orphan or another job; "
                "a server started now would not get the GPU"
            )
        return (
            f"GPU {index} is used by pid {app.pid} ({app.process_name}, uid {uid}, {memory}), "
            "outside the server's process tree (another user's job?): after the stop the GPU "
            "would not be free for the new server"
        )
    return None


def server_args(argv: list[str]) -> list[str] | None:
    """The arguments after ``-m sglang.launch_server``; None for another kind of server."""
    for index in range(len(argv) - 1):
        if argv[index] == "-m" and argv[index + 1] == SERVER_MODULE:
            return argv[index + 2 :]
    return None


def draft_path(argv: list[str]) -> str | None:
    """The value of the draft model flag in ``argv`` (the last one given), if any."""
    found = None
    for index, arg in enumerate(argv):
        flag, equals, value = arg.partition("=")
        if flag in DRAFT_FLAGS:
            found = value if equals else (argv[index + 1] if index + 1 < len(argv) else "")
    return found


def cwd_problem(cwd: str | None) -> str | None:
    """Why no server could start in ``cwd`` as /proc read it (the server's own), or None: a
    directory removed after the server started reads ``PATH (deleted)`` (a new one at PATH is
    another directory, judged by no check made of this server)."""
    if not cwd or not cwd.endswith(" (deleted)"):
        return None
    return (
        f"the server's working directory {cwd.removesuffix(' (deleted)')} was removed after it "
        "started (/proc shows it deleted): neither the new server nor, on a failure, the old "
        "one could be started there again; restart the server by hand from an existing "
        "directory first"
    )


def draft_problem(remote: Host, argv: list[str], cwd: str | None) -> str | None:
    """Why the draft model in ``argv`` cannot load (one line), or None (none, or it can)."""
    value = draft_path(argv)
    if value is None:
        return None
    local = (
        value.startswith(("/", "./", "../", "~"))
        or not _HUB_ID.fullmatch(value)
        or "--" in value
        or ".." in value
    )
    where = value if value.startswith("/") else os.path.join(cwd or "/", value)
    if remote.stat(f"{where.rstrip('/')}/config.json") is not None:
        return None
    if not local:
        return None  # a Hub id, and no local directory of that name: the Hub serves it
    if remote.stat(where) is None:
        return f"the draft model path {value} does not exist (from {cwd or '/'})"
    return f"the draft model path {value} holds no config.json"


def python_check(
    svc: ServiceControl,
    *,
    python: str,
    env: dict[str, str],
    cwd: str | None,
    pid: int | None,
    code: str,
    argv: list[str],
    what: str,
    note: Callable[[str], None] | None = None,
    timeout: float = CHECK_TIMEOUT,
) -> dict[str, Any]:
    """Run ``code`` with the server's interpreter on the host (the helper's ``pycheck``),
    saying every 5 s how long it has taken; the helper's answer.

    Raises:
        StepFailed: the helper could not run it (e.g. an interpreter it may not trust).
    """
    request = {
        "python": python,
        "env": env,
        "cwd": cwd or "/",
        "pid": pid,
        "code": code,
        "argv": argv,
        "timeout": timeout,
    }
    answer: dict[str, Any] = {}
    failure: list[BaseException] = []

    def ask() -> None:
        try:
            answer.update(svc.process.helper("pycheck", request, timeout=timeout + 30))
        except BaseException as exc:
            failure.append(exc)

    worker = threading.Thread(target=ask, name=f"check-{svc.name}", daemon=True)
    began = time.monotonic()
    worker.start()
    next_note = 5.0
    while worker.is_alive():
        # Not cut short by an interrupt: the host's shell is busy with the check until it
        # answers (bounded by ``timeout``), and the run's next command needs that shell.
        worker.join(timeout=0.2)
        elapsed = time.monotonic() - began
        if note and worker.is_alive() and elapsed >= next_note:
            note(f"{what}: {elapsed:.0f} s (at most {timeout:g} s)")
            next_note += 5.0
    if failure:
        raise failure[0]
    return answer


def _refusal(answer: dict[str, Any], what: str, timeout: float) -> str | None:
    if answer.get("ok"):
        return None
    if answer.get("timed_out"):
        return f"{what} took longer than {timeout:g} s"
    tail = [line for line in answer.get("tail") or [] if line.strip()]
    return (
        f"{what} failed: {tail[-1].strip()[:300] if tail else 'exit ' + str(answer.get('status'))}"
    )


def argparse_problem(
    svc: ServiceControl,
    argv: list[str],
    env: dict[str, str],
    cwd: str | None,
    pid: int | None,
    note: Callable[[str], None] | None = None,
) -> str | None:
    """Why the server's own parser refuses the new command line ``argv``, or None."""
    args = server_args(argv)
    if args is None or not argv:
        return None
    what = "the new command line against the server's argument parser"
    answer = python_check(
        svc, python=argv[0], env=env, cwd=cwd, pid=pid, code=ARGPARSE_CHECK, argv=args,
        what=f"checking {what}", note=note,
    )  # fmt: skip
    problem = _refusal(answer, what, CHECK_TIMEOUT)
    return problem and f"{problem} ({shlex.join(args)[:200]})"


def import_check(
    svc: ServiceControl,
    modules: list[str],
    *,
    python: str,
    env: dict[str, str],
    cwd: str | None,
    pid: int | None,
    note: Callable[[str], None] | None = None,
) -> None:
    """Import each module with the server's interpreter, the new file in place.

    Raises:
        StepFailed: an import failed (its last line: the NameError, the SyntaxError) or took
            longer than `CHECK_TIMEOUT`.
    """
    if not modules:
        return
    what = f"importing {', '.join(modules)} with the server's interpreter"
    answer = python_check(
        svc, python=python, env=env, cwd=cwd, pid=pid, code=IMPORT_CHECK, argv=modules,
        what=what, note=note,
    )  # fmt: skip
    problem = _refusal(answer, what, CHECK_TIMEOUT)
    if problem:
        raise StepFailed(f"{svc.remote.name}: {problem}; nothing was stopped")
