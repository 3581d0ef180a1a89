"""durable-adk: Google ADK agents that survive crashes.

The public API is what this module exports (``__all__``, snapshot-tested in
tests/unit/test_public_api.py); everything else is internal and may change.
Names are imported lazily, on first use: ``import durable_adk`` needs no ADK,
and the framework-agnostic core (the store, the run ledger, the journal, the
job table, the saga ledger, the errors) works without it. The ADK layer
(``DurableRunner``, ``DurableSessionService``, ``DurableArtifactService``, the
tool decorators, the saga agents and the background loops) imports
``google.adk`` when one of its names is first used.

Example::

    from durable_adk import DurableRunner, journaled, open_store

Errors are exported here too; ``durable_adk.errors`` holds every class.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from durable_adk import _moved

__version__ = "0.1.0"

_moved.install()  # the old import paths of moved modules (durable_adk._moved)

# name -> "module" that defines it, or "module:attribute" where the public
# name differs from the defining one. Core modules first (no ADK import), then the
# ADK layer. Kept as data so the lazy loader, ``dir()`` and the snapshot test
# read one list.
_EXPORTS: dict[str, str] = {
    # store
    "open_store": "durable_adk.store",
    "Store": "durable_adk.store",
    "DEFAULT_URL": "durable_adk.store",
    # encryption at rest
    "Keyring": "durable_adk.store",
    "KeyUnavailable": "durable_adk.errors",
    "shred_user": "durable_adk.store.rotation",
    # run ledger
    "RunLedger": "durable_adk.tables.ledger",
    "Run": "durable_adk.tables.ledger",
    "RunStatus": "durable_adk.tables.ledger",
    "DeadLetter": "durable_adk.tables.ledger",
    # journal
    "Journal": "durable_adk.effect_tables.journal",
    "JournalEntry": "durable_adk.effect_tables.journal",
    "OutcomeUnknown": "durable_adk.effect_tables.journal",
    # jobs
    "JobTable": "durable_adk.effect_tables.jobs",
    "Job": "durable_adk.effect_tables.jobs",
    "JobState": "durable_adk.effect_tables.jobs",
    "JobNotFound": "durable_adk.effect_tables.jobs",
    # sagas (ledger half)
    "SagaLedger": "durable_adk.effect_tables.sagas",
    "SagaStatus": "durable_adk.effect_tables.sagas",
    # webhooks
    "webhooks": "durable_adk.webhooks",
    "handle_job_webhook": "durable_adk.webhooks",
    "WebhookError": "durable_adk.webhooks",
    # errors
    "errors": "durable_adk.errors",
    "DurableError": "durable_adk.errors",
    "InvalidArgument": "durable_adk.errors",
    "StoreError": "durable_adk.errors",
    "DatabaseBusy": "durable_adk.errors",
    "StoreUnavailable": "durable_adk.errors",
    "SchemaBehind": "durable_adk.errors",
    "SchemaAhead": "durable_adk.errors",
    "UnsupportedUrl": "durable_adk.errors",
    "Fenced": "durable_adk.errors",
    "FenceRefused": "durable_adk.errors",
    "RunCancelled": "durable_adk.errors",
    "RunDrifted": "durable_adk.adk.runs.drift",
    "RunInterrupted": "durable_adk.errors",
    "LookupUnavailable": "durable_adk.errors",
    "NotFound": "durable_adk.errors",
    "Conflict": "durable_adk.errors",
    "Draining": "durable_adk.errors",
    "InvocationCancelled": "durable_adk.errors",
    "PayloadTooDeep": "durable_adk.errors",
    "PayloadTooLarge": "durable_adk.errors",
    # limits
    "PayloadLimits": "durable_adk.limits",
    # fencing
    "check_lease": "durable_adk.fencing.fence",
    "RunFence": "durable_adk.fencing.fence",
    "current_fence": "durable_adk.fencing.fence",
    "fence_headers": "durable_adk.fencing.fence",
    "FenceToken": "durable_adk.fencing.fence",
    # ADK layer (imports google.adk on first use)
    "DurableRunner": "durable_adk.adk.runner",
    "RunPolicy": "durable_adk.adk.runs.policy",
    "RetryPolicy": "durable_adk.adk.runs.policy",
    "AppServices": "durable_adk.adk.services.app_services",
    "Admission": "durable_adk.adk.runs.admission",
    "Background": "durable_adk.adk.loops.background",
    "BackgroundSettings": "durable_adk.adk.loops.every",
    "configure_logging": "durable_adk.runlog:configure",
    "DurableSessionService": "durable_adk.adk.services.sessions",
    "DurableArtifactService": "durable_adk.adk.services.artifacts",
    "ArtifactInputError": "durable_adk.adk.services.artifacts",
    "journaled": "durable_adk.adk.tools.journaling",
    "journaled_node": "durable_adk.adk.tools.workflow_nodes",
    "idempotent": "durable_adk.adk.shapes.marks",
    "attempt_of": "durable_adk.adk.tools.journaling",
    "attempt_in": "durable_adk.adk.tools.journaling",
    "long_running_tool": "durable_adk.adk.tools.long_running",
    "DurableLongRunningTool": "durable_adk.adk.tools.long_running",
    "sleep_tool": "durable_adk.adk.loops.sleep",
    "DurableSleepTool": "durable_adk.adk.loops.sleep",
    "Waker": "durable_adk.adk.loops.sleep",
    "sleep_node": "durable_adk.adk.loops.sleep",
    "reattach_open_calls": "durable_adk.adk.loops.resume",
    "register_session_uris": "durable_adk.adk.servers.uri:register",
    "DurableRunsPlugin": "durable_adk.adk.servers.plugin",
    "ServerSettings": "durable_adk.adk.servers.plugin",
    "SagaSequence": "durable_adk.adk.tools.saga_agent",
    "SagaStage": "durable_adk.adk.tools.saga_agent",
    "SagaSweeper": "durable_adk.adk.tools.saga_agent",
    "SagaFailed": "durable_adk.adk.tools.saga_agent",
    "SagaAborted": "durable_adk.adk.tools.saga_agent",
    "Sweeper": "durable_adk.adk.loops.recovery",
    "Recovery": "durable_adk.adk.loops.recovery",
    "OrphanClass": "durable_adk.adk.eventlog.classify",
    "Resumer": "durable_adk.adk.loops.resume",
    "ProgressSender": "durable_adk.adk.loops.resume",
    "ExpirySweeper": "durable_adk.adk.loops.resume",
    "Submitter": "durable_adk.adk.loops.resume",
    # the interrupts inbox
    "Interrupt": "durable_adk.tables.interrupts",
    "InterruptTable": "durable_adk.tables.interrupts",
    "answer_interrupt": "durable_adk.adk.runs.inbox",
    "InterruptSweeper": "durable_adk.adk.runs.inbox",
    # schedules
    "Schedule": "durable_adk.schedules",
    "ScheduleTable": "durable_adk.tables.schedules",
    "Scheduler": "durable_adk.adk.loops.scheduler",
    # data lifecycle
    "RetentionPolicy": "durable_adk.lifecycle.policy",
    "PurgeReport": "durable_adk.lifecycle.purge",
    "purge": "durable_adk.lifecycle.purge",
    "ForgetReport": "durable_adk.lifecycle.forget",
    "forget_user": "durable_adk.lifecycle.forget",
}

# Literal, so linters and type checkers read it; kept equal to _EXPORTS by a test.
__all__ = [
    "DEFAULT_URL",
    "Admission",
    "AppServices",
    "ArtifactInputError",
    "Background",
    "BackgroundSettings",
    "Conflict",
    "DatabaseBusy",
    "DeadLetter",
    "Draining",
    "DurableArtifactService",
    "DurableError",
    "DurableLongRunningTool",
    "DurableRunner",
    "DurableRunsPlugin",
    "DurableSessionService",
    "DurableSleepTool",
    "ExpirySweeper",
    "FenceRefused",
    "FenceToken",
    "Fenced",
    "ForgetReport",
    "Interrupt",
    "InterruptSweeper",
    "InterruptTable",
    "InvalidArgument",
    "InvocationCancelled",
    "Job",
    "JobNotFound",
    "JobState",
    "JobTable",
    "Journal",
    "JournalEntry",
    "KeyUnavailable",
    "Keyring",
    "LookupUnavailable",
    "NotFound",
    "OrphanClass",
    "OutcomeUnknown",
    "PayloadLimits",
    "PayloadTooDeep",
    "PayloadTooLarge",
    "ProgressSender",
    "PurgeReport",
    "Recovery",
    "Resumer",
    "RetentionPolicy",
    "RetryPolicy",
    "Run",
    "RunCancelled",
    "RunDrifted",
    "RunFence",
    "RunInterrupted",
    "RunLedger",
    "RunPolicy",
    "RunStatus",
    "SagaAborted",
    "SagaFailed",
    "SagaLedger",
    "SagaSequence",
    "SagaStage",
    "SagaStatus",
    "SagaSweeper",
    "Schedule",
    "ScheduleTable",
    "Scheduler",
    "SchemaAhead",
    "SchemaBehind",
    "ServerSettings",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "Submitter",
    "Sweeper",
    "UnsupportedUrl",
    "Waker",
    "WebhookError",
    "__version__",
    "answer_interrupt",
    "attempt_in",
    "attempt_of",
    "check_lease",
    "configure_logging",
    "current_fence",
    "errors",
    "fence_headers",
    "forget_user",
    "handle_job_webhook",
    "idempotent",
    "journaled",
    "journaled_node",
    "long_running_tool",
    "open_store",
    "purge",
    "reattach_open_calls",
    "register_session_uris",
    "shred_user",
    "sleep_node",
    "sleep_tool",
    "webhooks",
]


def __getattr__(name: str) -> Any:
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module 'durable_adk' has no attribute {name!r}")
    module, _, attribute = target.partition(":")
    loaded = importlib.import_module(module)
    # A module exported by name ("errors", "webhooks") is the module itself.
    value = loaded if module.rsplit(".", 1)[-1] == name else getattr(loaded, attribute or name)
    globals()[name] = value  # the next access skips this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ loads these
    from durable_adk import errors, webhooks
    from durable_adk.adk.eventlog.classify import OrphanClass
    from durable_adk.adk.loops.recovery import Recovery, Sweeper
    from durable_adk.adk.loops.resume import (
        ExpirySweeper,
        ProgressSender,
        Resumer,
        Submitter,
        reattach_open_calls,
    )
    from durable_adk.adk.loops.sleep import DurableSleepTool, Waker, sleep_node, sleep_tool
    from durable_adk.adk.runner import DurableRunner
    from durable_adk.adk.runs.drift import RunDrifted
    from durable_adk.adk.runs.inbox import InterruptSweeper, answer_interrupt
    from durable_adk.adk.runs.policy import RetryPolicy, RunPolicy
    from durable_adk.adk.servers.plugin import DurableRunsPlugin, ServerSettings
    from durable_adk.adk.servers.uri import register as register_session_uris
    from durable_adk.adk.services.app_services import AppServices
    from durable_adk.adk.services.artifacts import ArtifactInputError, DurableArtifactService
    from durable_adk.adk.services.sessions import DurableSessionService
    from durable_adk.adk.shapes.marks import idempotent
    from durable_adk.adk.tools.journaling import attempt_in, attempt_of, journaled
    from durable_adk.adk.tools.long_running import DurableLongRunningTool, long_running_tool
    from durable_adk.adk.tools.saga_agent import (
        SagaAborted,
        SagaFailed,
        SagaSequence,
        SagaStage,
        SagaSweeper,
    )
    from durable_adk.adk.tools.workflow_nodes import journaled_node
    from durable_adk.effect_tables.jobs import Job, JobNotFound, JobState, JobTable
    from durable_adk.effect_tables.journal import Journal, JournalEntry, OutcomeUnknown
    from durable_adk.effect_tables.sagas import SagaLedger, SagaStatus
    from durable_adk.errors import (
        Conflict,
        DatabaseBusy,
        Draining,
        DurableError,
        Fenced,
        FenceRefused,
        InvalidArgument,
        InvocationCancelled,
        KeyUnavailable,
        LookupUnavailable,
        NotFound,
        PayloadTooDeep,
        PayloadTooLarge,
        RunCancelled,
        RunInterrupted,
        SchemaAhead,
        SchemaBehind,
        StoreError,
        StoreUnavailable,
        UnsupportedUrl,
    )
    from durable_adk.fencing.fence import (
        FenceToken,
        RunFence,
        check_lease,
        current_fence,
        fence_headers,
    )
    from durable_adk.limits import PayloadLimits
    from durable_adk.store import DEFAULT_URL, Keyring, Store, open_store
    from durable_adk.store.rotation import shred_user
    from durable_adk.tables.interrupts import Interrupt, InterruptTable
    from durable_adk.tables.ledger import DeadLetter, Run, RunLedger, RunStatus
    from durable_adk.webhooks import WebhookError, handle_job_webhook
