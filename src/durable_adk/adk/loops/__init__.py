"""The background loops every durable process runs beside its live runs.

Holds the wiring of them all (:mod:`.background`), the recovery sweeper
(:mod:`.recovery`), the job submitter, resumer, progress sender and expiry
sweep (:mod:`.resume`), durable sleep and its timer loop (:mod:`.sleep`), the
schedule poller (:mod:`.scheduler`) and the cadence every loop keeps
(:mod:`.every`). Each loop starts its runs through the one run path.

May import: :mod:`durable_adk.adk.runs` and everything below it.
"""
