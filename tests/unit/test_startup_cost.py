"""Start-up and exit cost guards: what `deploy --help`, `deploy validate` and a run load and
build, and how the program ends.

A ``deploy`` that contacts a host spends its first ~0.4 CPU-s in its own interpreter before
the first SSH message (imports, building pydantic models); on a loaded machine that is most
of the gap to a bare paramiko login (docs/performance.md). No wall-time assertion here (the
machine is shared): each test runs a command in a fresh interpreter and checks *what* it
imported or built, so that a change putting something heavy back on the hot path fails, and
that the program still skips the interpreter's teardown after its last output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: Never needed before a command contacts a host (and `validate` never contacts one).
NETWORK_STACK = ("paramiko", "fabric", "invoke", "cryptography", "nacl", "bcrypt")
#: Not needed by any command's start-up (templating is deploy's own; see deploy.config.template).
NEVER_AT_START = ("jinja2", "matplotlib", "requests", "urllib3")


def _fresh(code: str) -> dict[str, object]:
    """Run ``code`` in a fresh interpreter from the repository; it prints one JSON line."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


_RUN_CLI = """
import json, sys
from deploy.cli import main
try:
    main({args!r})
except SystemExit as exc:
    code = exc.code
print(json.dumps({{"code": code, "modules": sorted(sys.modules)}}))
"""


def _top_level(modules: object) -> set[str]:
    assert isinstance(modules, list)
    return {name.split(".")[0] for name in modules}


def _loaded(modules: object, prefix: str) -> list[str]:
    assert isinstance(modules, list)
    return [name for name in modules if name == prefix or name.startswith(prefix + ".")]


def test_help_loads_no_models_no_yaml_and_no_ssh() -> None:
    result = _fresh(_RUN_CLI.format(args=["--help"]))
    assert result["code"] == 0
    top = _top_level(result["modules"])
    for heavy in ("pydantic", "pydantic_core", "yaml", *NETWORK_STACK, *NEVER_AT_START):
        assert heavy not in top, f"deploy --help imports {heavy}"
    for layer in ("deploy.config", "deploy.engine", "deploy.remote", "deploy.steps"):
        assert not _loaded(result["modules"], layer), f"deploy --help imports {layer}"


def test_validate_loads_no_ssh_stack_no_engine_and_no_reports() -> None:
    result = _fresh(_RUN_CLI.format(args=["validate", "-i", "hosts.yaml"]))
    assert result["code"] == 0
    top = _top_level(result["modules"])
    for heavy in (*NETWORK_STACK, *NEVER_AT_START):
        assert heavy not in top, f"deploy validate imports {heavy}"
    for layer in ("deploy.engine", "deploy.remote", "deploy.report", "deploy.schema"):
        assert not _loaded(result["modules"], layer), f"deploy validate imports {layer}"


_BUILDS = """
import json
from pathlib import Path
from deploy.config import load
from deploy.config import steps as catalogue
from deploy.config.playbook import Playbook

inv = load.load_inventory(Path("hosts.yaml"))
pb = load.load_playbook(Path("playbooks/kimi-eagle3.yaml"))
load.resolve(inv, pb, extra_vars={}, limit=None, tags=None, skip_tags=["service"])
used = sorted({catalogue.step_kind(raw) for raw in pb.data["steps"]})
built = sorted(k for k, m in catalogue.STEP_MODELS.items() if m.__pydantic_complete__)
print(json.dumps({
    "used": used,
    "built": built,
    "union_built": catalogue.step_adapter.cache_info().currsize,  # the error-only validator
    "playbook_schema": repr(Playbook.__pydantic_core_schema__),
    "step_models": [m.__name__ for m in catalogue.STEP_MODELS.values()],
}))
"""


def test_a_run_builds_only_the_step_models_its_playbook_uses_and_never_the_union() -> None:
    # The union of every action's model is built only to word the error of a refused step;
    # Playbook validates each step with its own model (config.steps.OwnModel).
    result = _fresh(_BUILDS)
    used, built, names = result["used"], result["built"], result["step_models"]
    assert isinstance(used, list) and isinstance(names, list)
    assert 0 < len(used) < len(names), "the shipped playbook no longer shows the point"
    assert built == used, "step models built beyond those the playbook uses"
    assert result["union_built"] == 0, "the whole step union was built for valid input"
    schema = result["playbook_schema"]
    assert isinstance(schema, str)
    inlined = [name for name in names if f"'{name}'" in schema]
    assert not inlined, f"Playbook's validator inlines step models again: {inlined}"


