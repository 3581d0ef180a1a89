"""What every ``durable-adk`` command group shares: options, the way to its data, printing.

A command reads (and, for its actions, acts) either straight on a database
(``--db URL``, no worker needed) or through a running worker (``--url
http://... --token T``); both give the same answers (:mod:`durable_adk.cli.client`),
printed as Rich tables or, with ``--json``, as JSON (a list as one envelope,
:func:`envelope`). Exit codes, the same through either transport: 0 done; 1
refused, the command being well formed (what it names is not there: an
unknown run, job, schedule, version, session or app; or its state forbids it:
a run not parked, a version served elsewhere; or the way in failed: a wrong
token, an unreachable worker or database), with a one-line reason that says
what to run instead where there is something (:func:`instead`); 2 bad input,
whoever caught it (the CLI's own checks, or the library's and the worker's
``InvalidArgument``: a bad version string, JSON, status name, an empty
reason; and an ``--app`` left out where the database holds several apps).
Heavy imports (ADK, FastAPI) happen inside the commands, so ``db upgrade``
stays quick.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from durable_adk import errors
from durable_adk.runlog import LOG_LEVEL_ENV
from durable_adk.store import DEFAULT_URL

try:  # recent typer runs its own copy of click; older ones run click itself
    from typer._click.globals import get_current_context
except ImportError:  # pragma: no cover - an older typer
    from click import get_current_context  # type: ignore[assignment,no-redef,unused-ignore]

if TYPE_CHECKING:
    from durable_adk.cli.client import OpsSource
    from durable_adk.store import Store

T = TypeVar("T")
JSON = dict[str, Any]


class _Console:
    """Rich's console, sized when printing (COLUMNS may change between commands)."""

    def print(self, *objects: Any, **options: Any) -> None:
        width = shutil.get_terminal_size((150, 40)).columns
        Console(width=width).print(*objects, **options)


console = _Console()

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


def _fail(message: str, code: int = 2) -> NoReturn:
    console.print(f"[red]error:[/red] {escape(message)}", highlight=False)
    raise typer.Exit(code)


# The command groups whose records ``GROUP list`` shows, to name after "not found".
_LISTED = frozenset(
    {"runs", "jobs", "interrupts", "dead-letters", "schedules", "versions", "sagas"}
)
START_WORKER = "durable-adk serve MODULE:APP --db URL"


def _group() -> str | None:
    """The command group running (``runs`` of ``durable-adk runs show``), if known."""
    ctx = get_current_context(silent=True)
    parts = ctx.command_path.split() if ctx is not None else []
    return parts[1] if len(parts) > 2 else None


def instead(exc: errors.DurableError) -> str:
    """What to run instead after the library refused (``""`` when nothing fits).

    A refusal names its place already (the run, the job...); this adds the
    command that shows the records (after "not found"), where the token or
    the worker comes from. A refusal that names a command (a schema behind:
    ``durable-adk db upgrade``) is left as it is.
    """
    from durable_adk.cli.client import UnknownApp

    group = _group()
    if isinstance(exc, UnknownApp):  # its message lists the apps there are
        return ""
    if isinstance(exc, errors.NotFound) and group in _LISTED:
        return f"; see them with `durable-adk {group} list`"
    if isinstance(exc, errors.Conflict) and group == "runs":
        return "; see its state with `durable-adk runs show RUN_ID`"
    if isinstance(exc, errors.Unauthorized):
        return (
            "; pass the worker's token with --token or DURABLE_ADK_TOKEN "
            f"(`{START_WORKER.split(' --')[0]}` prints a generated one when it starts)"
        )
    if isinstance(exc, errors.StoreUnavailable) and "cannot reach the worker" in str(exc):
        return f"; start one with `{START_WORKER}`, or read the database itself with --db URL"
    if isinstance(exc, errors.Draining):
        return "; retry on another worker of the app (--url), or on the database (--db)"
    return ""


def exit_code(exc: errors.DurableError) -> int:
    """2 when the library (or the worker) rejected an argument, else 1 (a refusal)."""
    return 2 if isinstance(exc, errors.InvalidArgument) else 1


