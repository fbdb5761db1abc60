"""``python -m deploy.cli``: the same as the ``deploy`` script."""

from deploy.cli import main

main()
