"""``python -m durable_adk.cli``: the ``durable-adk`` command."""

from durable_adk.cli.main import main

main()
