"""The ``durable-adk`` command, a module per command group.

:mod:`.main` is the root command (``demo``, ``db``) and the entry point;
:mod:`.serve`, :mod:`.recover`, :mod:`.runs`, :mod:`.jobs`, :mod:`.sagas`,
:mod:`.dead_letters`, :mod:`.interrupts`, :mod:`.schedules` and
:mod:`.versions` one command or group each; :mod:`.options` what they share
(the options, reaching the data on a database or through a worker with
:mod:`.client`, printing). Every command parses its arguments, calls the
library under ``asyncio.run`` and prints.

May import: anything in the library; nothing imports it.
"""

from __future__ import annotations

from durable_adk.cli.main import app, main

__all__ = ["app", "main"]
