"""The JSON report's schema: valid, complete, documented, and matching what the engine writes."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import get_args

import jsonschema
import pytest

from deploy.engine.results import (
    EXIT_BY_OUTCOME,
    HostResult,
    Outcome,
    RunResult,
    StepResult,
    StepStatus,
)
from deploy.report import json_schema
from deploy.report.notify import payload

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "json-report.md"


def _sample() -> RunResult:
    run = RunResult(
        run_id="20260101T030000Z-abcdef",
        command="apply",
        playbook="kimi-eagle3",
        started="2026-01-01T03:00:00+00:00",
        user="ops",
        argv=["apply", "kimi-eagle3", "--yes", "--json"],
        batches=[["gpu-1"], ["gpu-2"]],
        stopped="batch 1 of 2: 1 of 1 host(s) failed, more than max_fail 0 allows",
    )
    step = StepResult(
        0, "python_insert", "Add methods", "changed", "inserted", "+x\n", 0.1, {"n": 3}
    )
    run.hosts = [
        HostResult("gpu-1", "rolled back", [step], "step 2 failed", 1, ["restored /f"], [], ["/f"]),
        HostResult("gpu-2", "skipped", error="never touched"),
    ]
    return run


def test_the_schema_is_a_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(json_schema.SCHEMA)
    jsonschema.Draft202012Validator.check_schema(json_schema.HISTORY_SCHEMA)


def test_a_report_validates_and_survives_history() -> None:
    document = _sample().to_dict()
    jsonschema.validate(document, json_schema.SCHEMA)
    again = RunResult.from_dict(json.loads(json.dumps(document))).to_dict()
    assert again == document
    jsonschema.validate([document, again], json_schema.HISTORY_SCHEMA)


def test_a_newer_writer_is_read_and_an_older_record_completed() -> None:
    document = _sample().to_dict()
    document["field_from_the_future"] = 1
    document["hosts"][0]["another"] = {}
    assert RunResult.from_dict(document).run_id == document["run_id"]
    old = {k: v for k, v in document.items() if k not in ("batches", "stopped", "report_format")}
    jsonschema.validate(RunResult.from_dict(old).to_dict(), json_schema.SCHEMA)


@pytest.mark.parametrize(
    ("kind", "schema"),
    [
        (RunResult, json_schema.SCHEMA),
        (HostResult, json_schema.HOST),
        (StepResult, json_schema.STEP),
    ],
)
def test_every_field_is_documented(kind: type, schema: dict) -> None:  # type: ignore[type-arg]
    fields = {f.name for f in dataclasses.fields(kind)}
    documented = set(schema["properties"]) - {"exit_code", "report_format"}
    assert fields == documented, "document new result fields in deploy/report/json_schema.py"
    assert all(spec.get("description") for spec in schema["properties"].values())


def test_every_outcome_and_status_has_a_meaning() -> None:
    assert set(json_schema.OUTCOMES) == set(get_args(Outcome)) == set(EXIT_BY_OUTCOME)
    assert set(json_schema.STEP_STATUSES) == set(get_args(StepStatus))


def test_the_schema_rejects_what_it_should() -> None:
    document = _sample().to_dict()
    document["hosts"][0]["outcome"] = "kind of ok"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, json_schema.SCHEMA)


def test_webhook_payload_carries_text_and_report() -> None:
    body = payload(_sample(), 1, what="apply kimi-eagle3")
    assert body["text"].startswith("deploy apply kimi-eagle3: exit 1")
    assert "rolled back: gpu-1." in body["text"] and "never touched: gpu-2." in body["text"]
    jsonschema.validate(body["report"], json_schema.SCHEMA)
    early = payload(None, 2, what="apply x", error="playbook not found: x")
    assert early["report"] is None and early["text"].endswith("playbook not found: x")


def test_docs_are_generated_from_the_schema() -> None:
    assert DOC.read_text() == json_schema.render_markdown(), (
        "docs/json-report.md is stale: python -m deploy.report.json_schema > docs/json-report.md"
    )


def test_the_module_prints_the_schema() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "deploy.report.json_schema", "--schema"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert json.loads(out) == json.loads(json.dumps(json_schema.SCHEMA))
