"""The run path: one entry, one driver, one ending, and what moves a run from outside.

Every run, whoever starts it, goes through :class:`~.path.RunPath` (submit,
wait for its turn, drive, end: :mod:`.path`), is driven under its lease by
the :class:`~.driver.Driver` (:mod:`.driver`: drift check first, then ADK)
and ends through :mod:`.ending` (one pure decision, one recording). Beside
them: the run's policies (:mod:`.policy`), how many drives a process admits
(:mod:`.admission`), the app's definition and fingerprint (:mod:`.fingerprint`)
and the drift a continuation is checked for (:mod:`.drift`), the interrupts
inbox brought in line at a run's end and answered once (:mod:`.inbox`), and
the operator's actions on a run (:mod:`.operators`).

May import: everything below it in the ADK layer (:mod:`~durable_adk.adk.shapes`,
:mod:`~durable_adk.adk.eventlog`, :mod:`~durable_adk.adk.commits`,
:mod:`~durable_adk.adk.services`, :mod:`~durable_adk.adk.tools`) and the core.
Never :mod:`durable_adk.adk.loops` or the runner: the loops are told the path,
the path is not told the loops (:class:`~.path.RunningLoops`).
"""
