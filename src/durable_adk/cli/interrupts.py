"""``durable-adk interrupts``: the interrupts inbox: what paused runs wait on (list, answer)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from durable_adk.cli.options import (
    AppOpt,
    ByOpt,
    DbOpt,
    JsonOpt,
    LimitOpt,
    ReasonOpt,
    TokenOpt,
    UrlOpt,
    _call,
    _fail,
    _print_items,
    _print_json,
    _short,
    _table,
    _when,
    _who,
    choice,
    console,
)

interrupts_app = typer.Typer(
    no_args_is_help=True,
    help="The interrupts inbox: what paused runs wait on (list, answer).",
)


def _subject(interrupt: dict[str, Any]) -> str:
    """What an interrupt asks about, in a few words."""
    guarded = interrupt.get("guarded_call")
    if interrupt["kind"] == "confirmation" and isinstance(guarded, dict):
        # A tool's or a Workflow node's confirmation: the call it guards.
        return _short(f"{guarded.get('name')}({json.dumps(guarded.get('args') or {})})", 60)
    return _short(json.dumps(interrupt.get("args") or {}), 60)


@interrupts_app.command("list")
def interrupts_list(
    app: AppOpt = None,
    session: Annotated[str | None, typer.Option("--session", help="Only this session's.")] = None,
    kind: Annotated[str | None, typer.Option(help="confirmation, input or long_running")] = None,
    status: Annotated[
        str, typer.Option(help="OPEN (default), ANSWERED, EXPIRED or CLOSED")
    ] = "OPEN",
    limit: LimitOpt = 50,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """What paused runs wait on, across sessions: confirmations, inputs, long-running calls."""
    wanted = choice(status, "--status", ["OPEN", "ANSWERED", "EXPIRED", "CLOSED"])
    of_kind = choice(kind, "--kind", ["confirmation", "input", "long_running"])
    found = _call(
        db,
        url,
        token,
        lambda source: source.interrupts(wanted, app, session, of_kind, limit),
    )
    if as_json:
        _print_items(found)
        return
    rows = [
        [
            i["call_id"],
            i["kind"],
            _subject(i),
            f"{i['app_name']}/{i['session_id']}",
            i["status"],
            _when(i["deadline_at"]),
            i["answered_by"] or "",
        ]
        for i in found
    ]
    columns = ["call", "kind", "asks", "app/session", "status", "deadline", "by"]
    console.print(_table(f"{len(found)} interrupt(s)", columns, rows))


@interrupts_app.command("answer")
def interrupts_answer(
    call_id: Annotated[str, typer.Argument(help="The interrupt's call id.")],
    approve: Annotated[
        bool, typer.Option("--approve", help="Approve a confirmation (a tool's or a node's).")
    ] = False,
    deny: Annotated[bool, typer.Option("--deny", "--reject", help="Deny it (any kind).")] = False,
    payload: Annotated[
        str | None, typer.Option(help="The answer (input, long-running), as JSON.")
    ] = None,
    session: Annotated[
        str | None, typer.Option("--session", help="The session, if the id is open in several.")
    ] = None,
    by: ByOpt = None,
    reason: ReasonOpt = None,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Answers an interrupt exactly once; its paused invocation goes on."""
    if approve and deny:
        _fail("give --approve or --deny (--reject), not both")
    decision = "approve" if approve else "deny" if deny else None
    value: Any = None
    if payload is not None:
        try:
            value = json.loads(payload)
        except json.JSONDecodeError as exc:
            _fail(f"--payload is not JSON: {exc}")
    if decision is None and value is None:
        _fail("give --approve, --deny or --payload")
    who = _who(by)
    done = _call(
        db,
        url,
        token,
        lambda source: source.answer(call_id, who, decision, value, reason, session),
    )
    if as_json:
        _print_json(done)
        return
    console.print(done["message"], highlight=False)


def register(app: typer.Typer) -> None:
    """Adds ``interrupts``."""
    app.add_typer(interrupts_app, name="interrupts")
