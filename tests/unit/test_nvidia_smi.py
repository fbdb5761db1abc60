"""The nvidia-smi parsers against real captures (tests/fixtures/nvidia-smi, copied from shared/), and the verdict.

Every capture in the fixture directory is used by some test here (checked below), so a capture
added later cannot sit there untested.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.checks.nvidia_smi import (
    COMPUTE_APPS_QUERY,
    GPU_FIELDS,
    GPU_MEMORY_FIELDS,
    GPU_MEMORY_QUERY,
    GPU_QUERY,
    ComputeApp,
    GpuInfo,
    gpus_released,
    parse_compute_apps,
    parse_query_gpu,
)
from deploy.errors import CheckFailed

FIXTURES = Path(__file__).parents[1] / "fixtures" / "nvidia-smi"
UUID = "GPU-d982c062-2f38-192d-6ebe-12bd48d01d74"
HOLDER = ComputeApp(pid=420, process_name="python3", used_memory_mib=19592, gpu_uuid=UUID)
IDLE = GpuInfo(0, UUID, "NVIDIA H200", 0, 143771, 0)
BUSY = GpuInfo(0, UUID, "NVIDIA H200", 19601, 143771, 0)

APPS_CASES = {
    "apps_idle.csv": [],
    "apps_after_kill.csv": [],
    "apps_busy.csv": [HOLDER],
    "apps_busy_header.csv": [HOLDER],
}
GPU_CASES = {
    "query_gpu_idle.csv": (GPU_FIELDS, [IDLE]),
    "query_gpu_busy.csv": (GPU_FIELDS, [BUSY]),
    "query_gpu_after_kill.csv": (GPU_MEMORY_FIELDS, [GpuInfo(0, memory_used_mib=0)]),
}
#: Captures of other commands: both parsers must refuse them rather than read them as "idle".
NOT_CSV = ["plain_idle.txt", "plain_busy.txt", "version.txt"]


def capture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_every_capture_is_covered() -> None:
    captured = {path.name for path in FIXTURES.iterdir() if path.name != "README.md"}
    assert captured == set(APPS_CASES) | set(GPU_CASES) | set(NOT_CSV)


def test_the_commands_are_the_captured_ones() -> None:
    readme = capture("README.md")
    for command in (COMPUTE_APPS_QUERY, GPU_QUERY, GPU_MEMORY_QUERY):
        assert f"`{command}`" in readme


@pytest.mark.parametrize(("name", "expected"), APPS_CASES.items())
def test_parse_compute_apps(name: str, expected: list[ComputeApp]) -> None:
    assert parse_compute_apps(capture(name)) == expected


@pytest.mark.parametrize(("name", "case"), GPU_CASES.items())
def test_parse_query_gpu(name: str, case: tuple[tuple[str, ...], list[GpuInfo]]) -> None:
    fields, expected = case
    assert parse_query_gpu(capture(name), fields) == expected


def test_query_gpu_with_header_and_units_reads_the_header() -> None:
    text = (
        "index, uuid, name, memory.used [MiB], memory.total [MiB], utilization.gpu [%]\n"
        f"0, {UUID}, NVIDIA H200, 19601 MiB, 143771 MiB, 0 %\n"
    )
    assert parse_query_gpu(text, fields=("ignored",)) == [BUSY]


def test_eight_gpus_and_unavailable_fields() -> None:
    lines = [
        f"{i}, GPU-{i}, NVIDIA RTX PRO 6000 Blackwell Server Edition, {i}, 97887, [N/A]"
        for i in range(8)
    ]
    gpus = parse_query_gpu("\n".join(lines) + "\n")
    assert [gpu.index for gpu in gpus] == list(range(8))
    assert gpus[7] == GpuInfo(
        7, "GPU-7", "NVIDIA RTX PRO 6000 Blackwell Server Edition", 7, 97887, None
    )


def test_process_name_with_commas_and_unknown_memory() -> None:
    app = parse_compute_apps(f"7, python3, -m, x, [N/A], {UUID}\n")
    assert app == [ComputeApp(7, "python3, -m, x", None, UUID)]


@pytest.mark.parametrize("name", NOT_CSV)
def test_other_outputs_are_refused(name: str) -> None:
    with pytest.raises(CheckFailed):
        parse_compute_apps(capture(name))
    with pytest.raises(CheckFailed):
        parse_query_gpu(capture(name))


@pytest.mark.parametrize(
    "text",
    [
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
        "that the latest NVIDIA driver is installed and running.\n",
        "No devices were found\n",
    ],
)
def test_driver_errors_are_refused(text: str) -> None:
    with pytest.raises(CheckFailed, match="nvidia-smi"):
        parse_compute_apps(text)
    with pytest.raises(CheckFailed, match="nvidia-smi"):
        parse_query_gpu(text)


def test_wrong_column_count_and_missing_index_are_refused() -> None:
    with pytest.raises(CheckFailed, match="expected 6 columns"):
        parse_query_gpu(capture("query_gpu_after_kill.csv"))
    with pytest.raises(CheckFailed, match="must ask for index"):
        parse_query_gpu("0\n", fields=("memory.used",))


def test_busy_gpu_is_not_released_and_the_holder_is_named() -> None:
    released, why = gpus_released(
        parse_compute_apps(capture("apps_busy.csv")),
        "all",
        parse_query_gpu(capture("query_gpu_busy.csv")),
    )
    assert not released
    assert why == (
        "pid 420 python3 holds 19.6 GB on GPU 0; "
        "GPU 0 still has 19601 MiB in use (threshold 1024 MiB)"
    )


@pytest.mark.parametrize(
    ("apps", "gpus", "fields"),
    [
        ("apps_idle.csv", "query_gpu_idle.csv", GPU_FIELDS),
        ("apps_after_kill.csv", "query_gpu_after_kill.csv", GPU_MEMORY_FIELDS),
    ],
)
def test_idle_and_after_kill_are_released(apps: str, gpus: str, fields: tuple[str, ...]) -> None:
    released, why = gpus_released(
        parse_compute_apps(capture(apps)), [0], parse_query_gpu(capture(gpus), fields)
    )
    assert released, why
    assert why.startswith("GPU 0: no compute process")


def test_memory_without_a_process_is_not_released() -> None:
    released, why = gpus_released([], "all", [BUSY])
    assert not released
    assert why == "GPU 0 still has 19601 MiB in use (threshold 1024 MiB)"
    assert gpus_released([], "all", [BUSY], threshold_mib=20000)[0]


def test_selection_ignores_other_gpus_but_not_missing_ones() -> None:
    other = GpuInfo(1, "GPU-other", "NVIDIA H200", 19601, 143771, 0)
    holder_on_1 = ComputeApp(9, "sglang::scheduler_TP1", 19600, "GPU-other")
    assert gpus_released([holder_on_1], [0], [IDLE, other])[0]
    released, why = gpus_released([holder_on_1], [0, 1], [IDLE, other])
    assert not released
    assert "pid 9 sglang::scheduler_TP1 holds 19.6 GB on GPU 1" in why
    released, why = gpus_released([], [0, 3], [IDLE])
    assert (released, why) == (False, "GPU 3 is not listed by nvidia-smi")
    assert gpus_released([], "all", []) == (False, "nvidia-smi listed no GPU")


def test_process_on_an_unknown_gpu_counts_unless_the_selection_is_known() -> None:
    without_uuids = parse_query_gpu(capture("query_gpu_after_kill.csv"), GPU_MEMORY_FIELDS)
    released, why = gpus_released([HOLDER], [0], without_uuids)
    assert not released
    assert why == f"pid 420 python3 holds 19.6 GB on GPU {UUID}"
    stranger = ComputeApp(5, "python3", 100, "GPU-elsewhere")
    assert gpus_released([stranger], [0], [IDLE])[0]
    assert not gpus_released([stranger], "all", [IDLE])[0]
