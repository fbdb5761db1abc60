"""The caller's way to stop a run: a token, not a signal handler (see `deploy.api`)."""

from __future__ import annotations

from deploy.engine.run_options import Cancel


class CancelToken(Cancel):
    """Cancels a running `apply`, `plan` or `rollback` from any thread (``cancel()``).

    Hosts start no new step, and a host in the middle of its changes is rolled back as if its
    next step had failed; a wait inside a step ends with that step. A token cancels one call.
    """

    def cancel(self, reason: str = "cancelled by the caller") -> None:
        self.set(reason)

    @property
    def cancelled(self) -> bool:
        return self.is_set()
