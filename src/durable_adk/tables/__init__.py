"""The durable tables: one module per table, each the only code that writes it.

Holds the run ledger (:mod:`.ledger`: runs, their history, dead letters and
the per-session queue), the interrupts index (:mod:`.interrupts`), the
schedules' tables (:mod:`.schedules`), the version records (:mod:`.versions`)
and the sweepers' beats (:mod:`.sweeps`). The tables of outside effects (the
journal, jobs, sagas) are beside it, in :mod:`durable_adk.effect_tables`.
Each maps its rows to frozen records and asks the store for its SQL by name.

May import: the ground floor (:mod:`durable_adk.errors`, ``faults``, ``ids``,
``metrics``), the value modules (``versions``, ``schedules``, ``cron``) and
:mod:`durable_adk.store`. Never ``google.adk``, never a package above it.
"""
