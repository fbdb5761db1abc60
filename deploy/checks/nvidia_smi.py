"""Reading ``nvidia-smi`` output, and deciding whether a stopped server gave its GPUs back.

After SGLang is stopped, its scheduler processes (``sglang::scheduler_TP*``) can linger as
orphans and keep gigabytes of GPU memory; the next server then dies of out-of-memory only after
its full model load, minutes later. So the restart step asks ``nvidia-smi`` two questions
(`COMPUTE_APPS_QUERY`, `GPU_QUERY`) and `gpus_released` answers "may we start now?", with a
sentence naming the culprit when the answer is no.

The formats are those of real captures (``shared/fixtures/nvidia-smi``): CSV with ``", "``
between fields, with or without a header line and units (``--format=csv`` versus
``--format=csv,noheader,nounits``), and nothing at all when there is nothing to list. Fields the
driver cannot report read ``[N/A]`` or ``[Not Supported]`` and become ``None``. Pure functions:
the caller runs the commands.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from deploy.errors import CheckFailed

#: The columns of `GPU_QUERY`, in order; `parse_query_gpu` reads headerless output by them.
GPU_FIELDS = ("index", "uuid", "name", "memory.used", "memory.total", "utilization.gpu")
#: The lighter query used while polling for memory to drain.
GPU_MEMORY_FIELDS = ("index", "memory.used")
COMPUTE_APP_FIELDS = ("pid", "process_name", "used_memory", "gpu_uuid")

#: Below this many MiB a GPU counts as free: an idle GPU reports 0-10 MiB (a display or the
#: driver's own context), while anything SGLang leaves behind holds gigabytes.
DEFAULT_THRESHOLD_MIB = 1024

_MISSING = {"[N/A]", "[Not Supported]", "N/A", ""}


def query_gpu_command(fields: Sequence[str]) -> str:
    """The ``nvidia-smi --query-gpu`` command line for ``fields``, headerless and unitless."""
    return f"nvidia-smi --query-gpu={','.join(fields)} --format=csv,noheader,nounits"


COMPUTE_APPS_QUERY = (
    f"nvidia-smi --query-compute-apps={','.join(COMPUTE_APP_FIELDS)} --format=csv,noheader,nounits"
)
GPU_QUERY = query_gpu_command(GPU_FIELDS)
GPU_MEMORY_QUERY = query_gpu_command(GPU_MEMORY_FIELDS)


@dataclass(frozen=True)
class ComputeApp:
    """One process holding a CUDA context, as ``--query-compute-apps`` lists it."""

    pid: int
    process_name: str
    used_memory_mib: int | None
    gpu_uuid: str


@dataclass(frozen=True)
class GpuInfo:
    """One GPU from ``--query-gpu``; a field the query did not ask for is ``None``."""

    index: int
    uuid: str | None = None
    name: str | None = None
    memory_used_mib: int | None = None
    memory_total_mib: int | None = None
    utilization_pct: int | None = None


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _number(value: str, line: str) -> int | None:
    """``"19592"``, ``"19592 MiB"`` or ``"0 %"`` as an int; ``[N/A]`` as None."""
    value = value.strip()
    if value in _MISSING:
        return None
    digits = value.split(" ", 1)[0]
    try:
        return int(digits)
    except ValueError:
        message = f"nvidia-smi printed {value!r} where a number belongs: {line!r}"
        raise CheckFailed(message) from None


def _optional_number(value: str | None, line: str) -> int | None:
    return None if value is None else _number(value, line)


def _text(value: str | None) -> str | None:
    return None if value is None or value in _MISSING else value


def _is_header(line: str) -> bool:
    return not line.split(",", 1)[0].strip().isdigit()


def parse_compute_apps(text: str) -> list[ComputeApp]:
    """Parse ``--query-compute-apps=pid,process_name,used_memory,gpu_uuid`` output.

    The header line of ``--format=csv`` is skipped and units are dropped; empty output (no
    process) gives ``[]``. A process name may itself contain ``", "``: the pid is the first
    field and the memory and UUID the last two, so the name is whatever lies between.

    Raises:
        CheckFailed: a line is not in that format (an error message from a broken driver,
            such as "NVIDIA-SMI has failed because it couldn't communicate with the driver").
    """
    lines = _lines(text)
    if lines and _is_header(lines[0]) and lines[0].startswith("pid"):
        lines = lines[1:]
    apps = []
    for line in lines:
        parts = line.split(",")
        if len(parts) < 4 or not parts[0].strip().isdigit():
            raise CheckFailed(f"unexpected nvidia-smi --query-compute-apps output: {line!r}")
        apps.append(
            ComputeApp(
                pid=int(parts[0]),
                process_name=",".join(parts[1:-2]).strip(),
                used_memory_mib=_number(parts[-2], line),
                gpu_uuid=parts[-1].strip(),
            )
        )
    return apps


def parse_query_gpu(text: str, fields: Sequence[str] = GPU_FIELDS) -> list[GpuInfo]:
    """Parse ``--query-gpu=...`` output, one `GpuInfo` per GPU.

    ``fields`` names the columns of headerless output, in the order the query asked for them
    (`GPU_FIELDS` for `GPU_QUERY`, `GPU_MEMORY_FIELDS` for `GPU_MEMORY_QUERY`); with
    ``--format=csv`` the header line names them instead (``memory.used [MiB]``; it is recognised
    by starting with ``index``, which every query here asks for first). Columns this
    dataclass has no field for are ignored; fields not queried stay ``None``.

    Raises:
        CheckFailed: the query has no ``index`` column, or a line has the wrong number of
            columns or a non-number where a number belongs (nvidia-smi printed an error).
    """
    lines = _lines(text)
    if lines and _is_header(lines[0]) and lines[0].startswith("index"):
        fields = [column.split(" [", 1)[0].strip() for column in lines[0].split(",")]
        lines = lines[1:]
    if "index" not in fields:
        raise CheckFailed(f"nvidia-smi --query-gpu must ask for index; asked for {list(fields)}")
    gpus = []
    for line in lines:
        values = [value.strip() for value in line.split(", ")]
        if len(values) != len(fields):
            raise CheckFailed(
                f"expected {len(fields)} columns ({', '.join(fields)}) from nvidia-smi "
                f"--query-gpu, got {len(values)}: {line!r}"
            )
        row = dict(zip(fields, values, strict=True))
        index = _number(row["index"], line)
        if index is None:
            raise CheckFailed(f"nvidia-smi --query-gpu printed no GPU index: {line!r}")
        gpus.append(
            GpuInfo(
                index=index,
                uuid=_text(row.get("uuid")),
                name=_text(row.get("name")),
                memory_used_mib=_optional_number(row.get("memory.used"), line),
                memory_total_mib=_optional_number(row.get("memory.total"), line),
                utilization_pct=_optional_number(row.get("utilization.gpu"), line),
            )
        )
    return gpus


def _gigabytes(mib: int | None) -> str:
    """MiB as nvidia-smi users say it: 19592 MiB is "19.6 GB"."""
    return "an unknown amount" if mib is None else f"{mib / 1000:.1f} GB"


def gpus_released(
    apps: Sequence[ComputeApp],
    gpus: Literal["all"] | Sequence[int],
    gpu_infos: Sequence[GpuInfo],
    threshold_mib: int = DEFAULT_THRESHOLD_MIB,
) -> tuple[bool, str]:
    """Whether the selected GPUs are free for a new server, and a sentence saying why (not).

    Free means no compute process on them and ``memory.used`` under ``threshold_mib`` on each.
    A process is placed on a GPU through the UUIDs in ``gpu_infos``. One whose UUID matches no
    listed GPU counts against the selection, unless specific GPUs were selected and all their
    UUIDs are known (it is then on another GPU): erring towards "not released" costs a poll,
    starting a server onto a full GPU costs a whole model load. A selected GPU that
    ``gpu_infos`` does not list is not released either, nor is "all" of no GPU at all. A GPU
    whose ``memory.used`` is unknown (not queried, or ``[N/A]``) is judged by its processes.
    """
    by_index = {info.index: info for info in gpu_infos}
    selected = sorted(by_index) if gpus == "all" else sorted(set(gpus))
    if not selected:
        return False, "nvidia-smi listed no GPU"
    by_uuid = {info.uuid: info.index for info in gpu_infos if info.uuid}
    uuids_known = all(index in by_index and by_index[index].uuid for index in selected)
    problems = [
        f"GPU {index} is not listed by nvidia-smi" for index in selected if index not in by_index
    ]
    for app in apps:
        index = by_uuid.get(app.gpu_uuid)
        if index is not None and index in selected:
            where = f"GPU {index}"
        elif index is None and (gpus == "all" or not uuids_known):
            where = f"GPU {app.gpu_uuid}"
        else:
            continue
        problems.append(
            f"pid {app.pid} {app.process_name} holds {_gigabytes(app.used_memory_mib)} on {where}"
        )
    for index in selected:
        used = by_index[index].memory_used_mib if index in by_index else None
        if used is not None and used >= threshold_mib:
            problems.append(
                f"GPU {index} still has {used} MiB in use (threshold {threshold_mib} MiB)"
            )
    if problems:
        return False, "; ".join(problems)
    names = ", ".join(str(index) for index in selected)
    return True, f"GPU {names}: no compute process, memory used under {threshold_mib} MiB"
