"""``--notify-url``: tell a webhook when a run did not end well (any exit code but 0).

Scheduled runs have no one watching the terminal; the webhook is how a failed 3 a.m. run
reaches a person. The body is one JSON object with a Slack-compatible ``text`` (Slack,
Mattermost and Rocket.Chat incoming webhooks show it as the message) plus the full report, so
a bot can act on it too (fields in ``docs/json-report.md``).

Notifying is best effort and must never change what the run reports: a failure to deliver is
returned as a message for the caller to log, never raised, and the exit code stays the run's.
Plain urllib (no dependency) with a short timeout, so a dead endpoint cannot hold the run.
"""

from __future__ import annotations

import json
from typing import Any

from deploy.engine.batches import fleet_state
from deploy.engine.results import RunResult
from deploy.masking import mask_data

TIMEOUT = 10.0
_MEANING = {
    1: "a step failed; affected hosts were rolled back",
    2: "invalid input; nothing was touched",
    3: "ROLLBACK FAILED: a human must look",
    4: "some host was not attempted",
    5: "drift: changes are pending; nothing was changed",
}


def summary_text(run: RunResult | None, exit_code: int, *, what: str, error: str = "") -> str:
    """One paragraph for a chat message: what ran, how it ended, where each host is."""
    head = f"deploy {what}: exit {exit_code} ({_MEANING.get(exit_code, 'see the report')})"
    if run is None:
        return f"{head}: {error}" if error else head
    parts = [f"{head}, run {run.run_id} by {run.user or '?'}."]
    if run.check_mode:  # nothing changed: say which hosts drifted, not where a change left them
        if run.pending:
            parts.append(f"would change: {', '.join(run.pending)}.")
    else:
        for label, names in fleet_state(run).items():
            parts.append(f"{label}: {', '.join(names)}.")
    if run.stopped:
        parts.append(f"Stopped: {run.stopped}.")
    for host in run.hosts:
        if host.error and host.exit_code != 0:
            parts.append(f"{host.host}: {host.error}")
    return " ".join(parts)


def payload(run: RunResult | None, exit_code: int, *, what: str, error: str = "") -> dict[str, Any]:
    body: dict[str, Any] = mask_data(
        {
            "text": summary_text(run, exit_code, what=what, error=error),
            "exit_code": exit_code,
            "run_id": run.run_id if run is not None else None,
            "report": run.to_dict() if run is not None else None,
        }
    )
    return body


def post(url: str, body: dict[str, Any], *, timeout: float = TIMEOUT) -> str | None:
    """POST ``body`` as JSON; None on a 2xx answer, else why it failed (never raises)."""
    import http.client  # here, not at the top: ~50 ms that only a failed run with a URL pays
    import urllib.error
    import urllib.request

    if not url.startswith(("http://", "https://")):
        return f"not an http(s) URL: {url}"
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "User-Agent": "deploy-notify/1"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        return f"{url} answered HTTP {exc.code} {exc.reason}"
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", exc)
        return f"cannot reach {url}: {reason}"
    return None if 200 <= status < 300 else f"{url} answered HTTP {status}"


def notify_failure(
    url: str | None, run: RunResult | None, exit_code: int, *, what: str, error: str = ""
) -> str | None:
    """Notify ``url`` if the run did not end with 0; the delivery problem, if any."""
    if not url or exit_code == 0:
        return None
    return post(url, payload(run, exit_code, what=what, error=error))
