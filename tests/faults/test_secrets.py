"""Secrets: a key passphrase named by ``password_env`` never appears in any output or file.

The sandbox sshd accepts keys only, and root's password cannot safely be set here, so the
secret is the passphrase of an encrypted client key (``ssh-keygen -N``): the same code path
(``password_env`` → paramiko's ``passphrase``/``password``). Every byte `deploy` writes — stdout
and stderr at -vv, ``--json``, ``--report``, ``--log-file``, ``history``, ``show``, ``status``,
the history directory, the host's state_dir — is searched for the secret (also base64- and
hex-encoded, in case a dump of bytes sneaks through).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path

import yaml

from tests.faults.conftest import FILES_ONLY, FaultHost, record_check

SECRET = "s3cr3t-Passphrase-7f1c"
ENV = "DEPLOY_TEST_KEY_PASSPHRASE"


def _needles() -> list[bytes]:
    raw = SECRET.encode()
    return [raw, base64.b64encode(raw)[:16], raw.hex().encode()]


def _all_bytes(paths: list[Path]) -> dict[str, bytes]:
    out = {}
    for root in paths:
        if root.is_file():
            out[str(root)] = root.read_bytes()
        elif root.is_dir():
            for path in root.rglob("*"):
                if path.is_file():
                    out[str(path)] = path.read_bytes()
    return out


def test_passphrase_never_appears_anywhere(make_fault_host, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    host: FaultHost = make_fault_host()
    key = tmp_path / "encrypted_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", SECRET, "-C", "enc", "-f", str(key)],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    authorized = host.ssh.workdir / "authorized_keys"
    authorized.write_text(key.with_suffix(".pub").read_text())  # only the encrypted key works
    inventory = yaml.safe_load(host.inventory.read_text())
    entry = inventory["hosts"]["gpu-1"]
    entry["identity_file"] = str(key)
    entry["password_env"] = ENV
    host.inventory.write_text(yaml.safe_dump(inventory))
    report, log = tmp_path / "report.json", tmp_path / "run.log"
    os.environ[ENV] = SECRET
    try:
        outputs = [
            host.deploy(
                "apply",
                "kimi-eagle3",
                *FILES_ONLY,
                "--yes",
                "--json",
                "--report",
                str(report),
                "--log-file",
                str(log),
            ),
            host.deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes", "-vv"),
            host.deploy("status", "--json"),
            host.deploy("history", "--json"),
            host.deploy("rollback", "--yes", "--json"),
        ]
        applied = outputs[0]
        assert applied.exit_code == 0, applied.output
        run_id = json.loads(applied.stdout)["run_id"]
        outputs.append(host.deploy("show", run_id, "--json"))
        os.environ[ENV] = SECRET + "-wrong"
        wrong = host.deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes", "-vv")
        outputs.append(wrong)
        del os.environ[ENV]
        unset = host.deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes")
        outputs.append(unset)
    finally:
        os.environ.pop(ENV, None)
    assert wrong.exit_code == 4, wrong.output
    assert unset.exit_code in (2, 4) and ENV in unset.output, unset.output
    state_home = Path(os.environ["XDG_STATE_HOME"])
    files = _all_bytes([report, log, state_home, host.state_dir, host.deploy.workdir])
    texts = {f"output {i}": o.output.encode() for i, o in enumerate(outputs)} | files
    leaks = [where for where, data in texts.items() for needle in _needles() if needle in data]
    record_check(
        "secret",
        f"key passphrase from password_env: absent from {len(texts)} outputs and files",
        not leaks,
    )
    assert not leaks, leaks
    assert report.exists() and log.exists()


TOKEN = "hf_TokEn-9d2b7e41c0"
BLOB = "vault-Blob-53a1e8"

SECRET_PLAYBOOK = """\
name: secrets
hosts: all
secret_vars: [vault_blob]
vars:
  vault_blob: "BLOB"
  auth_header: "Bearer {{ hf_token }}"
steps:
  - name: Save the model file
    backup: {path: "{{ model_file }}"}
  - name: Note the credentials in the file (shows in the plan's diff)
    append:
      path: "{{ model_file }}"
      text: "# {{ auth_header }} {{ vault_blob }}\\n"
  - name: A check that fails, printing them
    verify_command:
      run: "echo {{ hf_token }} {{ vault_blob }}; echo HF_TOKEN={{ hf_token }} >&2; exit 3"
""".replace("BLOB", BLOB)


class _Receiver:
    """A webhook on 127.0.0.1 that keeps every body it is sent."""

    def __init__(self) -> None:
        import http.server
        import threading

        bodies: list[bytes] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name for it
                bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.bodies = bodies
        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_secret_vars_and_token_names_are_masked_in_every_channel(  # type: ignore[no-untyped-def]
    make_fault_host, tmp_path: Path
) -> None:
    """-e hf_token=... and a secret_vars variable: zero hits in stdout, --json, --report,
    history, --log-file and the webhook's bodies, through a plan diff, a failure and a rollback.
    """
    host: FaultHost = make_fault_host()
    book = tmp_path / "secrets.yaml"
    book.write_text(SECRET_PLAYBOOK)
    report, log = tmp_path / "report.json", tmp_path / "run.log"
    receiver = _Receiver()
    secret_args = ("-e", f"hf_token={TOKEN}")
    try:
        plan = host.deploy("apply", str(book), *secret_args, "--check", "--diff", "-vv")
        failed = host.deploy(
            "apply",
            str(book),
            *secret_args,
            "--yes",
            "--json",
            "--report",
            str(report),
            "--log-file",
            str(log),
            "--notify-url",
            receiver.url,
        )
        verbose = host.deploy("apply", str(book), *secret_args, "--yes", "-vv", "--diff")
        listed = [host.deploy("history", "--json"), host.deploy("history")]
    finally:
        receiver.close()
    assert plan.exit_code == 0, plan.output
    assert "***" in plan.output and "# Bearer ***" in plan.output, plan.output  # the diff, masked
    assert failed.exit_code == 1, failed.output
    assert verbose.exit_code == 1, verbose.output
    assert receiver.bodies, "the failed run notified nobody"
    assert host.file_state() == "before"
    state_home = Path(os.environ["XDG_STATE_HOME"])
    texts = {
        f"output {i}": o.output.encode() for i, o in enumerate([plan, failed, verbose, *listed])
    }
    texts |= {f"webhook {i}": body for i, body in enumerate(receiver.bodies)}
    texts |= _all_bytes([report, log, state_home, host.deploy.workdir])
    needles = [TOKEN.encode(), BLOB.encode()]
    leaks = sorted({where for where, data in texts.items() for n in needles if n in data})
    record_check(
        "secret",
        f"-e hf_token and a secret_vars value: absent from {len(texts)} outputs "
        "(stdout/stderr -vv, --json, --report, history, --log-file, webhook, plan diff)",
        not leaks,
    )
    assert not leaks, leaks
    assert b"***" in report.read_bytes() and b"***" in log.read_bytes()
    # What the host keeps (journals, a server's saved environment) is readable by root only.
    assert host.state_dir.stat().st_mode & 0o077 == 0, oct(host.state_dir.stat().st_mode)
    exposed = [
        f"{p}: {p.stat().st_mode & 0o777:o}"
        for p in host.state_dir.rglob("*")
        if p.is_file() and p.stat().st_mode & 0o077
    ]
    assert not exposed, exposed  # journals (a saved server environment included) are 0600
