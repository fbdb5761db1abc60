"""Undo of service changes, from journal records alone (no playbook needed).

`ServiceUndo` is the handler the rollback dispatches the ``service`` intents of
`deploy.steps.service` to: it checks that the old server could start again, then uses
`deploy.services.undo` to stop what serves now and, after the files, start the old server.
"""

from __future__ import annotations

from typing import Any

from deploy.errors import RollbackFailed
from deploy.statedir.records import Undone
from deploy.steps.base import Recorder, RecordUndo


class ServiceUndo(RecordUndo):
    """Undo of ``service`` intents: the earliest record of each service holds its state
    before the run; stop what serves now first, start the old server after the files."""

    op = "service"
    phase = 1  # after the files: the old server must start on the old code

    @staticmethod
    def _first(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        services: dict[str, dict[str, Any]] = {}
        for event in records:
            services.setdefault(str(event["service"]), event)
        return services

    def check(self, records: list[dict[str, Any]]) -> None:
        """The old server's executable and working directory must still exist, what serves
        now must be a server this run started (or the old one, never stopped), and a unit's
        files must hold no edit systemd has not loaded (the undo reloads them).

        Raises:
            RollbackFailed: one is gone, so the old server could not be started again; or a
                server this run did not start serves now (`deploy.services.undo.whose`); or a
                unit has unloaded edits (`deploy.services.undo.reload_refusal`).
        """
        from deploy.services.undo import reload_refusal, whose

        #: Services whose old server still runs (the run never stopped it): left alone.
        self.untouched: dict[str, str] = {}
        for name, first in self._first(records).items():
            if (first.get("spec") or {}).get("manager") == "systemd" and self._started(name):
                # The run's own reload was made (it started the unit after it): unloaded
                # edits now are someone else's, which the undo's reload would deploy.
                problem = reload_refusal(self.remote, self.state_dir, name, first)
                if problem:
                    raise RollbackFailed(f"{problem}; then run the rollback again")
            verdict = whose(
                self.remote, self.state_dir, name, first, self._started(name), self.run_id
            )
            if verdict is not None:
                self.untouched[name] = verdict
        for event in records:
            before = event.get("before") or {}
            if not before.get("running") or (event.get("spec") or {}).get("manager") == "systemd":
                continue
            argv = before.get("argv") or []
            places = (("executable", argv[0] if argv else None), ("cwd", before.get("cwd")))
            for label, place in places:
                if (
                    isinstance(place, str)
                    and place.startswith("/")
                    and self.remote.stat(place) is None
                ):
                    raise RollbackFailed(
                        f"the old {event.get('service')} server's {label} {place} no longer "
                        "exists, so it could not be started again"
                    )

    def _started(self, name: str) -> dict[str, Any] | None:
        """The server this run started for ``name`` (its last ``done`` record), if any."""
        found = None
        for event in self.journal:
            if event.get("event") == "done" and event.get("service") == name:
                found = event.get("started") or found
        return found

    def release(self, records: list[dict[str, Any]]) -> list[str]:
        from deploy.services.undo import stop_current

        untouched = getattr(self, "untouched", {})
        return [
            untouched[name]
            if name in untouched
            else stop_current(self.remote, self.state_dir, name, event)
            for name, event in self._first(records).items()
        ]

    def restore(self, records: list[dict[str, Any]], journal: Recorder) -> list[str]:
        from deploy.services.undo import restore_previous

        untouched = getattr(self, "untouched", {})
        lines = []
        for name, event in self._first(records).items():
            if name not in untouched:
                lines.append(
                    restore_previous(self.remote, self.state_dir, name, event, note=self.note)
                )
            journal.write(Undone(op="service", service=name, action="restored"))
        return lines
