"""The Python programs that run ON THE HOST: the file helper (`fileagent`, with its part
`fileagent_ops`), the process agent (`agent`, with `agent_proc` and `agent_trust`) and the
trust rule they share (`trust_rule`). The throughput gate's load generator is the services'
(`deploy.services.loadgen`).

Each is sent as the text of one ``python3 -I -S -c`` program (`deploy.remote.hostprogram`
inlines a main module's parts) and runs on whatever python3 the host has: standard library
and this package only, Python 3.8 syntax, no annotations. The shell programs are
`deploy.hostsh`; the workstation side is `deploy.remote`.
"""
