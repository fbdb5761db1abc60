"""The Python programs that run ON THE HOST: the file helper (`fileagent`, with its part
`fileagent_ops`), the process agent (`agent`, with `agent_proc` and `agent_trust`) and the
trust rule they share (`trust_rule`). Each is sent as the text of one ``python3 -I -S -c``
program (`deploy.remote.hostprogram`) and runs on whatever python3 the host has: standard
library only, Python 3.8 syntax, no annotations. The shell programs are `deploy.hostsh`.
"""
