"""Every action a playbook may name has its step class, imported only when used."""

from __future__ import annotations

import subprocess
import sys

from deploy.config.steps import STEP_MODELS
from deploy.steps import step_class


def test_every_action_has_its_step_class() -> None:
    for kind in STEP_MODELS:
        assert step_class(kind).kind == kind


def test_a_file_only_run_does_not_load_the_service_machinery() -> None:
    code = (
        "import sys\n"
        "from deploy.steps import step_class\n"
        "for kind in ('backup', 'python_insert', 'verify_python', 'verify_tail'):\n"
        "    step_class(kind)\n"
        "loaded = [m for m in ('deploy.services.control', 'deploy.remote.http') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
