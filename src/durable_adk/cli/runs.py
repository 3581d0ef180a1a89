"""``durable-adk runs``: the ledger's runs: list, show, cancel, resolve, abandon, retry, actions."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from durable_adk.cli.options import (
    _STATUS_STYLE,
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
    _outcome,
    _print_items,
    _print_json,
    _short,
    _table,
    _version_of,
    _when,
    _who,
    choice,
    console,
)

runs_app = typer.Typer(
    no_args_is_help=True,
    help="Runs on the ledger: list, show, cancel, resolve, abandon, retry, actions.",
)


def _describe(event: dict[str, Any]) -> str:
    parts = (event.get("content") or {}).get("parts") or []
    said = []
    for part in parts:
        if part.get("text"):
            said.append(_short(part["text"], 80))
        if part.get("function_call"):
            call = part["function_call"]
            said.append(f"call {call.get('name')}({_short(json.dumps(call.get('args', {})), 60)})")
        if part.get("function_response"):
            answer = part["function_response"]
            response = _short(json.dumps(answer.get("response", {})), 60)
            said.append(f"response {answer.get('name')} -> {response}")
    return "; ".join(said) or "(state or marker)"


@runs_app.command("list")
def runs_list(
    status: Annotated[
        str | None,
        typer.Option(help="QUEUED, RUNNING, PAUSED, DONE, FAILED, PARKED or CANCELLED"),
    ] = None,
    app: AppOpt = None,
    limit: LimitOpt = 50,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Runs, newest first (of every app on the database, or of one with --app)."""
    from durable_adk.tables.ledger import RunStatus

    wanted = choice(status, "--status", [s.value for s in RunStatus])
    chosen = RunStatus(wanted) if wanted else None
    runs = _call(db, url, token, lambda source: source.list_runs(chosen, limit, app))
    if as_json:
        _print_items(runs)
        return
    rows = [
        [
            r["run_id"],
            r["app_name"],
            f"{r['user_id']}/{r['session_id']}",
            f"[{_STATUS_STYLE.get(r['status'], 'white')}]{r['status']}[/]",
            r["classification"] or "",
            r.get("app_version") or "",
            str(r["attempts"]),
            _short(r["owner"], 24),
            _when(r["updated_at"]),
            _short(r["last_error"], 50),
        ]
        for r in runs
    ]
    title = f"{len(runs)} run(s)" + (f" {chosen.value}" if chosen else "")
    console.print(
        _table(
            title,
            [
                "run",
                "app",
                "session",
                "status",
                "class",
                "version",
                "attempts",
                "owner",
                "updated",
                "error",
            ],
            rows,
        )
    )


