"""The ``durable-adk`` commands of the service: serve, runs, jobs, sagas, dead letters, interrupts.

``serve`` runs a worker. The operations commands read (and, for ``runs retry``,
``runs cancel``, ``runs resolve``, ``runs abandon``, ``jobs complete`` and
``interrupts answer``, act)
either straight on a database (``--db URL``, no worker needed) or through a
running worker (``--url http://... --token T``); both give the same answers,
printed as Rich tables or, with ``--json``, as JSON. An operation that fails
(unknown run, run not parked, wrong token, unreachable worker) exits 1 with a
one-line reason; bad arguments exit 2. Heavy imports (ADK, FastAPI) happen
inside the commands, so ``db upgrade`` stays quick.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import getpass
import json
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from durable_adk import errors
from durable_adk.runlog import LOG_LEVEL_ENV
from durable_adk.store import DEFAULT_URL
from durable_adk.store.migrate import redact

if TYPE_CHECKING:
    from google.adk.agents import BaseAgent
    from google.adk.apps import App

    from durable_adk.adk.services.app_services import AppServices
    from durable_adk.cli.client import OpsSource
    from durable_adk.service.server import WorkerServer
    from durable_adk.store import Store

T = TypeVar("T")


class _Console:
    """Rich's console, sized when printing (COLUMNS may change between commands)."""

    def print(self, *objects: Any, **options: Any) -> None:
        width = shutil.get_terminal_size((150, 40)).columns
        Console(width=width).print(*objects, **options)


console = _Console()

runs_app = typer.Typer(
    no_args_is_help=True,
    help="Runs on the ledger: list, show, cancel, resolve, abandon, retry, actions.",
)
jobs_app = typer.Typer(no_args_is_help=True, help="Long-running jobs: list, complete.")
sagas_app = typer.Typer(no_args_is_help=True, help="Sagas: list.")
letters_app = typer.Typer(no_args_is_help=True, help="Dead letters: list.")
interrupts_app = typer.Typer(
    no_args_is_help=True,
    help="The interrupts inbox: what paused runs wait on (list, answer).",
)

DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db",
        envvar="DURABLE_ADK_DB",
        help="sqlite:///path or postgresql://... (default ./durable_adk.db)",
    ),
]
UrlOpt = Annotated[
    str | None,
    typer.Option("--url", envvar="DURABLE_ADK_URL", help="A running worker, http://host:port"),
]
TokenOpt = Annotated[
    str | None,
    typer.Option("--token", envvar="DURABLE_ADK_TOKEN", help="The worker's bearer token"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
LimitOpt = Annotated[int, typer.Option("--limit", min=1, max=1000, help="Most records shown.")]
AppOpt = Annotated[str | None, typer.Option("--app", help="Only this app's records.")]
ByOpt = Annotated[
    str | None,
    typer.Option(
        "--by",
        envvar="DURABLE_ADK_OPERATOR",
        help="Who acts, for the audit trail (default: your login name).",
    ),
]
ReasonOpt = Annotated[str | None, typer.Option("--reason", help="Why, for the audit trail.")]
LogLevelOpt = Annotated[
    str | None,
    typer.Option(
        "--log-level",
        envvar=LOG_LEVEL_ENV,
        help="The library's log level on stderr: debug, info, warning, error (default info).",
    ),
]
ServicesOpt = Annotated[
    str | None,
    typer.Option(
        "--services",
        metavar="MODULE:FUNCTION",
        help="A function returning the app's artifact, memory and credential services "
        "(default: durable_adk_services() in the app's module, if it has one).",
    ),
]


def _who(by: str | None) -> str:
    if by:
        return by
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "cli"


def register(app: typer.Typer) -> None:
    """Adds ``serve``, ``runs``, ``jobs``, ``sagas``, ``dead-letters`` and ``interrupts``."""
    app.command("serve")(serve)
    app.add_typer(runs_app, name="runs")
    app.add_typer(jobs_app, name="jobs")
    app.add_typer(sagas_app, name="sagas")
    app.add_typer(letters_app, name="dead-letters")
    app.add_typer(interrupts_app, name="interrupts")


def _fail(message: str, code: int = 2) -> NoReturn:
    console.print(f"[red]error:[/red] {message}", highlight=False)
    raise typer.Exit(code)


# ------------------------------------------------------------------- serve


def load_app_and_services(
    app_spec: str, services_spec: str | None
) -> tuple[App | BaseAgent, AppServices]:
    """The app ``MODULE:APP`` names and its services (``serve`` and ``recover``).

    The services come from ``--services MODULE:FUNCTION`` when given, else
    from ``durable_adk_services()`` in the app's module, else there are none
    (:func:`durable_adk.adk.services.app_services.load_services`).

    Raises:
        durable_adk.errors.InvalidArgument: Either cannot be loaded.
    """
    from durable_adk.adk.services.app_services import load_services
    from durable_adk.service.server import load_app

    agent = load_app(app_spec)
    return agent, load_services(services_spec, modules=[app_spec.partition(":")[0]])


def serve(
    app_spec: Annotated[
        str, typer.Argument(metavar="MODULE:APP", help="An ADK App, root agent or factory of one.")
    ],
    db: Annotated[
        str,
        typer.Option("--db", envvar="DURABLE_ADK_DB", help="sqlite:///path or postgresql://..."),
    ] = DEFAULT_URL,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: any free one).")] = 8000,
    token: Annotated[
        str | None,
        typer.Option(envvar="DURABLE_ADK_TOKEN", help="Bearer token (default: a random one)."),
    ] = None,
    worker_id: Annotated[str | None, typer.Option(help="This worker's name on the ledger.")] = None,
    lease: Annotated[float, typer.Option(min=0.1, help="Run lease, seconds.")] = 30.0,
    max_attempts: Annotated[
        int, typer.Option(min=1, help="Recovery claims of a run before it is parked.")
    ] = 3,
    idempotent_tool: Annotated[
        list[str] | None, typer.Option(help="A tool safe to re-run after a crash (repeatable).")
    ] = None,
    sweep_interval: Annotated[float, typer.Option(min=0.05, help="Seconds between sweeps.")] = 5.0,
    drain_seconds: Annotated[
        float, typer.Option(min=0, help="On SIGTERM, seconds runs get to finish.")
    ] = 10.0,
    max_body_bytes: Annotated[int, typer.Option(min=1, help="Larger bodies get 413.")] = 1 << 20,
    max_message_chars: Annotated[
        int, typer.Option(min=1, help="Longest user message text a run accepts (else 422).")
    ] = 100_000,
    webhook_secret: Annotated[
        str | None,
        typer.Option(envvar="DURABLE_ADK_WEBHOOK_SECRET", help="Enables POST /webhooks/jobs."),
    ] = None,
    interrupt_deadline: Annotated[
        list[str] | None,
        typer.Option(
            help="TOOL=SECONDS: an interrupt of TOOL ('*': any) gets its default outcome "
            "(deny) after SECONDS without an answer (repeatable)."
        ),
    ] = None,
    streaming: Annotated[
        bool,
        typer.Option(help="Stream model text as partial events on the event stream (SSE)."),
    ] = False,
    services: ServicesOpt = None,
    app_version: Annotated[
        str | None,
        typer.Option(
            envvar="DURABLE_ADK_APP_VERSION",
            help="The app's version (PEP 440, e.g. 1.4.0): recorded on its runs; this worker "
            "claims only runs it serves (docs/deploying.md).",
        ),
    ] = None,
    compatible_version: Annotated[
        list[str] | None,
        typer.Option(help="An earlier version whose runs this code continues (repeatable)."),
    ] = None,
    log_level: LogLevelOpt = None,
    http_log_level: Annotated[str, typer.Option(help="uvicorn's log level.")] = "warning",
) -> None:
    """Runs a worker: HTTP API, dashboard, runner, sweepers; drains on SIGTERM."""
    from durable_adk.runlog import configure
    from durable_adk.service.server import serve as run_worker
    from durable_adk.service.settings import ServiceSettings, new_token

    generated = token is None
    deadlines: list[tuple[str, float]] = []
    for spec in interrupt_deadline or ():
        tool, _, seconds = spec.partition("=")
        try:
            deadlines.append((tool.strip(), float(seconds)))
        except ValueError:
            _fail(f"--interrupt-deadline takes TOOL=SECONDS, not {spec!r}")
    try:
        settings = ServiceSettings(
            db=db,
            host=host,
            port=port,
            token=token or new_token(),
            worker_id=worker_id,
            lease=lease,
            max_attempts=max_attempts,
            idempotent_tools=tuple(idempotent_tool or ()),
            sweep_interval=sweep_interval,
            drain_seconds=drain_seconds,
            max_body_bytes=max_body_bytes,
            max_message_chars=max_message_chars,
            webhook_secret=webhook_secret,
            interrupt_deadlines=tuple(deadlines),
            streaming=streaming,
            app_version=app_version,
            compatible_versions=tuple(compatible_version or ()),
        )
        configure(log_level)
        agent, app_services = load_app_and_services(app_spec, services)
        settings = dataclasses.replace(settings, services=app_services)
    except errors.DurableError as exc:
        _fail(str(exc))

    def ready(server: WorkerServer) -> None:
        base = f"http://{settings.host}:{server.bound_port()}"
        fragment = f"#token={settings.token}" if generated else ""
        print(
            f"durable-adk worker {server.worker.worker_id} serving app "
            f"{server.worker.app_name!r} on {redact(settings.db)}\n"
            f"listening on {base}\n"
            f"dashboard: {base}/dashboard/{fragment}",
            flush=True,
        )
        if generated:
            print(f"bearer token (generated): {settings.token}", flush=True)

    try:
        asyncio.run(run_worker(agent, settings, on_ready=ready, log_level=http_log_level))
    except errors.DurableError as exc:
        _fail(str(exc), 1)


# --------------------------------------------------------------- plumbing


@contextlib.asynccontextmanager
async def _source(db: str | None, url: str | None, token: str | None) -> AsyncIterator[OpsSource]:
    from durable_adk.cli.client import HttpOps, StoreOps
    from durable_adk.store import open_store

    if url:
        if not token:
            _fail("--url needs --token (or DURABLE_ADK_TOKEN)")
        client = HttpOps.connect(url, token or "")
        try:
            yield client
        finally:
            await client.aclose()
        return
    async with open_store(db or DEFAULT_URL, create_if_empty=False) as store:
        yield StoreOps(store)


def require_database(where: str) -> None:
    """Exits 2 when ``where`` names a SQLite file that does not exist (nothing is created)."""
    path = (
        where.removeprefix("sqlite:///").partition("?")[0]
        if where.startswith("sqlite:///")
        else None
    )
    if path and path != ":memory:" and not os.path.exists(path):
        _fail(f"no database at {path}")


def on_database(db: str | None, work: Callable[[Store], Awaitable[T]]) -> T:
    """Runs ``work`` on the database (``--db``, default the embedded SQLite file), which must
    exist; a refusal of the library exits 1 with its reason."""
    from durable_adk.store import open_store

    where = db or DEFAULT_URL
    require_database(where)

    async def go() -> T:
        async with open_store(where, create_if_empty=False) as store:
            return await work(store)

    try:
        return asyncio.run(go())
    except errors.DurableError as exc:
        _fail(str(exc), 1)


def _call(
    db: str | None, url: str | None, token: str | None, work: Callable[[OpsSource], Awaitable[T]]
) -> T:
    if not url:
        require_database(db or DEFAULT_URL)

    async def go() -> T:
        async with _source(db, url, token) as source:
            return await work(source)

    try:
        return asyncio.run(go())
    except errors.DurableError as exc:
        _fail(str(exc), 1)


def _when(seconds: Any) -> str:
    if not seconds:
        return ""
    return datetime.fromtimestamp(float(seconds)).strftime("%Y-%m-%d %H:%M:%S")


def _version_of(run: dict[str, Any]) -> str:
    """``1.4.0 (fingerprint)``, or ``unversioned``."""
    version = run.get("app_version")
    if not version:
        return "unversioned"
    return f"{version} ({run.get('app_fingerprint') or 'no fingerprint'})"


def _short(text: Any, size: int = 60) -> str:
    value = "" if text is None else str(text)
    return value if len(value) <= size else value[: size - 1] + "…"


_STATUS_STYLE = {
    "DONE": "green",
    "PARKED": "red",
    "FAILED": "red",
    "RUNNING": "cyan",
    "QUEUED": "cyan",
    "PAUSED": "yellow",
    "CANCELLED": "magenta",
}


def _table(title: str, columns: list[str], rows: list[list[str]]) -> Table:
    table = Table(title=title, title_justify="left")
    for column in columns:
        whole = column in ("run", "job_id", "saga_id", "#")
        table.add_column(column, overflow="fold", no_wrap=whole)
    for row in rows:
        table.add_row(*row)
    return table


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))


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


