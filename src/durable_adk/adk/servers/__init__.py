"""Durable runs under ADK's own servers (``adk api_server``, ``adk web``, ``get_fast_api_app``).

Holds :class:`~.plugin.DurableRunsPlugin` (ADK's plain Runner's runs put on
the run path) and the ``durable+sqlite://`` / ``durable+postgresql://``
session URIs ADK's service registry builds them from (:mod:`.uri`).

May import: :class:`~durable_adk.adk.runner.DurableRunner` and everything
below it. Nothing in the library imports it except the public API.
"""
