"""``deploy`` whose worker processes cannot start: ``sys.executable`` names no program (a
removed virtualenv's interpreter), as `tests.integration.test_workers` runs it."""

import runpy
import sys

sys.executable = "/nonexistent/python3"
runpy.run_module("deploy.cli", run_name="__main__", alter_sys=True)
