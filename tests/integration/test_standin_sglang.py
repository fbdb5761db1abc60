"""The SGLang stand-in and the fake nvidia-smi, run for real as processes on loopback.

Each test builds a host tree the way the sandbox does (``<root>/sglang/python/sglang/`` with
SGLang's real ``srt/models/kimi_k25.py`` from the 0.5.9 or 0.5.10 wheel, ``<root>/bin/nvidia-smi``)
and starts the server with SGLang's own command line, in its own session as the restart step
does. Neither side is told where the GPU state lives: the default layout must agree. Every wait
polls against a deadline; every process started is killed by its session at teardown.
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest

from deploy.checks.nvidia_smi import (
    COMPUTE_APPS_QUERY,
    GPU_QUERY,
    parse_compute_apps,
    parse_query_gpu,
)
from deploy.sandbox.gpu_host import write_server_flags
from deploy.sandbox.ports import free_port
from deploy.sandbox.wheels import ALREADY_PATCHED, PATCH_NEEDED, kimi_k25_source, server_flags

FAKE = Path(__file__).parents[2] / "deploy" / "sandbox" / "fake_sglang"
FIXTURES = Path(__file__).parents[1] / "fixtures" / "nvidia-smi"
READY = "The server is fired up and ready to roll!"
NO_SET_EAGLE3 = (
    "AttributeError: 'KimiK25ForConditionalGeneration' object has no attribute "
    "'set_eagle3_layers_to_capture'"
)
EAGLE3 = [
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "models/draft",  # relative to the server's cwd, the tree's root (see make_tree)
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
]
LOAD = 0.5
T = TypeVar("T")


def poll(check: Callable[[], T], what: str, timeout: float = 10.0) -> T:
    """``check()``'s first truthy value, tried every 20 ms until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as error:
            assert error.errno == errno.EADDRINUSE
            return False
        return True


