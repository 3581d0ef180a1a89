"""The ADK layer: the only package of durable-adk that imports google.adk.

Its packages, bottom floor first (each imports only the ones before it, and
the core below them all): :mod:`.shapes` (what an app is made of),
:mod:`.eventlog` (what a session's events say), :mod:`.commits` (when a
drive's events reach the store), :mod:`.services` (ADK's services, durable),
:mod:`.tools` (durable tools and agents), :mod:`.runs` (the one run path),
:mod:`.loops` (the background loops); then :mod:`.runner`
(:class:`~durable_adk.adk.runner.DurableRunner`, the facade) and
:mod:`.servers` (durable runs under ADK's own servers). docs/architecture.md
draws them.

May import: ``google.adk`` and the core (:mod:`durable_adk.store`,
:mod:`durable_adk.tables`, :mod:`durable_adk.fencing` and the ground floor);
never :mod:`durable_adk.service`, :mod:`durable_adk.cli` or the kits.
"""
