"""A reminder agent that sleeps for an hour without a worker, and wakes once after every kill.

The user asks: "Remind me in an hour to call the supplier back." The model
calls ``durable_sleep(seconds=3600)``: the call stays open, the run ends
``PAUSED`` and the wake-up is a timer row on the job table, its due time on
the database clock. The model tells the user when it will remind them. Any
later process's background pass (``DurableRunner``'s loops, ``durable-adk
serve`` or ``durable-adk recover``) wakes the timer once it is due and answers
the call through the per-session queue; the model then says the reminder.

Command line::

    python -m examples.reminders.app start --db URL [--session S] [--seconds 3600]
    python -m examples.reminders.app recover --db URL [--worker W]

``start`` runs the user's turn in a worker with its background loops, prints
one JSON line (``{"status": "PAUSED", "due": ...}``) and keeps running, as a
worker does, until it is killed: the crash test SIGKILLs it. ``recover`` is a
fresh process's one pass of every background loop (what ``durable-adk
recover`` does), re-attaches the open calls of the runs it recovered to
``PAUSED``, and prints what it woke, resumed and re-attached. Crash point
(``DURABLE_ADK_CRASH_AT``): ``sleep.before_timer`` (the model's call is made,
its timer not yet stored), plus the resumer's (``resume.after_submit``, ...).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.events.event import Event
from google.adk.models.llm_request import LlmRequest

from durable_adk import (
    Background,
    DurableRunner,
    JobTable,
    Store,
    open_store,
    sleep_tool,
)
from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.scripted_model import Turn

APP_NAME = "reminders"
USER_ID = "ada"
SESSION_ID = "reminders-1"
ASK = "Remind me in an hour to call the supplier back."
REMINDER = "Reminder: call the supplier back."


def _latest_answer(request: LlmRequest) -> dict[str, Any]:
    for content in reversed(request.contents):
        for part in content.parts or ():
            if part.function_response is not None:
                return dict(part.function_response.response or {})
    return {}


def reply_to_sleep(request: LlmRequest) -> Turn:
    """The model's turn after any answer to the sleep call (sleeping, woke, error)."""
    answer = _latest_answer(request)
    status = answer.get("status")
    if status == "sleeping":
        return Say(f"I will remind you at {answer['due']}.")
    if status == "woke":
        return Say(REMINDER)
    return Say(f"I could not set the reminder: {answer.get('message', status)}")


def build_agent(
    seconds: float = 3600, *, until: str | None = None, extra: list[Turn] | None = None
) -> LlmAgent:
    """The reminder agent: one sleep call, then a reply; ``extra`` turns serve later messages."""
    args: dict[str, Any] = {"until": until} if until is not None else {"seconds": seconds}
    model = ScriptedModel(
        {"reminder": [Call("durable_sleep", args), reply_to_sleep, *(extra or [])]}
    )
    return LlmAgent(
        name="reminder",
        model=model,
        instruction="Set reminders with durable_sleep, then remind the user.",
        tools=[sleep_tool()],
    )


def app() -> App:
    """The example as an ADK App: ``durable-adk serve|recover examples.reminders.app:app``."""
    return App(name=APP_NAME, root_agent=build_agent())


def make_runner(
    store: Store, worker: str, *, seconds: float = 3600, background: bool = True
) -> DurableRunner:
    """The DurableRunner every process of this example uses."""
    return DurableRunner(
        app=build_agent(seconds),
        app_name=APP_NAME,
        store=store,
        worker_id=worker,
        background=background,
    )


def texts(events: list[Event]) -> list[str]:
    """The agents' texts among events."""
    return [
        p.text
        for e in events
        if e.author != "user" and e.content
        for p in e.content.parts or ()
        if p.text
    ]


async def start(db: str, session_id: str, seconds: float) -> None:
    """The user's turn in a worker that keeps running (with its loops) until killed."""
    async with open_store(db) as store, make_runner(store, "worker-A", seconds=seconds) as runner:
        async for _ in runner.run(user_id=USER_ID, session_id=session_id, message=ASK):
            pass
        runs = [r for r in await runner.ledger.list_runs() if r.session_id == session_id]
        timers = await JobTable(store).list_jobs(session_id=session_id)
        due = [j.deadline_at for j in timers if j.timer]
        print(json.dumps({"status": runs[0].status.value, "due": due}), flush=True)
        await asyncio.Event().wait()  # a live worker, holding nothing, until the kill


async def recover(db: str, worker: str) -> dict[str, Any]:
    """A fresh process's one pass of every background loop (``durable-adk recover``).

    A run the pass recovered to ``PAUSED`` may hold a sleep call whose timer
    its dead worker never stored (killed at ``sleep.before_timer``): the
    recovery re-attaches it (stores the timer), as for every job-backed tool,
    and says so in ``Recovery.reattached``.
    """
    async with open_store(db) as store:
        runner = make_runner(store, worker, background=False)
        report = await Background(runner, one_off=True).once()
        return {
            "woken": [j.job_id for j in report.woken],
            "resumed": [r.run_id for r in report.resumed],
            "reattached": [job for r in report.recoveries for job in r.reattached],
        }


def main() -> None:
    """Command line of the example's processes."""
    parser = argparse.ArgumentParser(prog="python -m examples.reminders.app")
    parser.add_argument("action", choices=["start", "recover"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--session", default=SESSION_ID)
    parser.add_argument("--seconds", type=float, default=3600)
    parser.add_argument("--worker", default="worker-B")
    args = parser.parse_args()
    if args.action == "start":
        asyncio.run(start(args.db, args.session, args.seconds))
    else:
        print(json.dumps(asyncio.run(recover(args.db, args.worker))))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
