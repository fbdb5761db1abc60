"""The Python programs that run ON THE HOST: the file helper (`fileagent`, with its part
`fileagent_ops`), the process agent (`agent`, with `agent_proc` and `agent_trust`),
the throughput gate's load generator (`loadgen`) and the one trust rule they share
(`trust_rule`).

None of them imports anything outside the standard library and this package: each is sent as
the text of one ``python3 -I -S -c`` program (`deploy.remote.hostprogram` inlines a main
module's parts), and runs on whatever python3 the host has, so they stay at Python 3.8 syntax
and unannotated. The shell programs beside them are in `deploy.hostsh`. The workstation side
that sends and answers them lives in `deploy.remote`.
"""
