"""The server confirms what it runs: ``/server_info`` against the declared speculative settings,
and the versions a report records (issue 31, point 6).

A restart that lost its flags (a launcher that drops them, a unit that ignores them) passes
every health check and the smoke test, and the gate would compare the old setup with itself.
So after the restart, ``/server_info`` (``/get_server_info`` on a server without it) must report
the declared ``speculative_algorithm`` and draft model path — a flag the restart set must show
its value, one it removed must show none — or the step fails and the host is rolled back.

The report records what the EAGLE-3 result turns on: the SGLang version (``/server_info``'s
``version``), torch and its CUDA (read from the server interpreter's installed metadata by the
restart's module lookup, without importing torch) and the GPU driver (``nvidia-smi``, asked in
the same exec as the GPU release wait after the stop: no command of its own).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from deploy.edits.cmdline import canonical
from deploy.errors import CheckFailed
from deploy.remote import http
from deploy.services.control import ServiceControl
from deploy.services.probes import get

#: Flag -> the ``/server_info`` field that must report it after a restart that declared it.
CONFIRMED = {
    "--speculative-algorithm": "speculative_algorithm",
    "--speculative-draft-model-path": "speculative_draft_model_path",
}


def expected_settings(
    set_: Mapping[str, Any], removed: Sequence[str] = ()
) -> dict[str, str | None]:
    """``/server_info`` field -> value the new server must report, for each `CONFIRMED` flag
    the restart declared: the value it set (false or null: none), or none for one removed."""
    expected: dict[str, str | None] = {}
    for flag, value in set_.items():
        field = CONFIRMED.get(canonical(flag))
        if field is None or isinstance(value, list) or value is True:
            continue
        expected[field] = None if value in (None, False) else str(value)
    for flag in removed:
        field = CONFIRMED.get(canonical(flag))
        if field is not None:
            expected[field] = None
    return expected


def server_info(svc: ServiceControl) -> dict[str, Any]:
    """``GET /server_info`` (else the deprecated ``/get_server_info``), with the server's key.

    Raises:
        CheckFailed: neither answers 200 with a JSON object.
    """
    last = "no answer"
    for path in ("/server_info", "/get_server_info"):
        try:
            response = get(svc, path, timeout=30)
        except http.ServerUnavailable as exc:
            raise CheckFailed(f"{svc.name}: GET {path} failed: {exc}") from exc
        if response.status == 404:
            last = f"GET {path} answered 404"
            continue
        if response.status != 200:
            key = " (the server wants an API key)" if response.status == 401 else ""
            raise CheckFailed(f"{svc.name}: GET {path} answered HTTP {response.status}{key}")
        try:
            info = response.json()
        except ValueError as exc:
            raise CheckFailed(f"{svc.name}: GET {path} gave no JSON") from exc
        if isinstance(info, dict):
            return info
        last = f"GET {path} gave no JSON object"
    raise CheckFailed(f"{svc.name}: cannot read the server's settings ({last})")


def _same(reported: Any, wanted: str | None) -> bool:
    if wanted is None:
        return reported in (None, "", False)
    return isinstance(reported, str | int | float) and str(reported).rstrip("/") == wanted.rstrip(
        "/"
    )


def settings_problem(name: str, info: Mapping[str, Any], expected: Mapping[str, Any]) -> str | None:
    """Why the server does not run as declared, naming each field; None when it does."""
    wrong = [
        f"{field} is {info.get(field)!r}, not {wanted!r}"
        for field, wanted in expected.items()
        if not _same(info.get(field), wanted)
    ]
    if not wrong:
        return None
    return (
        f"{name} does not run with the declared settings: /server_info says "
        + "; ".join(wrong)
        + " (the restart lost them: is the server started through a launcher that drops flags?)"
    )


def stack(
    info: Mapping[str, Any], interpreter: Mapping[str, Any], driver: str | None
) -> dict[str, str]:
    """The figures a report records: ``sglang_version``, ``torch_version``, ``cuda_version``,
    ``driver_version`` (only those known)."""
    found = {
        "sglang_version": info.get("version") or interpreter.get("sglang"),
        "torch_version": interpreter.get("torch"),
        "cuda_version": interpreter.get("cuda"),
        "driver_version": driver,
    }
    return {key: str(value) for key, value in found.items() if value}


def describe_stack(figures: Mapping[str, Any]) -> str:
    """``SGLang 0.5.9, torch 2.9.1 (CUDA 12.9), driver 580.159.04``; "" when nothing is known."""
    parts = []
    if figures.get("sglang_version"):
        parts.append(f"SGLang {figures['sglang_version']}")
    if figures.get("torch_version"):
        cuda = f" (CUDA {figures['cuda_version']})" if figures.get("cuda_version") else ""
        parts.append(f"torch {figures['torch_version']}{cuda}")
    if figures.get("driver_version"):
        parts.append(f"driver {figures['driver_version']}")
    return ", ".join(parts)
