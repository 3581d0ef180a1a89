"""The durable tables: one module per table, each the only code that writes it.

Holds the run ledger (:mod:`.ledger`: runs, their history, dead letters and
the per-session queue), the side-effect journal (:mod:`.journal`), the job
table (:mod:`.jobs`), the saga ledger (:mod:`.sagas`), the interrupts index
(:mod:`.interrupts`), the schedules' tables (:mod:`.schedules`), the version
records (:mod:`.versions`) and the sweepers' beats (:mod:`.sweeps`). Each
maps its rows to frozen records and asks the store for its SQL by name.

May import: the ground floor (:mod:`durable_adk.errors`, ``faults``, ``ids``,
``metrics``), the value modules (``versions``, ``schedules``, ``cron``) and
:mod:`durable_adk.store`. Never ``google.adk``, never a package above it.
"""
