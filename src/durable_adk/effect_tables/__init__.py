"""The tables of outside effects: one module per table, each the only code that writes it.

Holds the side-effect journal (:mod:`.journal`: each tool call's intent and
outcome by business key), the job table of long-running tools (:mod:`.jobs`:
exactly-once completion and resume) and the saga ledger (:mod:`.sagas`:
stages and their compensations). Beside :mod:`durable_adk.tables` (the runs
and what schedules and serves them), on the same floor; neither imports the
other. Each maps its rows to frozen records and asks the store for its SQL by
name.

May import: the ground floor (:mod:`durable_adk.errors`, ``faults``, ``ids``,
``metrics``), the value modules (``versions``) and :mod:`durable_adk.store`.
Never ``google.adk``, never a package above it.
"""
