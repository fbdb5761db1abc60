"""The host's state directory: its layout, its records, and what they say about each run.

One owner for what DESIGN.md's "State on a host" describes (issue 16 item 4):

- `deploy.statedir.layout`: every path under state_dir, and the only shell that reads it;
- `deploy.statedir.records`: journal records, typed, versioned and checksummed;
- `deploy.statedir.runs`: a run's state from its records, and the decisions apply and
  rollback take from it (pure: the property test runs this same code).

Pure: no I/O here. How bytes reach the host is the engine's journal sink (`deploy.engine.journal`).
"""
