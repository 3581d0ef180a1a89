"""The public API: the exported names (a snapshot), lazy loading, and a core without ADK."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import durable_adk

EXPECTED = [
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


def test_exported_names_are_the_snapshot() -> None:
    # A change here is a change of the public API: update the snapshot on purpose.
    assert durable_adk.__all__ == EXPECTED
    assert set(EXPECTED) == set(durable_adk._EXPORTS) | {"__version__"}


@pytest.mark.parametrize("name", [n for n in EXPECTED if n != "__version__"])
def test_every_exported_name_resolves(name: str) -> None:
    value = getattr(durable_adk, name)
    assert value is not None
    assert name in dir(durable_adk)


def test_exports_are_the_defining_objects() -> None:
    from durable_adk import errors
    from durable_adk.adk.runner import DurableRunner
    from durable_adk.store import open_store

    assert durable_adk.DurableRunner is DurableRunner
    assert durable_adk.open_store is open_store
    assert durable_adk.errors is errors
    assert durable_adk.Fenced is errors.Fenced


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = durable_adk.Nope  # type: ignore[attr-defined]


def test_the_core_imports_and_runs_without_adk(tmp_path: object) -> None:
    """With google.adk unimportable, the core names load and a ledger round trip works."""
    script = textwrap.dedent(
        """
        import asyncio, importlib.abc, sys

        class NoAdk(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "google.adk" or name.startswith("google.adk."):
                    raise ImportError(f"blocked for the test: {name}")
                return None

        sys.meta_path.insert(0, NoAdk())
        import durable_adk
        from durable_adk import Journal, JobTable, RunLedger, RunStatus, SagaLedger, open_store

        async def main():
            async with open_store("sqlite:///:memory:") as store:
                ledger = RunLedger(store)
                run = await ledger.submit(app_name="a", user_id="u", session_id="s",
                                          request={"parts": []}, owner="w")
                assert run.status is RunStatus.QUEUED, run.status
                assert await Journal(store).get("nothing") is None
                JobTable(store), SagaLedger(store)
        asyncio.run(main())
        assert not any(m == "google.adk" or m.startswith("google.adk.") for m in sys.modules)
        try:
            durable_adk.DurableRunner
        except ImportError as exc:
            print("adk-layer-refused:", exc)
        print("core-ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "core-ok" in done.stdout
    assert "adk-layer-refused: blocked for the test: google.adk" in done.stdout