_APPLY = """
import json, sys
before = set(sys.modules)  # the interpreter's own start-up (site, .pth files): not ours
from pathlib import Path
from tests.unit.local_rig import LocalRig

rig = LocalRig(Path({root!r}))
model = rig.files / "kimi_k25.py"
model.write_text(
    "class KimiK25ForConditionalGeneration:\\n    def forward(self):\\n        return 1\\n\\n\\n"
    "EntryClass = [KimiK25ForConditionalGeneration]\\n"
)
rig.write_inventory(model_file=str(model), sglang_python=sys.executable)
playbook = Path("playbooks/kimi-eagle3.yaml")
runs = [rig.apply(playbook, skip_tags=["service"]) for _ in range(2)]
print(json.dumps({{
    "outcomes": [[host.outcome for host in run.hosts] for run in runs],
    "modules": sorted(sys.modules),
    "new_top": sorted({{name.split(".")[0] for name in set(sys.modules) - before}}),
}}))
"""

#: What a change run and its no-change re-run may import beyond the standard library: the
#: product's dependencies and theirs (paramiko brings cryptography, nacl, bcrypt, invoke;
#: ``cython_runtime`` is the module Cython-compiled extensions such as libyaml's share).
APPLY_THIRD_PARTY = {
    "cython_runtime",
    "annotated_types",
    "bcrypt",
    "cryptography",
    "invoke",
    "nacl",
    "paramiko",
    "pydantic",
    "pydantic_core",
    "typing_extensions",
    "typing_inspection",
    "yaml",
}
#: Loaded only for what a file-only run does not do: wording a refused input, schemas and
#: docs, the demo and timers, the steps it does not run (a diff to apply) and the service
#: machinery of the skipped steps (SSH-tunnelled HTTP, nvidia-smi, stopping and starting a
#: server, the desired command line and its edits, the load of the throughput gate).
APPLY_NEVER = (
    "deploy.edits.patch",
    "deploy.edits.cmdline",
    "deploy.services",
    "deploy.services.desired",
    "deploy.services.state",
    "deploy.config.modelpath",
    "deploy.schema",
    "deploy.report.json_schema",
    "deploy.demo",
    "deploy.schedule",
    "deploy.sandbox",
    "deploy.remote.http",
    "deploy.checks.nvidia_smi",
    "deploy.services.control",
    "deploy.services.load",
)


def test_a_file_run_and_its_rerun_load_nothing_they_do_not_use(tmp_path: Path) -> None:
    # The engine runs kimi-eagle3's file steps on a LocalHost (`tests.unit.local_rig`): the
    # same config, engine, steps and host-side programs as `deploy apply`, without SSH.
    result = _fresh(_APPLY.format(root=str(tmp_path / "host")))
    assert result["outcomes"] == [["changed"], ["unchanged"]]
    new_top = result["new_top"]
    assert isinstance(new_top, list)
    stdlib = set(sys.stdlib_module_names)
    foreign = {name for name in new_top if name not in stdlib and not name.startswith("_")}
    assert foreign <= {"deploy", "tests", *APPLY_THIRD_PARTY}, (
        f"a run imports {sorted(foreign - {'deploy', 'tests', *APPLY_THIRD_PARTY})}"
    )
    for heavy in NEVER_AT_START:
        assert heavy not in new_top, f"a run imports {heavy}"
    for module in APPLY_NEVER:
        assert not _loaded(result["modules"], module), f"a file run imports {module}"


#: ``deploy`` as the program runs it (the console script calls ``main()``: it parses
#: ``sys.argv``), with an exit handler that says whether the interpreter's teardown ran.
_AS_PROGRAM = """
import atexit, os, sys, threading
atexit.register(lambda: os.write(2, b"teardown ran\\n"))
if os.environ.get("BUSY_THREAD"):  # a non-daemon thread that ends only with the main one
    threading.Thread(target=threading.main_thread().join).start()
from deploy.cli import main
main()
"""


def _as_program(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _AS_PROGRAM, *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", **env},
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_program_ends_without_the_interpreter_teardown_and_loses_no_output() -> None:
    # The teardown (a last full collection, freeing every object) was ~45 ms of `validate`'s
    # CPU after its last line; the output is flushed first, and the exit status is the same.
    ok = _as_program("validate", "-i", "hosts.yaml")
    assert (ok.returncode, ok.stdout) == (0, "ok: hosts.yaml and 3 playbook(s) in playbooks\n")
    assert "teardown ran" not in ok.stderr
    bad = _as_program("validate", "-i", "missing.yaml")
    assert bad.returncode == 2
    assert bad.stderr == (
        "inventory not found: missing.yaml (use -i FILE or set DEPLOY_INVENTORY)\n"
    )


def test_the_normal_exit_stays_when_a_thread_still_runs_or_deploy_is_embedded() -> None:
    busy = _as_program("validate", "-i", "hosts.yaml", BUSY_THREAD="1")
    assert busy.returncode == 0
    assert busy.stderr == "teardown ran\n", "a non-daemon thread was cut off"
    # Called with its arguments (a test, the bench's profiler), deploy raises SystemExit
    # into its caller, which goes on: the _fresh helper prints after it.
    embedded = _fresh(_RUN_CLI.format(args=["validate", "-i", "hosts.yaml"]))
    assert embedded["code"] == 0
