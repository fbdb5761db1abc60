"""The host-side helpers take their input on stdin, never on their command line (issue 13
item 7, issue 14: secrets in /proc/*/cmdline; "Argument list too long" at ~128 KB)."""

from __future__ import annotations

import time
from pathlib import Path

from deploy.config.services import ServiceSpec
from deploy.sandbox.sshd import SshHost
from deploy.services.control import ServiceControl
from tests.integration.conftest import open_remote

#: 16 variables of 64 KiB: 1 MiB of environment (one variable may not pass 128 KiB, the
#: kernel's MAX_ARG_STRLEN, whatever carries it).
VARS = 16
SIZE = 64 * 1024


def test_a_one_mib_environment_reaches_the_started_server(
    ssh_host: SshHost, tmp_path: Path
) -> None:
    out = tmp_path / "seen"
    secret = "hf_" + "s3cr3t" * 4
    env = {f"BIG{i}": chr(ord("a") + i) * SIZE for i in range(VARS)}
    env["HF_TOKEN"] = secret
    remote = open_remote(ssh_host)
    try:
        control = ServiceControl(remote, str(tmp_path / "state"), "big", ServiceSpec(port=1))
        # The exact form is undo's: start an adopted server again with its whole environment.
        script = (
            'n=0; for v in $(env | cut -d= -f1 | grep "^BIG"); do n=$((n+1)); done; '
            f'printf "%s %s %s" "$n" "${{#BIG3}}" "$HF_TOKEN" > {out}'
        )
        started = control.start(argv=["/bin/sh", "-c", script], env=env, cwd=str(tmp_path))
        assert started.get("pid"), started
        deadline = time.monotonic() + 20
        while (not out.exists() or not out.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert out.read_text() == f"{VARS} {SIZE} {secret}"
    finally:
        remote.close()