def request(port: int, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """(status, parsed JSON or None); raises ConnectionRefusedError while the port is unbound."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        data = body if isinstance(body, bytes | None) else json.dumps(body).encode()
        connection.request(method, path, body=data, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        raw = response.read()
        return response.status, json.loads(raw) if raw else None
    finally:
        connection.close()


def health(port: int) -> int | str:
    try:
        return request(port, "GET", "/health")[0]
    except ConnectionRefusedError:
        return "refused"


def gpu_holders(root: Path) -> list[tuple[int, str]]:
    """(pid, name) of each compute process the host tree's nvidia-smi lists."""
    run = subprocess.run(
        [sys.executable, root / "bin" / "nvidia-smi", *shlex.split(COMPUTE_APPS_QUERY)[1:]],
        env=clean_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    return [(app.pid, app.process_name) for app in parse_compute_apps(run.stdout)]


def session_members(sid: int) -> list[int]:
    """Live (non-zombie) processes of session ``sid``: the server and its children."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[3] == str(sid) and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SGLANG_STANDIN_", "NVIDIA_SMI_STANDIN_", "PYTHONPATH"))
    }
    return {**env, **extra}


def make_tree(root: Path, model_source: bytes) -> Path:
    shutil.copytree(
        FAKE / "sglang",
        root / "sglang" / "python" / "sglang",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    models = root / "sglang" / "python" / "sglang" / "srt" / "models"
    models.mkdir(parents=True)
    (models / "kimi_k25.py").write_bytes(model_source)
    (root / "bin").mkdir()
    shutil.copy2(FAKE / "bin" / "nvidia-smi", root / "bin" / "nvidia-smi")
    write_server_flags(root / "sglang" / "python" / "sglang")
    draft = root / "models" / "draft"  # EAGLE3's draft path: a local model directory
    draft.mkdir(parents=True)
    (draft / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"]}')
    return root


@pytest.fixture(scope="module")
def sources() -> dict[str, bytes]:
    old = kimi_k25_source(PATCH_NEEDED)
    methods = b"".join(
        b"\n    def %s(self, *args):\n        pass\n" % name
        for name in (b"set_eagle3_layers_to_capture", b"get_embed_and_head", b"set_embed_and_head")
    )
    return {
        "0.5.9": old,
        "0.5.10": kimi_k25_source(ALREADY_PATCHED),
        "appended": old + methods.replace(b"\n    ", b"\n"),
        "broken": old + b"\n)\n",
    }


class Server:
    """One stand-in process started with SGLang's command line in its own session."""

    def __init__(self, root: Path, flags: list[str], port: int, **config: str) -> None:
        self.root, self.port = root, port
        name = f"server-{port}-{time.monotonic_ns()}"
        self.out, self.err = root / f"{name}.out", root / f"{name}.err"
        env = clean_env(
            PYTHONPATH=str(root / "sglang" / "python"),
            **{
                "SGLANG_STANDIN_LOAD_SECONDS": str(LOAD),
                "SGLANG_STANDIN_WARMUP_SECONDS": "0.5",
                **{f"SGLANG_STANDIN_{k.upper()}": v for k, v in config.items()},
            },
        )
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "sglang.launch_server",
                    "--model-path",
                    "/models/kimi",
                    "--port",
                    str(port),
                    *flags,
                ],
                cwd=root,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        self.started = time.monotonic()

    def log(self) -> str:
        return self.out.read_text()

    def stderr(self) -> str:
        return self.err.read_text()

    def exit_status(self, timeout: float = 10.0) -> int:
        return self.process.wait(timeout)

    def wait_ready(self) -> None:
        poll(lambda: health(self.port) == 200, "health 200")

    def kill_session(self) -> None:
        for pid in session_members(self.process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.kill()
        self.process.wait()


@pytest.fixture
def start(tmp_path: Path, sources: dict[str, bytes]) -> Iterator[Callable[..., Server]]:
    """``start(version, *flags, port=None, **config)``: a server on a fresh tree (or ``tree``)."""
    servers: list[Server] = []

    def _start(
        version: str, *flags: str, port: int | None = None, tree: Path | None = None, **config: str
    ) -> Server:
        root = tree or make_tree(tmp_path / f"{version}-{len(servers)}", sources[version])
        servers.append(Server(root, list(flags), port or free_port(), **config))
        return servers[-1]

    yield _start
    for server in servers:
        server.kill_session()


def test_lifecycle_like_sglang(start: Callable[..., Server]) -> None:
    # --tp abbreviates --tp-size; 0.5.9's other flags are accepted, with their values
    server = start("0.5.9", "--tp", "1", "--enable-metrics", "--max-running-requests", "64")
    seen: list[int | str] = []

    def observe() -> bool:
        state = health(server.port)
        if not seen or seen[-1] != state:
            seen.append(state)
        return state == 200

    poll(observe, "the server to become healthy")
    assert seen == ["refused", 503, 200]
    log = server.log()
    assert "tp_size=1" in log and "max_running_requests='64'" in log
    steps = ["Load weight begin", "Load weight end", "Capture cuda graph begin", READY]
    assert [log.index(step) for step in steps] == sorted(log.index(step) for step in steps)

    ((holder_pid, holder_name),) = gpu_holders(server.root)
    assert holder_name == "sglang::scheduler_TP0"
    stat = Path(f"/proc/{holder_pid}/stat").read_text().rsplit(")", 1)[1].split()
    assert int(stat[1]) == server.process.pid  # its parent is the server
    assert Path(f"/proc/{holder_pid}/comm").read_text().strip() == "sglang::schedul"

    status, info = request(server.port, "GET", "/model_info")
    assert status == 200 and info["model_path"] == "/models/kimi" and info["is_generation"]
    status, out = request(
        server.port,
        "POST",
        "/generate",
        {"text": "Say hi", "sampling_params": {"max_new_tokens": 8, "ignore_eos": True}},
    )
    assert status == 200 and len(out["text"].split()) == 8
    meta = out["meta_info"]
    assert (meta["prompt_tokens"], meta["completion_tokens"]) == (2, 8)
    assert 8 / 50 <= meta["e2e_latency"] < 8 / 50 + 0.5
    assert request(server.port, "POST", "/generate", b'{"text": ')[0] == 400
    assert request(server.port, "POST", "/generate", {"sampling_params": {}})[0] == 400

    with ThreadPoolExecutor(2) as pool:  # SIGTERM drains: health 503, the request finishes
        # 200 tokens at 50 tok/s: a 4 s drain, longer than a health check (about 1 s, as it
        # generates a token), so the poll sees the draining server and not only its end.
        long = {
            "text": "Tell a story",
            "sampling_params": {"max_new_tokens": 200, "ignore_eos": True},
        }
        # The "Say hi" request above logged a prefill already: wait for this request's own.
        prefills = server.log().count("Prefill batch")
        pending = pool.submit(request, server.port, "POST", "/generate", long)
        poll(lambda: server.log().count("Prefill batch") > prefills, "the request to be running")
        server.process.send_signal(signal.SIGTERM)
        poll(lambda: health(server.port) == 503, "health 503 while draining")
        # 0.5.9 keeps admitting while it drains; /get_load counts both requests
        late = {"text": "Late", "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}
        later = pool.submit(request, server.port, "POST", "/generate", late)
        assert request(server.port, "GET", "/get_load")[1][0]["num_reqs"] >= 1
        assert later.result()[0] == 200
        assert pending.result()[0] == 200
    assert server.exit_status() == 0
    assert "Gracefully exiting... Remaining number of requests: 1." in server.log()
    assert gpu_holders(server.root) == []
    poll(lambda: not session_members(server.process.pid), "no sglang:: process left")
    assert port_is_free(server.port)


def test_generation_speed_eagle3_and_batching(start: Callable[..., Server]) -> None:
    plain = start("0.5.10")
    eagle = start("0.5.10", *EAGLE3)
    plain.wait_ready()
    eagle.wait_ready()
    body = {
        "text": "Count to thirty",
        "sampling_params": {"max_new_tokens": 30, "ignore_eos": True},
    }

    def timed(port: int) -> float:
        began = time.monotonic()
        assert request(port, "POST", "/generate", body)[0] == 200
        return time.monotonic() - began

    plain_s, eagle_s = timed(plain.port), timed(eagle.port)
    assert 30 / 50 <= plain_s < 30 / 50 + 0.3
    assert 30 / 90 <= eagle_s < 30 / 90 + 0.3

    with ThreadPoolExecutor(4) as pool:
        began = time.monotonic()
        each = list(pool.map(lambda _: timed(plain.port), range(4)))
        together = time.monotonic() - began
    assert min(each) >= 30 / 50 and together < 2 * 30 / 50  # overlapping, not queued

    plain_state = request(plain.port, "GET", "/server_info")[1]["internal_states"][0]
    assert plain_state == {"last_gen_throughput": 200.0}
    eagle_info = request(eagle.port, "GET", "/server_info")[1]
    assert eagle_info["speculative_algorithm"] == "EAGLE3"
    assert eagle_info["version"] == "0.5.9-standin"
    assert eagle_info["internal_states"][0]["avg_spec_accept_length"] > 1
    plain.process.send_signal(signal.SIGTERM)
    eagle.process.send_signal(signal.SIGINT)  # Ctrl-C: the same clean stop
    assert (plain.exit_status(), eagle.exit_status()) == (0, 0)
    assert gpu_holders(plain.root) == gpu_holders(eagle.root) == []


def test_configuration_precedence(tmp_path: Path, sources: dict[str, bytes]) -> None:
    """Defaults < standin.json beside launch_server.py < $SGLANG_STANDIN_<KEY>."""
    root = make_tree(tmp_path, sources["0.5.9"])
    package = root / "sglang" / "python" / "sglang"
    (package / "standin.json").write_text(
        json.dumps({"load_seconds": 7, "tokens_per_s": 10, "orphan_scheduler": True})
    )

    def config(**env: str) -> subprocess.CompletedProcess[str]:
        code = "import json, sglang.launch_server as s; print(json.dumps(s.load_config()))"
        return subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env=clean_env(PYTHONPATH=str(package.parent), **env),
        )

    loaded = json.loads(
        config(SGLANG_STANDIN_TOKENS_PER_S="20", SGLANG_STANDIN_ORPHAN_SCHEDULER="false").stdout
    )
    assert (loaded["load_seconds"], loaded["tokens_per_s"], loaded["warmup_seconds"]) == (
        7.0,
        20.0,
        1.0,
    )
    assert loaded["orphan_scheduler"] is False and loaded["die_after_ready_seconds"] is None
    assert loaded["gpu_state_dir"] == str(root / "sglang" / ".standin-gpu")
    assert loaded["model_file"] == str(package / "srt" / "models" / "kimi_k25.py")
    shared = json.loads(config(NVIDIA_SMI_STANDIN_STATE="/x").stdout)["gpu_state_dir"]
    own = json.loads(
        config(NVIDIA_SMI_STANDIN_STATE="/x", SGLANG_STANDIN_GPU_STATE_DIR="/y").stdout
    )["gpu_state_dir"]
    assert (shared, own) == ("/x", "/y")
    assert (
        "orphan_scheduler must be true or false"
        in config(SGLANG_STANDIN_ORPHAN_SCHEDULER="maybe").stderr
    )


@pytest.mark.parametrize("version", ["0.5.9", "appended"])
def test_eagle3_without_the_methods_dies_after_the_load(
    start: Callable[..., Server], version: str
) -> None:
    """0.5.9's file, and the ``cat >>`` mistake (methods at module level), fail alike."""
    server = start(version, *EAGLE3)
    assert server.exit_status() == 1
    assert time.monotonic() - server.started >= LOAD
    assert NO_SET_EAGLE3 in server.stderr().splitlines()  # the traceback's last line
    assert "Load weight end" in server.log() and READY not in server.log()
    assert gpu_holders(server.root) == []
    assert port_is_free(server.port)


def test_a_file_that_does_not_compile_fails_at_once(start: Callable[..., Server]) -> None:
    server = start("broken")
    assert server.exit_status() == 1
    assert "SyntaxError" in server.stderr() and "kimi_k25.py" in server.stderr()


def test_orphaned_scheduler_keeps_gpu_memory_and_the_port(start: Callable[..., Server]) -> None:
    server = start("0.5.9", orphan_scheduler="true")
    server.wait_ready()
    ((orphan, _),) = gpu_holders(server.root)
    server.process.send_signal(signal.SIGTERM)
    assert server.exit_status() == 0
    assert gpu_holders(server.root) == [(orphan, "sglang::scheduler_TP0")]
    assert not port_is_free(server.port)

    # DESIGN.md: a stale listener fails the next server only after its whole load
    successor = start("0.5.9", port=server.port, tree=server.root)
    assert successor.exit_status() == 1
    assert time.monotonic() - successor.started >= LOAD
    assert "address already in use" in successor.stderr()

    os.kill(orphan, signal.SIGKILL)
    poll(lambda: port_is_free(server.port), "the port to be released")
    assert gpu_holders(server.root) == []


def test_crash_after_ready_kills_the_tree(start: Callable[..., Server]) -> None:
    # ready, then time for the health check that sees it (it generates a token) and for the
    # test to see the tree on a loaded machine (2.5 s was too short at -n 8), then the crash
    server = start("0.5.10", "--tp", "2", die_after_ready_seconds="8")
    server.wait_ready()
    assert sorted(name for _, name in gpu_holders(server.root)) == [
        "sglang::scheduler_TP0",
        "sglang::scheduler_TP1",
    ]
    assert server.exit_status(timeout=30) == -signal.SIGKILL
    assert "Scheduler hit an exception" in server.stderr()
    assert health(server.port) == "refused"
    assert gpu_holders(server.root) == []


# --- as strict as SGLang 0.5.9's command line and loader (issue 12 item 8) --------------------


def refused(server: Server) -> str:
    """The stand-in exited 2 at once, as argparse does; its stderr."""
    assert server.exit_status() == 2
    assert server.log() == "", "nothing starts: no load, no children"
    return server.stderr()


def test_a_typo_in_a_flag_exits_2_with_argparse_message(start: Callable[..., Server]) -> None:
    server = start("0.5.9", "--speculative-algoritm", "EAGLE3")
    err = refused(server)
    assert err.startswith("usage: launch_server.py [-h] --model-path MODEL_PATH")
    assert err.rstrip().endswith(
        "launch_server.py: error: unrecognized arguments: --speculative-algoritm EAGLE3"
    )


def test_choices_are_case_sensitive(start: Callable[..., Server]) -> None:
    err = refused(start("0.5.9", "--speculative-algorithm", "eagle3"))
    assert (
        "launch_server.py: error: argument --speculative-algorithm: invalid choice: 'eagle3' "
        "(choose from 'EAGLE', 'EAGLE3', 'NEXTN', 'STANDALONE', 'NGRAM')"
    ) in err


def test_an_ambiguous_prefix_exits_2(start: Callable[..., Server]) -> None:
    """0.5.9 has several --speculative-draft-* options: the prefix alone matches them all."""
    err = refused(start("0.5.9", "--speculative-draft", "models/draft"))
    assert "error: ambiguous option: --speculative-draft could match" in err
    assert "--speculative-draft-model-path" in err and "--speculative-draft-model-revision" in err


def test_prefixes_and_aliases_resolve_as_argparse_does(start: Callable[..., Server]) -> None:
    server = start(
        "0.5.10",
        "--tp",  # the only option starting with --tp is --tp-size
        "2",
        "--speculative-algo=EAGLE3",
        "--speculative-draft-model",  # 0.5.9's alias of --speculative-draft-model-path
        "models/draft",
        "--mem-fraction-static",
        "0.85",
        "--served-model-name",
        "kimi",
    )
    server.wait_ready()
    info = request(server.port, "GET", "/server_info")[1]
    assert (info["tp_size"], info["speculative_algorithm"]) == (2, "EAGLE3")
    assert (info["speculative_draft_model_path"], info["served_model_name"]) == (
        "models/draft",
        "kimi",
    )
    assert info["mem_fraction_static"] == 0.85
    assert len(gpu_holders(server.root)) == 2


def test_the_parser_declares_what_0_5_9_declares() -> None:
    """Each option the stand-in acts on has exactly 0.5.9's option strings (from the wheel)."""
    sys.path.insert(0, str(FAKE))
    try:
        from sglang.standin_args import OWN, SPECULATIVE_ALGORITHMS  # the stand-in's own
    finally:
        sys.path.remove(str(FAKE))
        for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
            del sys.modules[name]
    real = {tuple(flag["names"]): flag["nargs"] for flag in server_flags()}  # type: ignore[arg-type]
    for names, keywords in OWN:
        assert names in real, f"{names} are not 0.5.9's option strings"
        assert real[names] == (0 if keywords.get("action") == "store_true" else 1), names
    assert SPECULATIVE_ALGORITHMS == ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"]


@pytest.mark.parametrize(
    ("draft", "message"),
    [
        (
            "/nonexistent/eagle3-draft",
            "OSError: Incorrect path_or_model_id: '/nonexistent/eagle3-draft'",
        ),
        ("models", "OSError: models does not appear to have a file named config.json"),
    ],
    ids=["missing directory", "directory without config.json"],
)
def test_a_bad_draft_model_path_fails_at_load(
    start: Callable[..., Server], draft: str, message: str
) -> None:
    server = start(
        "0.5.10", "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", draft
    )
    assert server.exit_status() == 1
    # after the target model loaded, as SGLang's EAGLE worker loads the draft then
    assert "Load weight end" in server.log() and READY not in server.log()
    assert message in server.stderr() and "eagle_worker.py" in server.stderr()
    assert health(server.port) == "refused"
    assert gpu_holders(server.root) == []


def test_a_hub_id_draft_is_accepted(start: Callable[..., Server]) -> None:
    server = start(
        "0.5.10",
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        "lightseek/kimi-k2.5-eagle3",
    )
    server.wait_ready()


def test_health_generates_a_token_so_it_takes_a_second(start: Callable[..., Server]) -> None:
    server = start("0.5.10", warmup_seconds="1.5")
    poll(lambda: health(server.port) == 503, "503 while warming up")
    began = time.monotonic()
    assert health(server.port) == 503
    assert time.monotonic() - began < 0.5, "a warming server refuses at once"
    server.wait_ready()
    for path in ("/health", "/health_generate"):
        began = time.monotonic()
        assert request(server.port, "GET", path)[0] == 200
        assert 1.0 <= time.monotonic() - began < 1.5, path


def test_ignore_eos_decides_the_length(start: Callable[..., Server]) -> None:
    server = start("0.5.10", eos_after_tokens="11")
    server.wait_ready()
    prompt = "Write a short story about a lighthouse keeper."
    free = {"text": prompt, "sampling_params": {"max_new_tokens": 64}}
    fixed = {"text": prompt, "sampling_params": {"max_new_tokens": 64, "ignore_eos": True}}
    stopped = request(server.port, "POST", "/generate", free)[1]["meta_info"]
    full = request(server.port, "POST", "/generate", fixed)[1]["meta_info"]
    assert stopped["completion_tokens"] == 11 and stopped["finish_reason"]["type"] == "stop"
    assert full["completion_tokens"] == 64 and full["finish_reason"]["type"] == "length"


# --- the fake nvidia-smi against the real captures -------------------------------------------


def smi(state: Path, *args: str, **env: str) -> str:
    script = FAKE / "bin" / "nvidia-smi"
    run = subprocess.run(
        [sys.executable, script, *args],
        capture_output=True,
        text=True,
        check=True,
        env=clean_env(NVIDIA_SMI_STANDIN_STATE=str(state), **env),
    )
    return run.stdout


def test_fake_nvidia_smi_prints_the_captured_formats(tmp_path: Path) -> None:
    h200 = {"NVIDIA_SMI_STANDIN_PROFILE": "h200", "NVIDIA_SMI_STANDIN_GPUS": "1"}
    apps = shlex.split(COMPUTE_APPS_QUERY)[1:]
    gpus = shlex.split(GPU_QUERY)[1:]
    memory = ["--query-gpu=index,memory.used", "--format=csv,noheader,nounits"]

    def same(output: str, name: str, pid: int = 420) -> None:
        expected = (FIXTURES / name).read_text()
        if name.startswith("plain"):  # the clock line, and the holder's pid
            output, expected = output.split("\n", 1)[1], expected.split("\n", 1)[1]
            output = output.replace(f"{pid:>16}", f"{420:>16}")
        assert output.replace(f"{pid}, ", "420, ") == expected

    assert os.access(FAKE / "bin" / "nvidia-smi", os.X_OK)
    same(smi(tmp_path, "--version"), "version.txt")
    same(smi(tmp_path, **h200), "plain_idle.txt")
    same(smi(tmp_path, *apps, **h200), "apps_idle.csv")
    same(smi(tmp_path, *gpus, **h200), "query_gpu_idle.csv")

    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        entry = {"pid": holder.pid, "name": "python3", "used_memory_mib": 19592, "gpu_index": 0}
        (tmp_path / str(holder.pid)).write_text(json.dumps(entry))
        same(smi(tmp_path, **h200), "plain_busy.txt", holder.pid)
        same(smi(tmp_path, *apps, **h200), "apps_busy.csv", holder.pid)
        same(smi(tmp_path, *apps[:-1], "--format=csv", **h200), "apps_busy_header.csv", holder.pid)
        same(smi(tmp_path, *gpus, **h200), "query_gpu_busy.csv")
    finally:
        holder.kill()
        holder.wait()
    same(smi(tmp_path, *apps, **h200), "apps_after_kill.csv")
    same(smi(tmp_path, *memory, **h200), "query_gpu_after_kill.csv")

    eight = parse_query_gpu(smi(tmp_path, *gpus))
    assert [gpu.index for gpu in eight] == list(range(8))
    assert len({gpu.uuid for gpu in eight}) == 8
    assert eight[0].name == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert re.search(r"\|   7  NVIDIA RTX PRO 6000 Blac\.\.\.    On  \|", smi(tmp_path))
