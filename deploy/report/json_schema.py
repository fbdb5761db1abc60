"""The JSON report's contract: a JSON Schema, and the markdown page generated from it.

One document describes a run wherever it goes — ``deploy apply --json`` on stdout,
``--report FILE``, the workstation's history (``deploy show RUN_ID --json``), the webhook's
``report`` field — so that a scheduler, a dashboard or a chat bot can rely on one shape. The
schema is written here once; ``docs/json-report.md`` is generated from it
(``python -m deploy.report.json_schema > docs/json-report.md``) and a test keeps the two
equal, and another validates real reports against the schema. Outcome and status names come
from `deploy.engine.results` itself, so they cannot drift from what the engine writes.

Compatibility: ``report_format`` changes only when a field changes meaning or disappears.
New fields may appear at any time; consumers must ignore fields they do not know (the schema
allows them for that reason).
"""

from __future__ import annotations

import json
import sys
from typing import Any, get_args

from deploy.engine.results import EXIT_BY_OUTCOME, REPORT_FORMAT, Outcome, StepStatus

OUTCOMES: dict[str, str] = {
    "changed": "desired state reached; something was changed",
    "unchanged": "already in the desired state; nothing was changed",
    "would change": "`--check`: changes are needed (nothing was changed)",
    "failed": "a step failed before anything was changed: nothing to undo",
    "rolled back": "a step failed; every change was undone and checked",
    "rollback failed": "the undo is incomplete: a human must look (see `error`, `rollback`)",
    "not attempted": "unreachable, untrusted host key or locked by another run: nothing done",
    "restored": "`deploy rollback`: the run was undone as asked",
    "nothing to do": "`deploy rollback`: no run to undo on this host",
    "skipped": "never touched: an earlier batch failed beyond `max_fail`, or `--timeout` expired before this host started",
    "interrupted": "`--timeout` expired while this host ran; its journal lets the next `apply`/`rollback` undo it",
}

STEP_STATUSES: dict[str, str] = {
    "changed": "the step changed the host",
    "unchanged": "already as wanted",
    "ok": "a check or command that passed",
    "would change": "`--check`: would change the host",
    "failed": "the step failed (see `summary`)",
    "skipped": "not run under `--check` (it could have side effects)",
    "not run": "an earlier step failed",
}

EXIT_CODES: dict[int, str] = {
    0: "every host is in the desired state (changed, or already there)",
    1: "a step failed and every affected host was rolled back and verified",
    2: "invalid input: nothing was touched (no report is written)",
    3: "a rollback failed or is incomplete: a human must look",
    4: "some host was not attempted (unreachable, locked, skipped): nothing touched there",
    5: "`--check --detailed-exitcode` only: changes are pending (drift); nothing was changed",
}

_NULLABLE_STRING = {"type": ["string", "null"]}
_STRINGS = {"type": "array", "items": {"type": "string"}}