# -------------------------------------------------------------------- runs


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

    try:
        chosen = RunStatus(status.upper()) if status else None
    except ValueError:
        _fail(f"unknown status {status!r}: use {', '.join(s.value for s in RunStatus)}")
    runs = _call(db, url, token, lambda source: source.list_runs(chosen, limit, app))
    if as_json:
        _print_json(runs)
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


def _outcome(outcome: dict[str, Any], as_json: bool) -> None:
    if as_json:
        _print_json(outcome)
        return
    console.print(outcome["message"], highlight=False)


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
        _print_json(found)
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


# -------------------------------------------------------------------- jobs


def _listing(title: str, listing: dict[str, Any], columns: list[str], as_json: bool) -> None:
    if as_json:
        _print_json(listing)
        return
    if not listing.get("available", True):
        console.print(f"{title}: not available ({listing.get('note')})")
        return
    items = listing.get("items", [])
    rows = [
        [_when(item.get(c)) if c.endswith("_at") else _short(item.get(c), 50) for c in columns]
        for item in items
    ]
    console.print(_table(f"{len(items)} {title}", columns, rows))


@jobs_app.command("list")
def jobs_list(
    state: Annotated[
        str | None, typer.Option(help="STARTED, SUCCEEDED, FAILED, EXPIRED or CANCELLED")
    ] = None,
    limit: LimitOpt = 50,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Long-running jobs, newest first."""
    chosen = state.upper() if state else None
    listing = _call(db, url, token, lambda source: source.jobs(chosen, limit))
    columns = ["job_id", "tool_name", "state", "session_id", "resume_run_id", "deadline_at"]
    _listing("job(s)", listing, columns, as_json)


@jobs_app.command("complete")
def jobs_complete(
    job_id: Annotated[str, typer.Argument(help="The job.")],
    result: Annotated[str, typer.Option(help="The result, as JSON.")] = "{}",
    state: Annotated[str, typer.Option(help="SUCCEEDED, FAILED or CANCELLED")] = "SUCCEEDED",
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Ends a job with its result, as its webhook would; the first result wins."""
    try:
        value = json.loads(result)
    except json.JSONDecodeError as exc:
        _fail(f"--result is not JSON: {exc}")
    done = _call(db, url, token, lambda source: source.complete_job(job_id, state.upper(), value))
    if as_json:
        _print_json(done)
        return
    what = "completed" if done["changed"] else "already had its result (nothing changed)"
    console.print(f"job {done['job_id']} {what}: {done['state']}")


@sagas_app.command("list")
def sagas_list(
    status: Annotated[
        str | None, typer.Option(help="RUNNING, COMPENSATING, COMMITTED, ...")
    ] = None,
    limit: LimitOpt = 50,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Sagas, newest first."""
    chosen = status.upper() if status else None
    listing = _call(db, url, token, lambda source: source.sagas(chosen, limit))
    columns = ["saga_id", "name", "status", "session_id", "reason", "updated_at"]
    _listing("saga(s)", listing, columns, as_json)


@letters_app.command("list")
def dead_letters_list(
    run_id: Annotated[str | None, typer.Option(help="Only this run's.")] = None,
    app: AppOpt = None,
    limit: LimitOpt = 50,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Dead letters (what needs a person), newest first."""
    letters = _call(db, url, token, lambda source: source.dead_letters(run_id, limit, app))
    if as_json:
        _print_json(letters)
        return
    rows = [
        [
            _when(d["created_at"]),
            d["kind"],
            d["run_id"] or "",
            d["classification"] or "",
            _short(d["error"], 90),
        ]
        for d in letters
    ]
    console.print(
        _table(f"{len(letters)} dead letter(s)", ["when", "kind", "run", "class", "error"], rows)
    )


# -------------------------------------------------------------- interrupts


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
    found = _call(
        db,
        url,
        token,
        lambda source: source.interrupts(status.upper(), app, session, kind, limit),
    )
    if as_json:
        _print_json(found)
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
