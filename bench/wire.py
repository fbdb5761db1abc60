"""``python -m bench.wire --rtt 100``: every SSH message of one run, timed, through a slow link.

On one sandbox host reached through `bench.delay` at ``--rtt`` ms, runs the floor, a
``deploy`` change run and its no-change re-run, each as its own process with paramiko's
packetizer wrapped (in the child only, at run time: deploy itself is not modified) so that
every message sent and received is logged with its time and SSH message type. Then prints,
per run, the client's **waits** in order: each time the client had nothing left to send and
sat until a message came back, with the messages that crossed in that round trip. On a real
network each wait costs one round-trip time; their count is what ``deploy`` must keep low
(issue 17). The TCP connect and the version banners are not SSH messages: they cost one more
round trip before the first one listed (the same for every tool).

A wait is counted when a received message arrived at least half an RTT after the client's
last send and the client sent nothing in between: the time it spent for that answer.
Loopback only, like the rest of the bench.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.markdown import table
from bench.window import INITIAL_SEGMENTS

if TYPE_CHECKING:
    from bench.fleet import Fleet

#: In the child: where to write the log (one JSON line per message).
_LOG_ENV = "DEPLOY_BENCH_WIRE_LOG"


def _instrument(log_path: str) -> None:
    """Wrap paramiko's Packetizer so every message is logged with its time (child only)."""
    import paramiko.packet as packet
    from paramiko.common import MSG_NAMES

    handle = open(log_path, "a", buffering=1)  # noqa: SIM115  # lives as long as the process
    send, read = packet.Packetizer.send_message, packet.Packetizer.read_message

    def name(cmd: int) -> str:
        return str(MSG_NAMES.get(cmd, f"${cmd:x}"))

    def logged_send(self: Any, data: Any) -> Any:
        raw = data.asbytes()
        line = {"t": time.monotonic(), "dir": ">", "msg": name(raw[0]), "len": len(raw)}
        handle.write(json.dumps(line) + "\n")
        return send(self, data)

    def logged_read(self: Any) -> Any:
        cmd, message = read(self)
        line = {"t": time.monotonic(), "dir": "<", "msg": name(cmd), "len": len(message.asbytes())}
        handle.write(json.dumps(line) + "\n")
        return cmd, message

    packet.Packetizer.send_message = logged_send
    packet.Packetizer.read_message = logged_read
    handle.write(json.dumps({"t": time.monotonic(), "dir": "start"}) + "\n")


def child(argv: list[str]) -> None:
    """``python -m bench.wire --child -m MODULE ARGS`` or ``--child SCRIPT ARGS``."""
    _instrument(os.environ[_LOG_ENV])
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        runpy.run_path(argv[0], run_name="__main__")


def waits(lines: list[dict[str, Any]], rtt: float) -> list[tuple[float, list[str], list[str]]]:
    """(ms the client waited, what it last sent, what came back) for every wait, in order."""
    result: list[tuple[float, list[str], list[str]]] = []
    sent: list[str] = []
    last_send = None
    got: list[str] = []
    waited = 0.0
    for line in lines:
        if line["dir"] == ">":
            if got:
                result.append((waited, sent, got))
                sent, got = [], []
            sent.append(line["msg"])
            last_send = line["t"]
        elif line["dir"] == "<":
            if got:
                got.append(line["msg"])
            elif last_send is not None and line["t"] - last_send >= rtt / 2:
                waited = (line["t"] - last_send) * 1000
                got = [line["msg"]]
    if got:
        result.append((waited, sent, got))
    return result


def _short(names: list[str]) -> str:
    out: list[str] = []
    for item in names:
        if out and out[-1].rsplit(" ×", 1)[0] == item:
            head, _, count = out[-1].partition(" ×")
            out[-1] = f"{head} ×{int(count or 1) + 1}"
        else:
            out.append(item)
    return ", ".join(out)


#: What a wait was for, by the first message that ended it (read from the message logs of
#: deploy at the time of writing; the channel data of deploy's runs by its order).
_BY_MESSAGE = {
    "kexinit": "the server's KEXINIT (sent with its banner; a wait only on a slow server)",
    "kex31": "key exchange (curve25519): the server's reply",
    "service-accept": "NEWKEYS, then the ssh-userauth service request",
    "userauth-success": "public-key authentication: one request, the right key first",
    "userauth-failure": "an authentication attempt refused (a key tried in vain)",
    "channel-open-success": "channel open",
    "channel-window-adjust": "the exec's reply: sshd opens a session with a zero window and "
    "grants it with the reply, so no input can go before it",
    "channel-success": "the exec's reply",
}
_DATA = {
    "floor": [],
    "deploy change run": [
        "the lock's answer: login shell, trust check, flock, run scan, and the file and the "
        "compile check sent with the lock",
        "the batch, sent without waiting: the writes, saved copy and journal records, the "
        "compile check of the new bytes and the commit (the journal's end record, durable, "
        "which the host writes only if everything before it succeeded)",
    ],
    "deploy no-change re-run": [
        "the lock's answer, with the file and the recorded compile check: nothing to do"
    ],
}