#: figure name -> (step kind, meaning); ``N`` stands for a concurrency (1 and the gate's).
FIGURES: dict[str, tuple[str, str]] = {
    "uid": (
        "restart",
        "The uid the new server was started as: that of the server it replaced (its name, "
        "gid and groups are in the summary); absent when it was started from the service's "
        "`command` as deploy's helper runs (no server to copy from).",
    ),
    "gid": ("restart", "The gid the new server was started as (see `uid`)."),
    "ready_s": ("wait_healthy", "Seconds until the health URL answered 200."),
    "sglang_version": (
        "wait_healthy",
        "The restarted server's SGLang version (`/server_info`'s `version`; a string).",
    ),
    "torch_version": (
        "wait_healthy",
        "torch installed for the server's interpreter (its metadata, read by the restart's "
        "`imports` lookup without importing torch; absent without `imports`).",
    ),
    "cuda_version": ("wait_healthy", "The CUDA torch was built for (`torch/version.py`)."),
    "driver_version": ("wait_healthy", "The GPU driver `nvidia-smi` reports."),
    "smoke_tokens": ("smoke", "Completion tokens of the smoke generation."),
    "tokens_per_s_cN": (
        "gate_throughput",
        "Median decode tok/s of the new server at concurrency N: per wave, each request's "
        "tokens after its first streamed event over the time after it, summed over the wave's "
        "requests (at N = 1 one user's decode speed; under load the server's). Load generated "
        "on the host, >= 5 waves, ignore_eos, tokens from meta_info.completion_tokens, after an "
        "uncounted warm-up. What the gate decides on.",
    ),
    "samples_cN": ("gate_throughput", "Waves (samples) measured at concurrency N."),
    "ttft_s_cN": ("gate_throughput", "Median time to first token at concurrency N, seconds."),
    "e2e_tokens_per_s_cN": (
        "gate_throughput",
        "Median end-to-end tok/s at concurrency N: a wave's completion tokens over its wall time.",
    ),
    "accept_length_cN": (
        "gate_throughput",
        "Mean meta_info.spec_accept_length at concurrency N (EAGLE-3's accepted tokens per "
        "verify step; absent without speculative decoding).",
    ),
    "before_tokens_per_s_cN": (
        "gate_throughput",
        "The same, measured on the old server before the run's first change (`baseline: before`; "
        "absent when there was none); likewise before_samples_cN, before_ttft_s_cN, "
        "before_e2e_tokens_per_s_cN, before_accept_length_cN.",
    ),
    "ratio_cN": (
        "gate_throughput",
        "New / before decode tok/s at concurrency N: the Hodges-Lehmann estimate (median of "
        "the pairwise ratios of the samples).",
    ),
    "ratio_low_cN": (
        "gate_throughput",
        "Low end of ratio_cN's 95 % interval (exact Mann-Whitney on the logs of the samples); "
        "the level passes when it reaches min_ratio_cN * (1 - tolerance).",
    ),
    "ratio_high_cN": (
        "gate_throughput",
        "High end of that interval (absent when too few samples give one); the level "
        "regressed when it is below min_ratio_cN * (1 - tolerance).",
    ),
    "min_ratio_cN": ("gate_throughput", "The ratio the level had to reach (its min_ratio)."),
    "tokens_per_s": ("gate_throughput", "tokens_per_s_cN of the lowest level (the headline)."),
    "before_tokens_per_s": ("gate_throughput", "before_tokens_per_s_cN of the lowest level."),
    "ratio": ("gate_throughput", "ratio_cN of the lowest level."),
    "avg_spec_accept_length": (
        "gate_throughput",
        "The new server's internal_states[].avg_spec_accept_length from /server_info after the "
        "load (EAGLE-3; absent without it).",
    ),
    "before_avg_spec_accept_length": ("gate_throughput", "The same on the old server."),
    "busy_requests": (
        "gate_throughput",
        "Most requests of other clients running at the start of a wave on the new server "
        "(/v1/loads or /metrics; absent when it could not say).",
    ),
    "before_busy_requests": (
        "gate_throughput",
        "The same during the baseline: above 0, the baseline was measured under load (the "
        "summary says so).",
    ),
}

STEP: dict[str, Any] = {
    "type": "object",
    "description": "One step on one host.",
    "properties": {
        "index": {
            "type": "integer",
            "minimum": 0,
            "description": "0-based position in the playbook's `steps`.",
        },
        "kind": {"type": "string", "description": "The step's action, e.g. `python_insert`."},
        "title": {
            "type": "string",
            "description": "One-line description (the step's `name` if set).",
        },
        "status": {"enum": list(get_args(StepStatus)), "description": "See *Step statuses*."},
        "summary": {
            "type": "string",
            "description": "What happened, or why it failed, in one line.",
        },
        "diff": {
            "type": "string",
            "description": "Unified diff of the files it changed (empty if none).",
        },
        "duration": {"type": "number", "minimum": 0, "description": "Seconds."},
        "figures": {
            "type": "object",
            "description": "Measurements by name, step-specific (see *Figures*); kept when "
            "the step fails.",
            "properties": {
                name: {
                    "type": "string" if name.endswith("_version") else "number",
                    "description": meaning,
                }
                for name, (_, meaning) in FIGURES.items()
                if "N" not in name
            },
            "patternProperties": {
                "^(before_)?(tokens_per_s|samples|ttft_s|e2e_tokens_per_s|accept_length)"
                "_c[0-9]+$|^(ratio|ratio_low|ratio_high|min_ratio)_c[0-9]+$": {"type": "number"}
            },
        },
    },
}

