"""ADK's services, durable: sessions, artifacts and the app's other services.

Holds :class:`~.sessions.DurableSessionService` (fenced, append-only event
logs with state as a fold, :mod:`.fold`), :class:`~.artifacts.DurableArtifactService`,
and :mod:`.app_services`: the artifact, memory and credential services an app
declares, taken from one place by every entry point.

May import: ``google.adk``, the ground floor and the value modules,
:mod:`durable_adk.store`, :mod:`durable_adk.tables`, :mod:`durable_adk.fencing`,
:mod:`durable_adk.adk.shapes`, :mod:`durable_adk.adk.eventlog` and
:mod:`durable_adk.adk.commits`.
"""