def causes(label: str, found: list[tuple[float, list[str], list[str]]]) -> list[str]:
    """What each wait of a run was for (empty where the log says something unexpected)."""
    data = iter(_DATA.get(label, []))
    out = []
    for _, _, got in found:
        first = got[0]
        # deploy sends nothing after its exec (the lock's requests are in the command line),
        # so the exec's reply and the lock's answer end one wait together.
        if first == "channel-data" or (
            first in ("channel-window-adjust", "channel-success") and "channel-data" in got
        ):
            out.append(next(data, "more channel data (not expected when this was written)"))
        elif first in ("channel-eof", "channel-request", "channel-close"):
            out.append("the command's end: EOF and exit status (`true` ran in the login shell)")
        else:
            out.append(_BY_MESSAGE.get(first, ""))
    return out


@dataclass
class Probe:
    """One run's waits on the wire (`waits`) and its process wall time."""

    label: str
    waits: list[tuple[float, list[str], list[str]]]
    seconds: float
    exit_status: int
    #: ms from the instrumented process's start to its first SSH message: client CPU before
    #: the connection (imports, configuration) plus the TCP connect and the banners.
    first_message_ms: float
    #: Bytes that crossed the link (TCP payload, compressed if the tool compresses), each way.
    wire_up: int = 0
    wire_down: int = 0
    #: The SSH messages' own bytes (before compression and encryption), each way.
    ssh_up: int = 0
    ssh_down: int = 0


def probe(
    direct: Fleet, rtt_ms: float, base: Path, initial_window: int = INITIAL_SEGMENTS
) -> list[Probe]:
    """The floor, a change run and a re-run on ``direct``'s first host through a `DelayNetwork`
    of ``rtt_ms``, each with its SSH messages logged (the host's files are reset first).

    deploy runs as ``python -m deploy.cli`` (what its console script runs), in this
    interpreter, so that the wrapper can load first."""
    from bench.delay import DelayNetwork
    from bench.fleet import Fleet as Hosts
    from bench.fleet import through
    from bench.runner import run
    from bench.tools import Command, DeployTool, FloorTool
    from bench.workload import PLAYBOOK

    repo = Path(__file__).resolve().parents[1]
    playbook = repo / "playbooks" / f"{PLAYBOOK}.yaml"
    tool = DeployTool([sys.executable, "-m", "deploy.cli"], playbook)
    floor = FloorTool(sys.executable)
    found: list[Probe] = []
    with DelayNetwork(rtt_ms, initial_window) as net:
        first = direct.hosts[0]
        single = Hosts(direct.sandbox, [first], direct.workdir, direct.original, direct.python)
        fleet = through(single, {first.name: net.forward(first.port)}, base / "wire", repo)
        floor.prepare(fleet, 1)
        direct.reset()
        runs = [
            ("floor", floor.command(fleet, 1)),
            ("deploy change run", tool.command(fleet, 1)),
            ("deploy no-change re-run", tool.command(fleet, 1)),
        ]
        for index, (label, command) in enumerate(runs):
            log = base / f"wire-{index}.jsonl"
            log.unlink(missing_ok=True)
            wrapped = [sys.executable, "-m", "bench.wire", "--child", *command.argv[1:]]
            python_path = os.pathsep.join(
                p for p in (str(repo), command.env.get("PYTHONPATH", "")) if p
            )
            env = {**command.env, _LOG_ENV: str(log), "PYTHONPATH": python_path}
            before = dict(net.carried)
            outcome = run(Command(wrapped, command.cwd, env))
            lines = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
            sends = [x["t"] for x in lines if x["dir"] == ">"]
            began = lines[0]["t"] if lines else 0.0
            found.append(
                Probe(
                    label,
                    waits(lines, rtt_ms / 1000),
                    outcome.seconds,
                    outcome.exit_status,
                    (sends[0] - began) * 1000 if sends else 0.0,
                    net.carried["up"] - before["up"],
                    net.carried["down"] - before["down"],
                    sum(x.get("len", 0) for x in lines if x["dir"] == ">"),
                    sum(x.get("len", 0) for x in lines if x["dir"] == "<"),
                )
            )
        direct.reset()
    return found


