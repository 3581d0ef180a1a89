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

__version__ = "0.1.0"

# name -> "module" that defines it, or "module:attribute" where the public
# name differs from the defining one. Core modules first (no ADK import), then the
# ADK layer. Kept as data so the lazy loader, ``dir()`` and the snapshot test
# read one list.
_EXPORTS: dict[str, str] = {
    # store
    "open_store": "durable_adk.store",
    "Store": "durable_adk.store",
    "DEFAULT_URL": "durable_adk.store",
    # run ledger
    "RunLedger": "durable_adk.ledger",
    "Run": "durable_adk.ledger",
    "RunStatus": "durable_adk.ledger",
    "DeadLetter": "durable_adk.ledger",
    # journal
    "Journal": "durable_adk.journal",
    "JournalEntry": "durable_adk.journal",
    "OutcomeUnknown": "durable_adk.journal",
    # jobs
    "JobTable": "durable_adk.jobs",
    "Job": "durable_adk.jobs",
    "JobState": "durable_adk.jobs",
    "JobNotFound": "durable_adk.jobs",
    # sagas (ledger half)
    "SagaLedger": "durable_adk.sagas",
    "SagaStatus": "durable_adk.sagas",
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
    "RunDrifted": "durable_adk.adk.drift",
    "RunInterrupted": "durable_adk.errors",
    "LookupUnavailable": "durable_adk.errors",
    "NotFound": "durable_adk.errors",
    "Conflict": "durable_adk.errors",
    "Draining": "durable_adk.errors",
    "InvocationCancelled": "durable_adk.errors",
    # fencing
    "check_lease": "durable_adk.fence",
    "RunFence": "durable_adk.fence",
    "current_fence": "durable_adk.fence",
    "fence_headers": "durable_adk.fence",
    "FenceToken": "durable_adk.fence",
    # ADK layer (imports google.adk on first use)
    "DurableRunner": "durable_adk.adk.runner",
    "RunPolicy": "durable_adk.adk.policy",
    "RetryPolicy": "durable_adk.adk.policy",
    "AppServices": "durable_adk.adk.app_services",
    "Admission": "durable_adk.admission",
    "Background": "durable_adk.adk.background",
    "BackgroundSettings": "durable_adk.loops",
    "configure_logging": "durable_adk.runlog:configure",
    "DurableSessionService": "durable_adk.adk.session_service",
    "DurableArtifactService": "durable_adk.adk.artifact_service",
    "ArtifactInputError": "durable_adk.adk.artifact_service",
    "journaled": "durable_adk.adk.tools",
    "journaled_node": "durable_adk.adk.workflow_nodes",
    "idempotent": "durable_adk.adk.marks",
    "attempt_of": "durable_adk.adk.tools",
    "attempt_in": "durable_adk.adk.tools",
    "long_running_tool": "durable_adk.adk.long_running",
    "DurableLongRunningTool": "durable_adk.adk.long_running",
    "sleep_tool": "durable_adk.adk.sleep",
    "DurableSleepTool": "durable_adk.adk.sleep",
    "Waker": "durable_adk.adk.sleep",
    "sleep_node": "durable_adk.adk.sleep",
    "reattach_open_calls": "durable_adk.adk.resume",
    "register_session_uris": "durable_adk.adk.service_uri:register",
    "DurableRunsPlugin": "durable_adk.adk.server",
    "ServerSettings": "durable_adk.adk.server",
    "SagaSequence": "durable_adk.adk.saga_agent",
    "SagaStage": "durable_adk.adk.saga_agent",
    "SagaSweeper": "durable_adk.adk.saga_agent",
    "SagaFailed": "durable_adk.adk.saga_agent",
    "SagaAborted": "durable_adk.adk.saga_agent",
    "Sweeper": "durable_adk.adk.recovery",
    "Recovery": "durable_adk.adk.recovery",
    "OrphanClass": "durable_adk.adk.classify",
    "Resumer": "durable_adk.adk.resume",
    "ProgressSender": "durable_adk.adk.resume",
    "ExpirySweeper": "durable_adk.adk.resume",
    "Submitter": "durable_adk.adk.resume",
    # the interrupts inbox
    "Interrupt": "durable_adk.interrupts",
    "InterruptTable": "durable_adk.interrupts",
    "answer_interrupt": "durable_adk.adk.inbox",
    "InterruptSweeper": "durable_adk.adk.inbox",
    # schedules
    "Schedule": "durable_adk.schedules",
    "ScheduleTable": "durable_adk.schedule_table",
    "Scheduler": "durable_adk.adk.scheduler",
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
    "LookupUnavailable",
    "NotFound",
    "OrphanClass",
    "OutcomeUnknown",
    "ProgressSender",
    "Recovery",
    "Resumer",
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
    "handle_job_webhook",
    "idempotent",
    "journaled",
    "journaled_node",
    "long_running_tool",
    "open_store",
    "reattach_open_calls",
    "register_session_uris",
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
    from durable_adk.adk.app_services import AppServices
    from durable_adk.adk.artifact_service import ArtifactInputError, DurableArtifactService
    from durable_adk.adk.classify import OrphanClass
    from durable_adk.adk.drift import RunDrifted
    from durable_adk.adk.inbox import InterruptSweeper, answer_interrupt
    from durable_adk.adk.long_running import DurableLongRunningTool, long_running_tool
    from durable_adk.adk.marks import idempotent
    from durable_adk.adk.policy import RetryPolicy, RunPolicy
    from durable_adk.adk.recovery import Recovery, Sweeper
    from durable_adk.adk.resume import (
        ExpirySweeper,
        ProgressSender,
        Resumer,
        Submitter,
        reattach_open_calls,
    )
    from durable_adk.adk.runner import DurableRunner
    from durable_adk.adk.saga_agent import (
        SagaAborted,
        SagaFailed,
        SagaSequence,
        SagaStage,
        SagaSweeper,
    )
    from durable_adk.adk.server import DurableRunsPlugin, ServerSettings
    from durable_adk.adk.service_uri import register as register_session_uris
    from durable_adk.adk.session_service import DurableSessionService
    from durable_adk.adk.sleep import DurableSleepTool, Waker, sleep_node, sleep_tool
    from durable_adk.adk.tools import attempt_in, attempt_of, journaled
    from durable_adk.adk.workflow_nodes import journaled_node
    from durable_adk.errors import (
        Conflict,
        DatabaseBusy,
        Draining,
        DurableError,
        Fenced,
        FenceRefused,
        InvalidArgument,
        InvocationCancelled,
        LookupUnavailable,
        NotFound,
        RunCancelled,
        RunInterrupted,
        SchemaAhead,
        SchemaBehind,
        StoreError,
        StoreUnavailable,
        UnsupportedUrl,
    )
    from durable_adk.fence import FenceToken, RunFence, check_lease, current_fence, fence_headers
    from durable_adk.interrupts import Interrupt, InterruptTable
    from durable_adk.jobs import Job, JobNotFound, JobState, JobTable
    from durable_adk.journal import Journal, JournalEntry, OutcomeUnknown
    from durable_adk.ledger import DeadLetter, Run, RunLedger, RunStatus
    from durable_adk.sagas import SagaLedger, SagaStatus
    from durable_adk.store import DEFAULT_URL, Store, open_store
    from durable_adk.webhooks import WebhookError, handle_job_webhook
