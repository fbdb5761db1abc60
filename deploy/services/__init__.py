"""Services: what a server is on a host, below the steps that act on it.

One concept per module, imported only by what uses it (nothing here is loaded by ``deploy
validate`` or a file-only run; `tests/unit/test_startup_cost.py` holds that):

- `deploy.services.state`: what runs now (`ServiceState`): pid, argv, env, cwd, listeners, user.
- `deploy.services.identity`: which processes are the server (the helper's probe read into a
  `ServiceState`), whether they are this service's, whether the helper can start as its user.
- `deploy.services.helper`: the host-side process helper (`deploy.hostpy.agent`), one exec per
  operation.
- `deploy.services.managers`: how a server is found, stopped and started — the ``process``
  manager (the helper) and the ``systemd`` manager (systemctl) behind one interface.
- `deploy.services.control`: `ServiceControl`, one service on one host for one run: its
  manager, drain/stop/start, logs.
- `deploy.services.endpoint`: where the server answers (its sockets, its ``--host``) and its
  API key.
- `deploy.services.probes`: talking to the server over HTTP: health, readiness wait, generate.
- `deploy.services.confirm`: ``/server_info`` against the declared settings; the versions.
- `deploy.services.drain`: the stop as SGLang drains, with the in-flight count said.
- `deploy.services.load`: the throughput gate's load and the baseline on the old server.
- `deploy.services.desired`: the server a restart wants (the running one plus declared changes).
- `deploy.services.gpus`: after a stop, waiting for the GPUs to be released.
- `deploy.services.undo`: putting a service back as a journal record says it ran.

The arrows point one way: steps and the rollback use services; services use config, edits,
checks and remote, never steps or the engine (`tests/unit/test_services_imports.py`).
"""
