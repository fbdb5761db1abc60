"""The lock's trust check against an ``EUID`` in the environment, end to end: the real lock
script, session loop and helper start (`deploy.remote.helperboot`) on a `LocalHost` as root.

An attacker who owns a state_dir plants the file helper's kept code (``.helper-code.KEY``: its
checksum guards against damage, not forgery). If the session's environment brings
``EUID=<the attacker's uid>`` (sshd SetEnv/AcceptEnv, sudo keeping the environment, pam_env)
and the trust check believed bash's ``$EUID``, root would start the attacker's code.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from deploy.errors import StateDirUntrusted
from deploy.remote import helperboot
from deploy.remote.hostfiles import HELPER_SOURCE
from deploy.remote.local import LocalHost
from deploy.remote.lock import acquire

NOBODY = 65534

#: Run by the interpreter the lock's loop starts the helper on: the kept code's name for
#: ``argv[1]`` (the helper's source) and that file's bytes, forged to write ``argv[2]``.
_FORGE = """import marshal, sys
from hashlib import sha256
magic = sys.modules["_frozen_importlib_external"].MAGIC_NUMBER
key = sha256(magic + sys.version.encode("utf-8", "replace") + sys.argv[1].encode("utf-8"))
body = marshal.dumps(compile("import os\\nopen(%r, 'w').write(str(os.getuid()))\\n"
                             % sys.argv[2], "<evil>", "exec"))
sys.stdout.buffer.write(key.hexdigest().encode() + b"\\n" + sha256(body).digest() + body)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="making another user's directory needs root")
def test_an_euid_in_the_environment_never_gets_root_to_run_planted_code(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    state = tmp_path / "attacker-state"
    state.mkdir(mode=0o700)
    marker = tmp_path / "ran-as"
    python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else "python3"
    forged = subprocess.run(
        [python, "-I", "-c", _FORGE, HELPER_SOURCE, str(marker)], capture_output=True, check=True
    ).stdout
    key, _, data = forged.partition(b"\n")
    planted = state / (helperboot.PREFIX + key.decode())
    planted.write_bytes(data)
    for path in (state, planted):
        os.chown(path, NOBODY, NOBODY)
    with LocalHost("local", home=str(home), env={"EUID": str(NOBODY)}) as host:
        try:
            lock = acquire(host, str(state), {"run_id": "t"})
        except StateDirUntrusted:
            lock = None
        if lock is not None:  # trusted: the helper starts in the background; give it time
            for _ in range(100):
                if marker.exists():
                    break
                time.sleep(0.05)
            lock.release()
    assert not marker.exists(), f"root ran the planted code (uid {marker.read_text()})"
    assert lock is None, "another user's state_dir was trusted"
