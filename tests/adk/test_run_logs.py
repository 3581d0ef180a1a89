"""Recoveries, takeovers, hand-backs and parks are logged in one format, with their fields.

Both backends. Each line is ``<event> run=<id> epoch=<n> class=<class> ...``
and carries the same fields as ``record.durable_adk``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from google.adk.agents import LlmAgent

from durable_adk import DurableRunner, RunLedger, RunStatus, Sweeper, errors
from durable_adk.runlog import LOG_LEVEL_ENV, configure
from durable_adk.store import Store
from durable_adk.testing import Call, Say, ScriptedModel

APP = "logged"
FAULT = {"left": 0}


async def charge(amount: int) -> dict[str, Any]:
    """Charges a card (not idempotent: after a crash its outcome is unknown)."""
    if FAULT["left"]:
        FAULT["left"] -= 1
        raise errors.StoreUnavailable("the store went away mid-tool")
    return {"charged": amount}


def runner(store: Store, worker: str) -> DurableRunner:
    script = [Call("charge", {"amount": 5}), Say("Charged.")]
    agent = LlmAgent(name="root", model=ScriptedModel({"root": script}), tools=[charge])
    return DurableRunner(app=agent, app_name=APP, store=store, worker_id=worker, background=False)


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if isinstance(getattr(r, "durable_adk", None), dict) and r.durable_adk["event"] == name
    ]


async def test_a_recovery_is_logged_with_run_class_and_epoch(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    ledger = RunLedger(store)
    started = await ledger.start(
        app_name=APP,
        user_id="u",
        session_id="s1",
        request={"role": "user", "parts": [{"text": "charge me"}]},
        owner="dead-worker",
        now=time.time(),
    )
    assert started is not None
    run_id = started.run.run_id
    await ledger.backdate(run_id, 3600)
    caplog.set_level(logging.INFO, logger="durable_adk")
    (done,) = await Sweeper(runner(store, "fresh")).recover_once()
    assert done.status is RunStatus.DONE
    (takeover,) = events(caplog, "takeover")
    (recovered,) = events(caplog, "recovered")
    epoch = started.run.epoch + 1  # the claim bumped it
    assert takeover.levelno == logging.INFO and recovered.levelno == logging.INFO
    assert takeover.durable_adk == {
        "event": "takeover",
        "run_id": run_id,
        "epoch": epoch,
        "class": None,
        "attempt": started.run.attempts + 1,
        "owner": "fresh",
        "session": "s1",
    }
    fields = recovered.durable_adk
    assert (fields["run_id"], fields["epoch"], fields["class"]) == (run_id, epoch, "NOT_STARTED")
    attempt = started.run.attempts + 1
    assert (fields["action"], fields["status"], fields["attempt"]) == ("redrive", "DONE", attempt)
    assert recovered.getMessage().startswith(
        f"recovered run={run_id} epoch={epoch} class=NOT_STARTED attempt={attempt} action=redrive "
        "status=DONE reason="
    )


async def test_a_hand_back_and_a_park_are_logged_with_run_class_and_epoch(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="durable_adk")
    FAULT["left"] = 1
    first = runner(store, "first")
    with pytest.raises(errors.RunInterrupted):
        async for _event in first.run(user_id="u", session_id="s2", message="charge me"):
            pass
    (handed,) = events(caplog, "handed_back")
    run_id = handed.durable_adk["run_id"]
    assert handed.levelno == logging.WARNING and handed.durable_adk["epoch"] == 1
    assert "transient fault" in handed.durable_adk["reason"]
    await RunLedger(store).backdate(run_id, 3600)
    (parked_run,) = await Sweeper(runner(store, "fresh")).recover_once()
    assert parked_run.status is RunStatus.PARKED
    (parked,) = events(caplog, "parked")
    assert parked.levelno == logging.WARNING
    fields = parked.durable_adk
    assert (fields["run_id"], fields["epoch"], fields["class"]) == (run_id, 2, "TOOL_UNANSWERED")
    assert fields["attempt"] == 2 and "outcome unknown: charge" in fields["reason"]
    assert parked.getMessage().startswith(
        f'parked run={run_id} epoch=2 class=TOOL_UNANSWERED attempt=2 reason="outcome unknown'
    )
    (recovered,) = events(caplog, "recovered")
    assert recovered.durable_adk["status"] == "PARKED"


def test_configure_sets_the_library_level_from_argument_or_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    library = logging.getLogger("durable_adk")
    before = library.level
    try:
        assert configure("debug") == logging.DEBUG and library.level == logging.DEBUG
        monkeypatch.setenv(LOG_LEVEL_ENV, "ERROR")
        assert configure() == logging.ERROR and library.level == logging.ERROR
        monkeypatch.delenv(LOG_LEVEL_ENV)
        assert configure() == logging.INFO
        library.setLevel(logging.WARNING)
        with pytest.raises(errors.InvalidArgument, match="unknown log level 'loud'"):
            configure("loud")
        assert library.level == logging.WARNING  # nothing changed
    finally:
        library.setLevel(before)
        for handler in list(library.handlers):
            library.removeHandler(handler)