HOST: dict[str, Any] = {
    "type": "object",
    "description": "What happened on one host.",
    "properties": {
        "host": {"type": "string", "description": "The host's name in the inventory."},
        "outcome": {"enum": list(get_args(Outcome)), "description": "See *Outcomes*."},
        "exit_code": {
            "enum": sorted(set(EXIT_BY_OUTCOME.values())),
            "description": "This host's exit code (see *Exit codes*).",
        },
        "steps": {
            "type": "array",
            "items": {"$ref": "#/$defs/step"},
            "description": "Steps in order; empty if the host was not reached.",
        },
        "error": {
            **_NULLABLE_STRING,
            "description": "Why the host did not reach the desired state, in one line.",
        },
        "failed_step": {
            "type": ["integer", "null"],
            "description": "`index` of the step that failed.",
        },
        "rollback": {**_STRINGS, "description": "Undo actions, in order (`restored /path`, ...)."},
        "recovered": {
            **_STRINGS,
            "description": "Unfinished earlier runs found on the host and undone first.",
        },
        "changed_files": {**_STRINGS, "description": "Paths this run changed (or would change)."},
        "duration": {"type": "number", "minimum": 0, "description": "Seconds."},
        "run_id": {
            **_NULLABLE_STRING,
            "description": "The run whose journal holds this host's changes (for `deploy rollback RUN_ID`).",
        },
        "ops": {
            "type": "object",
            "additionalProperties": {"type": "integer"},
            "description": "SSH operations by kind (`exec`, `cmd`, `call`, `sftp`), `wait`: the requests the run blocked on, one round trip each, and `sent`: the bytes of requests sent to the host's file helper and the lock's shell (payloads included).",
        },
    },
}

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": f"https://deploy.invalid/schemas/report-{REPORT_FORMAT}.json",
    "title": "deploy run report",
    "description": "One run of `deploy apply`, `deploy apply --check` or `deploy rollback`.",
    "type": "object",
    "properties": {
        "report_format": {"const": REPORT_FORMAT, "description": "Version of this format."},
        "run_id": {
            "type": "string",
            "description": "Unique, sortable: `YYYYMMDDTHHMMSSZ-xxxxxx` (UTC).",
        },
        "command": {"enum": ["apply", "check", "rollback"], "description": "What ran."},
        "playbook": {
            **_NULLABLE_STRING,
            "description": "The playbook's `name` (null for rollback).",
        },
        "started": {"type": "string", "description": "ISO 8601 time, UTC."},
        "check_mode": {"type": "boolean", "description": "`--check`: nothing was changed."},
        "exit_code": {
            "enum": sorted(EXIT_CODES),
            "description": "The process's exit code: the most serious host's (3, then 1, then 4, then 5, then 0).",
        },
        "duration": {"type": "number", "minimum": 0, "description": "Seconds, the whole run."},
        "user": {"type": "string", "description": "Who ran it (workstation user)."},
        "argv": {**_STRINGS, "description": "The command line after `deploy`."},
        "hosts": {
            "type": "array",
            "items": {"$ref": "#/$defs/host"},
            "description": "One entry per selected host, in inventory order.",
        },
        "batches": {
            "type": "array",
            "items": _STRINGS,
            "description": "Host names per rolling batch (`serial`); empty without batches.",
        },
        "stopped": {
            **_NULLABLE_STRING,
            "description": "Why hosts were left untouched on purpose (`max_fail` exceeded, `--timeout`).",
        },
        "inventory": {
            **_NULLABLE_STRING,
            "description": "Absolute path of the inventory file the run used (`deploy rollback` takes its latest apply; null in older reports).",
        },
        "target_run": {
            **_NULLABLE_STRING,
            "description": "`deploy rollback`: the id of the run it undid; null otherwise.",
        },
        "detailed_exitcode": {
            "type": "boolean",
            "description": "`--detailed-exitcode`: a `--check` that finds changes pending exits 5.",
        },
    },
    "$defs": {"host": HOST, "step": STEP},
}

for _schema in (STEP, HOST, SCHEMA):
    # Every field is always present (null or empty when it does not apply): required.
    _schema["required"] = list(_schema["properties"])

#: ``deploy history --json``: the reports of the runs listed, oldest first.
HISTORY_SCHEMA: dict[str, Any] = {
    "$schema": SCHEMA["$schema"],
    "type": "array",
    "items": SCHEMA,
}

WEBHOOK_FIELDS = {
    "text": "One-paragraph summary (Slack, Mattermost and Rocket.Chat show it as the message).",
    "exit_code": "The run's exit code.",
    "run_id": "The run's id (null when it stopped before starting, e.g. invalid input).",
    "report": "The full report as above (null when no run started).",
}


