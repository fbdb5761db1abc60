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
from pathlib import Path
from typing import Any

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


def report(label: str, log: Path, rtt_ms: float, wall: float) -> int:
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    found = waits(lines, rtt_ms / 1000)
    print(f"\n### {label}: {len(found)} waits after the banners, process {wall:.2f} s\n")
    print("| # | waited ms | client sent | then received |")
    print("| --- | --- | --- | --- |")
    for index, (ms, sent, got) in enumerate(found, 1):
        print(f"| {index} | {ms:.0f} | {_short(sent)} | {_short(got)} |")
    return len(found)


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if arguments and arguments[0] == "--child":
        child(arguments[1:])
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.wire")
    parser.add_argument("--rtt", type=float, default=100.0)
    parser.add_argument("--keep", action="store_true", help="keep the message logs")
    options = parser.parse_args(arguments)

    from bench.__main__ import REPO, ensure_bytecode
    from bench.delay import DelayNetwork
    from bench.fleet import start_fleet, through
    from bench.runner import run
    from bench.tools import Command, DeployTool, FloorTool
    from bench.workload import PLAYBOOK
    from deploy.sandbox.sshd import SshdSandbox
    from deploy.sandbox.wheels import PATCH_NEEDED, kimi_k25_source

    ensure_bytecode()
    playbook = REPO / "playbooks" / f"{PLAYBOOK}.yaml"
    deploy = DeployTool([sys.executable, "-m", "deploy.cli"], playbook)
    floor = FloorTool(sys.executable)
    base = Path(tempfile.mkdtemp(prefix="deploy-wire-"))
    print(f"## SSH messages at RTT {options.rtt:g} ms, N = 1 (`python -m bench.wire`)")
    with SshdSandbox(base / "sandbox") as sandbox, DelayNetwork(options.rtt) as net:
        direct = start_fleet(sandbox, 1, kimi_k25_source(PATCH_NEEDED), REPO, base / "ws")
        ports = {h.name: net.forward(h.port) for h in direct.hosts}
        fleet = through(direct, ports, base / "slow", REPO)
        floor.prepare(fleet, 1)
        direct.reset()
        runs = [
            ("floor", floor.command(fleet, 1)),
            ("deploy change run", deploy.command(fleet, 1)),
            ("deploy no-change re-run", deploy.command(fleet, 1)),
        ]
        for index, (label, command) in enumerate(runs):
            log = base / f"wire-{index}.jsonl"
            wrapped = [sys.executable, "-m", "bench.wire", "--child", *command.argv[1:]]
            env = {**command.env, _LOG_ENV: str(log), "PYTHONPATH": str(REPO)}
            outcome = run(Command(wrapped, command.cwd, env))
            if outcome.exit_status != 0:
                print(f"{label}: exit status {outcome.exit_status}", file=sys.stderr)
            report(label, log, options.rtt, outcome.seconds)
    if options.keep:
        print(f"\nlogs kept in {base}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