@runs_app.command("show")
def runs_show(
    run_id: Annotated[str, typer.Argument(help="The run.")],
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """One run: its row, what the classifier reads, its events and dead letters."""
    detail = _call(db, url, token, lambda source: source.run_detail(run_id))
    if as_json:
        _print_json(detail)
        return
    run = detail["run"]
    fields = [
        ["run", run["run_id"]],
        ["app", run["app_name"]],
        ["session", f"{run['user_id']}/{run['session_id']}"],
        ["invocation", run["invocation_id"]],
        ["status", f"[{_STATUS_STYLE.get(run['status'], 'white')}]{run['status']}[/]"],
        ["recorded class", run["classification"] or ""],
        ["app version", _version_of(run)],
        ["attempts", str(run["attempts"])],
        ["owner / epoch", f"{run['owner']} / {run['epoch']}"],
        ["created", _when(run["created_at"])],
        ["finished", _when(run["finished_at"])],
        ["last error", run["last_error"] or ""],
    ]
    if detail.get("wakes_at") is not None:
        fields.append(["wakes at", _when(detail["wakes_at"])])
    if detail.get("a2a_tasks"):
        fields.append(["A2A tasks", ", ".join(detail["a2a_tasks"])])
    finding = detail.get("finding")
    if finding:
        fields.append(["classifier now", f"{finding['cls']}: {finding['reason']}"])
    elif detail.get("note"):
        fields.append(["classifier now", f"not classified: {detail['note']}"])
    console.print(_table(f"run {run['run_id']}", ["field", "value"], fields))
    console.print(_table("its timeline", ["when", "#", "who", "what"], _timeline(detail)))
    if detail["dead_letters"]:
        letters = [
            [_when(d["created_at"]), d["classification"] or "", d["error"]]
            for d in detail["dead_letters"]
        ]
        console.print(_table("dead letters", ["when", "class", "error"], letters))


def _timeline(detail: dict[str, Any]) -> list[list[str]]:
    """The run's events, operator actions and takeover markers, in order.

    A marker ``--- epoch N ---`` stands where the events' fencing epoch
    changes (a new holder: a takeover, a recovery, an operator); each operator
    action stands before the first event written after it.
    """
    starts = {a["first_seq"]: a for a in detail.get("attempts", [])}
    actions = sorted(detail.get("actions", []), key=lambda a: a["created_at"])
    rows: list[list[str]] = []

    def action_row(action: dict[str, Any]) -> list[str]:
        why = f": {action['reason']}" if action.get("reason") else ""
        what = f"[bold]{action['action']}[/] {action['status_before']} -> {action['status_after']}"
        return [_when(action["created_at"]), "", action["actor"], what + why]

    for event in detail["events"]:
        data = event["event"]
        stamp = data.get("timestamp") or 0
        while actions and actions[0]["created_at"] <= stamp:
            rows.append(action_row(actions.pop(0)))
        attempt = starts.get(event["seq"])
        if attempt is not None:
            holder = f"operator {attempt['by_operator']}" if attempt["by_operator"] else "a worker"
            rows.append(["", "", "", f"[dim]--- epoch {attempt['epoch']}: {holder} ---[/]"])
        rows.append([_when(stamp), str(event["seq"]), data.get("author", ""), _describe(data)])
    rows.extend(action_row(a) for a in actions)
    return rows


@runs_app.command("retry")
def runs_retry(
    run_id: Annotated[str, typer.Argument(help="A parked run.")],
    by: ByOpt = None,
    reason: ReasonOpt = None,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Puts a parked run back in its session's queue; a worker's next sweep recovers it."""
    who = _who(by)
    run = _call(db, url, token, lambda source: source.retry(run_id, who, reason))
    if as_json:
        _print_json(run)
        return
    console.print(f"run {run['run_id']} is {run['status']}: the next sweep of a worker recovers it")


@runs_app.command("cancel")
def runs_cancel(
    run_id: Annotated[str, typer.Argument(help="The run.")],
    by: ByOpt = None,
    reason: ReasonOpt = None,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Cancels a run: at once unless it is running, else its owner stops it at its heartbeat."""
    who = _who(by)
    _outcome(_call(db, url, token, lambda source: source.cancel(run_id, who, reason)), as_json)


@runs_app.command("abandon")
def runs_abandon(
    run_id: Annotated[str, typer.Argument(help="A parked (or failed) run.")],
    reason: Annotated[str, typer.Option("--reason", help="Why (required, recorded).")],
    by: ByOpt = None,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Closes a parked run as FAILED with your reason."""
    who = _who(by)
    _outcome(_call(db, url, token, lambda source: source.abandon(run_id, who, reason)), as_json)


@runs_app.command("resolve")
def runs_resolve(
    run_id: Annotated[str, typer.Argument(help="A parked (or failed) run.")],
    result: Annotated[
        str | None,
        typer.Option(help="The result of its one unanswered call, as JSON."),
    ] = None,
    call: Annotated[
        list[str] | None,
        typer.Option(help="CALL_ID=JSON: the result of one call (repeatable, for several)."),
    ] = None,
    by: ByOpt = None,
    reason: ReasonOpt = None,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Gives the result of a parked run's unknown effect; the run then goes on from it."""
    if (result is None) == (not call):
        _fail("give exactly one of --result and --call")
    value: Any = None
    results: dict[str, Any] | None = None
    try:
        if result is not None:
            value = json.loads(result)
        else:
            results = {}
            for item in call or ():
                call_id, sep, text = item.partition("=")
                if not sep or not call_id:
                    _fail(f"--call takes CALL_ID=JSON, got {item!r}")
                results[call_id] = json.loads(text)
    except json.JSONDecodeError as exc:
        _fail(f"the result is not JSON: {exc}")
    who = _who(by)
    outcome = _call(
        db, url, token, lambda source: source.resolve(run_id, who, reason, value, results)
    )
    _outcome(outcome, as_json)


@runs_app.command("actions")
def runs_actions(
    run_id: Annotated[str | None, typer.Option("--run", help="Only this run's.")] = None,
    app: AppOpt = None,
    limit: LimitOpt = 50,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The operators' audit trail (who did what to which run, when and why), newest first."""
    found = _call(db, url, token, lambda source: source.actions(run_id, app, limit))
    if as_json:
        _print_items(found)
        return
    rows = [
        [
            _when(a["created_at"]),
            a["run_id"],
            a["app_name"],
            a["action"],
            a["actor"],
            f"{a['status_before']} -> {a['status_after']}",
            _short(a["reason"], 50),
        ]
        for a in found
    ]
    console.print(
        _table(
            f"{len(found)} operator action(s)",
            ["when", "run", "app", "action", "who", "status", "why"],
            rows,
        )
    )


def register(app: typer.Typer) -> None:
    """Adds ``runs``."""
    app.add_typer(runs_app, name="runs")