def _type(spec: dict[str, Any]) -> str:
    if "$ref" in spec:
        return str(spec["$ref"]).rsplit("/", 1)[-1]
    if "const" in spec:
        return f"`{json.dumps(spec['const'])}`"
    if "enum" in spec:
        return "one of " + ", ".join(f"`{json.dumps(v)}`" for v in spec["enum"])
    kind = spec.get("type", "any")
    if kind == "array":
        return f"array of {_type(spec.get('items', {}))}"
    if isinstance(kind, list):
        return " or ".join(kind)
    return str(kind)


def _table(schema: dict[str, Any]) -> list[str]:
    lines = ["| field | type | meaning |", "| --- | --- | --- |"]
    for name, spec in schema["properties"].items():
        lines.append(f"| `{name}` | {_type(spec)} | {spec.get('description', '')} |")
    return lines


def _meanings(title: str, rows: dict[Any, str], code: dict[str, int] | None = None) -> list[str]:
    header = "| value | exit | meaning |" if code else "| value | meaning |"
    lines = [f"### {title}", "", header, "| --- | --- | --- |" if code else "| --- | --- |"]
    for value, meaning in rows.items():
        exit_cell = f" {code[value]} |" if code else ""
        lines.append(f"| `{value}` |{exit_cell} {meaning} |")
    return [*lines, ""]


def render_markdown() -> str:
    """``docs/json-report.md``: the schema as tables, ready to paste into README."""
    out = [
        "# The JSON report",
        "",
        "<!-- Generated by `python -m deploy.report.json_schema > docs/json-report.md`; edit",
        "     deploy/report/json_schema.py instead. A test fails when the two differ. -->",
        "",
        "`deploy apply --yes --json` (and `deploy rollback --json`) print exactly one JSON",
        "document on stdout; `--report FILE` writes the same document to FILE (atomically);",
        "every run's document is kept in `$XDG_STATE_HOME/deploy/runs/RUN_ID.json`, shown by",
        "`deploy show RUN_ID --json`; `deploy history --json` prints a list of them, oldest first.",
        "Progress and warnings go to stderr, never into the document. Every field below is",
        "always present (null or empty when it does not apply). A command refused before any",
        "host is contacted — invalid input (exit 2), or the same playbook and inventory already",
        "running on this workstation (exit 4) — prints one line on stderr and no document.",
        "",
        f"Format version {REPORT_FORMAT} (`report_format`). It changes only when a field changes",
        "meaning or disappears; fields may be added at any time, so ignore the ones you do not",
        "know. The JSON Schema (draft 2020-12) is `deploy.report.json_schema.SCHEMA`; print it",
        "with `python -m deploy.report.json_schema --schema`.",
        "",
        "## Run",
        "",
        *_table(SCHEMA),
        "",
        "## Host (`hosts[]`)",
        "",
        *_table(HOST),
        "",
        "## Step (`hosts[].steps[]`)",
        "",
        *_table(STEP),
        "",
        "## Values",
        "",
        *_meanings("Outcomes", OUTCOMES, EXIT_BY_OUTCOME),
        *_meanings("Step statuses", STEP_STATUSES),
        *_meanings("Exit codes", {str(k): v for k, v in EXIT_CODES.items()}),
        "### Figures",
        "",
        "| figure | step | meaning |",
        "| --- | --- | --- |",
        *[f"| `{name}` | `{kind}` | {meaning} |" for name, (kind, meaning) in FIGURES.items()],
        "",
        "## Webhook (`--notify-url URL`)",
        "",
        "When a run ends with any exit code but 0, `deploy` POSTs one JSON object to the URL",
        "(`Content-Type: application/json`, 10 s timeout, no retry). A failure to deliver it is",
        "reported on stderr and in `--log-file`, and never changes the exit code.",
        "",
        "| field | meaning |",
        "| --- | --- |",
        *[f"| `{name}` | {meaning} |" for name, meaning in WEBHOOK_FIELDS.items()],
        "",
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if "--schema" in args:
        sys.stdout.write(json.dumps(SCHEMA, indent=2) + "\n")
    else:
        sys.stdout.write(render_markdown())


if __name__ == "__main__":  # pragma: no cover
    main()
