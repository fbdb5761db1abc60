"""After a stop: wait until nvidia-smi shows the server's GPUs released (bounded).

A GPU still held by a dying scheduler would only fail the new server after its full model load.
The server's GPUs are the ones it can see (`server_gpus`): the wait after the stop judges the
GPUs the check before it judged, so another user's job on the host's other GPUs fails neither.
"""

from __future__ import annotations

import time
from typing import Literal

from deploy.checks.nvidia_smi import (
    COMPUTE_APP_FIELDS,
    GPU_FIELDS,
    gpus_released,
    parse_compute_apps,
    parse_query_gpu,
)
from deploy.config.services import ServiceSpec
from deploy.errors import CheckFailed, StepFailed
from deploy.remote.api import Host
from deploy.remote.host import quote
from deploy.services.state import ServiceState


def server_gpus(state: ServiceState, spec: ServiceSpec) -> Literal["all"] | list[int] | None:
    """The GPUs the server uses: its ``CUDA_VISIBLE_DEVICES`` (indices), else the service's
    ``gpus`` (None: not asked to check GPUs)."""
    if spec.gpus is None:
        return None
    visible = state.env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        try:
            return [int(item) for item in visible.split(",") if item.strip()]
        except ValueError:
            return spec.gpus  # UUIDs or MIG names: the service's own selection decides
    return spec.gpus


def wait_gpus_released(
    remote: Host,
    spec: ServiceSpec,
    driver: list[str] | None = None,
    state: ServiceState | None = None,
) -> str:
    """Poll nvidia-smi until the GPUs of the server ``state`` describes (`server_gpus`; without
    it the service's ``gpus``) are free (bounded); '' when not asked. The GPU driver's version,
    asked in the same exec, is appended to ``driver`` (for the report: no command of its own
    after the restart)."""
    gpus = server_gpus(state, spec) if state is not None else spec.gpus
    if gpus is None:
        return ""
    smi = quote(spec.nvidia_smi)
    command = (
        f"command -v {smi} >/dev/null 2>&1 || {{ echo NO_NVIDIA_SMI; exit 0; }}; "
        f"{smi} --query-compute-apps={','.join(COMPUTE_APP_FIELDS)} --format=csv,noheader,nounits; "
        f"echo ---; {smi} --query-gpu={','.join(GPU_FIELDS)} --format=csv,noheader,nounits; "
        f"echo ---; {smi} --query-gpu=driver_version --format=csv,noheader"
    )
    deadline = time.monotonic() + spec.gpu_timeout
    why = ""
    while True:
        result = remote.run(command, timeout=60)
        if "NO_NVIDIA_SMI" in result.stdout:
            return "; no nvidia-smi on the host: GPU check skipped"
        apps_text, _, rest = result.stdout.partition("---")
        gpu_text, _, driver_text = rest.partition("---")
        versions = [line.strip() for line in driver_text.splitlines() if line.strip()]
        if driver is not None and versions and not driver:
            driver.append(versions[0])
        try:
            released, why = gpus_released(
                parse_compute_apps(apps_text),
                gpus,
                parse_query_gpu(gpu_text),
                threshold_mib=spec.gpu_threshold_mib,
            )
        except CheckFailed as exc:
            raise StepFailed(f"{remote.name}: cannot read nvidia-smi: {exc}") from exc
        if released:
            return "; GPUs released"
        if time.monotonic() > deadline:
            raise StepFailed(
                f"{remote.name}: GPUs not released {spec.gpu_timeout:g} s after the stop: {why}"
            )
        time.sleep(1.0)
