"""The ``durable-adk`` command, a module per command group.

:mod:`.main` is the root command (``demo``, ``db``) and the entry point;
:mod:`.options` holds ``serve`` and the operations groups (runs, jobs, sagas,
dead letters, interrupts) with the options every group shares;
:mod:`.recover`, :mod:`.schedules` and :mod:`.versions` one group each, and
:mod:`.client` how a command reaches a running worker.
Every command parses its arguments, calls the library under ``asyncio.run``
and prints.

May import: anything in the library; nothing imports it.
"""

from __future__ import annotations

from durable_adk.cli.main import app, main

__all__ = ["app", "main"]
