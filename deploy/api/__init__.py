"""deploy as a library: ``from deploy import plan, apply, rollback``.

Each call does what the command of the same name does and returns the run's report, the
`deploy.engine.results.RunResult` whose ``to_dict()`` is the document ``--json`` prints
(described by `deploy.report.json_schema`); ``report.exit_code`` is the command's exit code.
Invalid input raises `deploy.errors.InputError` (nothing touched); another run of the same
playbook and inventory holding the workstation's lock raises `deploy.engine.local_lock.RunLocked`.
Everything that happens on a host is in the report, never raised.

No click and no terminal: nothing is printed or asked. A secret comes from the inventory's
``*_env`` variables (``password_env``, ``become_password_env``), never from a prompt. Progress
goes to the ``progress`` object given (the engine's `deploy.engine.host_run.Progress`:
``host_event``, ``step_started``, ``step_finished``), if any.

Cancellation is the caller's `CancelToken`, not a signal handler (a library cannot install
one off the main thread, and must not take the process's Ctrl-C from its host program):
``token.cancel()`` from any thread makes the run start no new step, and roll back every host
in the middle of its changes, as a failure does; hosts not started are skipped. The report
then says ``cancelled by the caller`` (or the reason given).

Safe to call from a thread, and from several at once on different playbooks or inventories:
a call keeps its state in its own objects; the workstation's lock per playbook and inventory
is held for the call and released when it returns, however it returns. The CLI
(`deploy.cli.apply`, `deploy.cli.rollback`) is a layer over these functions: it adds the
options, the prompts, signals, the output and the exit code.
"""

from __future__ import annotations

from deploy.api.run import Prepared, apply, execute, plan, prepare
from deploy.api.token import CancelToken
from deploy.api.undo import rollback, rollback_target, undo
from deploy.config.locate import find_playbook, inventory_path

__all__ = [
    "CancelToken",
    "Prepared",
    "apply",
    "execute",
    "find_playbook",
    "inventory_path",
    "plan",
    "prepare",
    "rollback",
    "rollback_target",
    "undo",
]