def _refused(exc: errors.DurableError) -> NoReturn:
    """Exits with a refusal of the library (on the database or through a worker alike)
    and, unless it names one, what to run instead: 2 for a rejected argument
    (an unclear app too), 1 for anything else (:func:`exit_code`)."""
    said = str(exc)
    _fail(said if "`" in said else said + instead(exc), exit_code(exc))


def choice(value: str | None, option: str, choices: list[str]) -> str | None:
    """``value`` (in the choices' case) if it is one of ``choices``, else exit 2 naming the
    option and the choices; None stays None."""
    if value is None:
        return None
    chosen = value
    if all(c.isupper() for c in choices):
        chosen = value.upper()
    elif all(c.islower() for c in choices):
        chosen = value.lower()
    if chosen not in choices:
        _fail(f"unknown {option} {value!r}: use {', '.join(choices)}")
    return chosen


# --------------------------------------------------------------- plumbing


@contextlib.asynccontextmanager
async def _source(db: str | None, url: str | None, token: str | None) -> AsyncIterator[OpsSource]:
    from durable_adk.cli.client import HttpOps, StoreOps
    from durable_adk.store import open_store
    from durable_adk.store.sealing.codec import lenient_reads

    if url:
        if not token:
            _fail(
                "--url needs --token (or DURABLE_ADK_TOKEN): the token the worker was started "
                "with; `durable-adk serve` prints a generated one when it starts"
            )
        client = HttpOps.connect(url, token or "")
        try:
            yield client
        finally:
            await client.aclose()
        return
    async with open_store(db or DEFAULT_URL, create_if_empty=False) as store:
        with lenient_reads():  # a value under a key not held: shown as a placeholder naming it
            yield StoreOps(store)


def require_database(where: str) -> None:
    """Exits 2 when ``where`` names a SQLite file that does not exist (nothing is created)."""
    path = (
        where.removeprefix("sqlite:///").partition("?")[0]
        if where.startswith("sqlite:///")
        else None
    )
    if path and path != ":memory:" and not os.path.exists(path):
        _fail(
            f"no database at {path}: pass --db URL (the database your workers use), or "
            f"--url URL --token T to ask a running worker; `{START_WORKER}` creates one"
        )


def on_database(db: str | None, work: Callable[[Store], Awaitable[T]]) -> T:
    """Runs ``work`` on the database (``--db``, default the embedded SQLite file), which must
    exist; a refusal of the library exits 1, a rejected argument 2, with its reason."""
    from durable_adk.store import open_store

    where = db or DEFAULT_URL
    require_database(where)

    async def go() -> T:
        async with open_store(where, create_if_empty=False) as store:
            return await work(store)

    try:
        return asyncio.run(go())
    except errors.DurableError as exc:
        _refused(exc)


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
        _refused(exc)


def _call_for_app(
    db: str | None,
    url: str | None,
    token: str | None,
    app_name: str | None,
    work: Callable[[OpsSource, str], Awaitable[T]],
) -> tuple[str, T]:
    """As :func:`_call` for a command about one app: ``--app``, or the only one there is
    (through a worker: the app it serves); returns the app and what ``work`` returned."""

    async def go(source: OpsSource) -> tuple[str, T]:
        app = await source.app_of(app_name)
        return app, await work(source, app)

    return _call(db, url, token, go)


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


def envelope(items: list[Any], *, available: bool = True, note: str | None = None) -> JSON:
    """The one shape of every list a command prints with ``--json``.

    ``{"available": true, "note": null, "items": [...]}``: ``items`` holds the
    records (each as the HTTP API shows it); ``available`` is false, with the
    reason in ``note``, when the feature is absent from this build (jobs,
    sagas). A single record or an action's outcome is printed as one object.
    """
    return {"available": available, "note": note, "items": items}


def _print_items(items: list[Any]) -> None:
    _print_json(envelope(items))


def _outcome(outcome: dict[str, Any], as_json: bool) -> None:
    if as_json:
        _print_json(outcome)
        return
    console.print(outcome["message"], highlight=False)


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
