"""The plain Fabric script: what a careful engineer writes by hand for the same change.

Run by path (``python bench/fabric_script.py JOB.json``), so the process imports Fabric and
the standard library and nothing of ``deploy``. On every host at once (one thread each):

1. connect with Fabric (host key checked against the sandbox's known_hosts, ``RejectPolicy``;
   no agent, no key search) — Fabric's defaults otherwise, Nagle's algorithm included;
2. read the file over SFTP (``Connection.get``);
3. if the methods are not in it yet: insert them before the ``EntryClass`` line, upload the
   result next to the file (``Connection.put``), and in ONE command keep a copy of the
   original, compile the new file with the host's interpreter, move it into place and print
   the last line; if they are there already (a re-run): compile and print the last line;
4. check that the last line is the ``EntryClass`` one.

That is one SFTP session, one or two file transfers and one exec per host: the least a hand
script does while still being safe (validate before replace, a backup) and idempotent. It has
no lock, no journal, no rollback and no report — the difference is what ``deploy`` charges
for those.

``JOB.json``: ``{"hosts": [{address, port, user, identity_file, known_hosts, model_file}],
"python": ..., "methods": ..., "entry_line": ...}``. Exit 0 if every host ended right, else 1
with one line per failed host on stderr.
"""

from __future__ import annotations

import io
import json
import shlex
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import paramiko
from fabric import Connection

BACKUP_SUFFIX = ".fabric-bak"


def patch(content: str, methods: str, entry_line: str) -> str | None:
    """The file with ``methods`` inserted before the EntryClass line; None if already there."""
    if methods in content:
        return None
    lines = content.splitlines(keepends=True)
    for index, line in enumerate(lines):
        if line.rstrip("\n") == entry_line:
            block = methods.rstrip("\n") + "\n\n\n"
            return "".join([*lines[:index], block, *lines[index:]])
    raise ValueError(f"no line {entry_line!r}")


def one_host(host: dict[str, Any], job: dict[str, Any]) -> str | None:
    """Do the change on one host; None on success, else what went wrong."""
    path = host["model_file"]
    connection = Connection(
        host["address"],
        user=host["user"],
        port=int(host["port"]),
        connect_kwargs={
            "key_filename": host["identity_file"],
            "look_for_keys": False,
            "allow_agent": False,
        },
        connect_timeout=30,
    )
    connection.client.load_host_keys(host["known_hosts"])
    connection.client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        buffer = io.BytesIO()
        connection.get(path, local=buffer)
        new = patch(buffer.getvalue().decode(), job["methods"], job["entry_line"])
        python, quoted = shlex.quote(job["python"]), shlex.quote(path)
        if new is None:
            command = f"{python} -m py_compile {quoted} && tail -n 1 {quoted}"
        else:
            directory, _, name = path.rpartition("/")
            temporary = shlex.quote(f"{directory}/.{name}.fabric-new")
            connection.put(io.BytesIO(new.encode()), remote=f"{directory}/.{name}.fabric-new")
            backup = shlex.quote(path + BACKUP_SUFFIX)
            command = (
                f"cp -p {quoted} {backup} && {python} -m py_compile {temporary} "
                f"&& mv {temporary} {quoted} && tail -n 1 {quoted}"
            )
        result = connection.run(command, hide=True, warn=True, in_stream=False)
        if result.exited != 0:
            return f"{host['port']}: exit {result.exited}: {result.stderr.strip()[-200:]}"
        if result.stdout.strip() != job["entry_line"]:
            return f"{host['port']}: last line is {result.stdout.strip()!r}"
        return None
    except (paramiko.SSHException, OSError, ValueError) as exc:
        return f"{host['port']}: {type(exc).__name__}: {exc}"
    finally:
        connection.close()


def main(argv: list[str]) -> int:
    with open(argv[1]) as handle:
        job = json.load(handle)
    hosts = job["hosts"]
    parallel = int(argv[argv.index("--parallel") + 1]) if "--parallel" in argv else len(hosts)
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(hosts)))) as pool:
        failures = [f for f in pool.map(lambda h: one_host(h, job), hosts) if f]
    for failure in failures:
        print(f"fabric: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