def render(probes: list[Probe], rtt_ms: float) -> list[str]:
    """The "Where the round trips go" section of docs/performance.md."""
    if not probes:
        return []
    lines = [
        "## Where the round trips go",
        "",
        f"Every SSH message of one run of each kind, one host, through the delay proxy at "
        f"RTT {rtt_ms:g} ms (`python -m bench.wire --rtt {rtt_ms:g}`: paramiko's packetizer "
        "wrapped in the child process; deploy itself unchanged). A **wait** is a time the "
        "client had sent everything it could and sat until an answer came: each costs one "
        "RTT plus whatever the host did meanwhile. The TCP connect and the version banners "
        'come before the first row, the same for every tool. "before the first message" '
        "is the client's own start-up (imports, configuration) plus that connect: CPU, not "
        'round trips. The bytes "on the link" are what the proxy carried (TCP payload: '
        "encrypted, compressed where the tool compresses); through its congestion-window "
        "model a burst larger than a fresh connection's first window (10 segments, 14.5 kB) "
        "waits a round trip more per doubling, which a wait row then shows as longer.",
        "",
        *_summary(probes),
    ]
    for found in probes:
        status = "" if found.exit_status == 0 else f", **exit status {found.exit_status}**"
        lines += [
            f"**{found.label}**: {len(found.waits)} waits, process {found.seconds:.2f} s, "
            f"{found.first_message_ms:.0f} ms before the first message, "
            f"{_kb(found.wire_up)} sent and {_kb(found.wire_down)} received on the link "
            f"(SSH messages: {_kb(found.ssh_up)} and {_kb(found.ssh_down)} before compression)"
            f"{status}",
            "",
        ]
        what = causes(found.label, found.waits)
        rows = [
            [str(i), f"{ms:.0f}", _short(sent), _short(got), why]
            for i, ((ms, sent, got), why) in enumerate(zip(found.waits, what, strict=True), 1)
        ]
        lines += [
            *table(["#", "waited ms", "client sent", "then received", "what"], rows),
            "",
        ]
    return lines


def _kb(size: int) -> str:
    return f"{size / 1000:.1f} kB"


def _summary(probes: list[Probe]) -> list[str]:
    """How deploy's runs compare with the floor, in waits and in start-up before the wire."""
    by = {found.label: found for found in probes}
    floor = by.get("floor")
    if floor is None:
        return []
    said = []
    for label in ("deploy change run", "deploy no-change re-run"):
        found = by.get(label)
        if found is None or found.exit_status != 0:
            continue
        extra = len(found.waits) - len(floor.waits)
        late = found.first_message_ms - floor.first_message_ms
        said.append(
            f"the {label.removeprefix('deploy ')} waits {extra:+d} time(s) against the floor "
            f"and sends its first message {late:+.0f} ms later than the floor does "
            f"(process {found.seconds - floor.seconds:+.2f} s)"
        )
    if not said:
        return []
    return [
        "In this run, " + "; ".join(said) + ". The rest of the gap between the processes is "
        "the client's CPU and the host's work inside the waits (login shell, file helper, "
        "compile), not round trips.",
        "",
    ]


def report(found: Probe) -> None:
    print(
        f"\n### {found.label}: {len(found.waits)} waits after the banners, "
        f"process {found.seconds:.2f} s, {found.first_message_ms:.0f} ms before the first message, "
        f"{_kb(found.wire_up)} sent / {_kb(found.wire_down)} received on the link\n"
    )
    print("| # | waited ms | client sent | then received | what |")
    print("| --- | --- | --- | --- | --- |")
    what = causes(found.label, found.waits)
    for index, ((ms, sent, got), why) in enumerate(zip(found.waits, what, strict=True), 1):
        print(f"| {index} | {ms:.0f} | {_short(sent)} | {_short(got)} | {why} |")


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if arguments and arguments[0] == "--child":
        child(arguments[1:])
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.wire")
    parser.add_argument("--rtt", type=float, default=100.0)
    parser.add_argument("--initial-window", type=int, default=INITIAL_SEGMENTS)
    options = parser.parse_args(arguments)

    from bench.deploybuild import REPO, ensure_bytecode
    from bench.fleet import start_fleet
    from deploy.sandbox.sshd import SshdSandbox
    from deploy.sandbox.wheels import PATCH_NEEDED, kimi_k25_source

    ensure_bytecode()
    base = Path(tempfile.mkdtemp(prefix="deploy-wire-"))
    print(f"## SSH messages at RTT {options.rtt:g} ms, N = 1 (`python -m bench.wire`)")
    with SshdSandbox(base / "sandbox") as sandbox:
        direct = start_fleet(sandbox, 1, kimi_k25_source(PATCH_NEEDED), REPO, base / "ws")
        for found in probe(direct, options.rtt, base, options.initial_window):
            if found.exit_status != 0:
                print(f"{found.label}: exit status {found.exit_status}", file=sys.stderr)
            report(found)
    print(f"\nlogs kept in {base}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
