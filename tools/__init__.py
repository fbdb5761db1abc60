"""Development tooling for the `deploy` repository: generators of its docs, never shipped.

The wheel holds only the product (``deploy*`` in pyproject's package list); what writes
``docs/`` and ``schema/`` from the code (``python -m tools.docgen``) and runs the fault suite
into ``docs/reliability.md`` (``python -m tools.reliability``) lives here, run from a checkout.
"""
