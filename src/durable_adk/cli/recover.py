"""``durable-adk recover MODULE:APP``: one recovery pass over a database, then exit.

The same passes a worker's background loops make
(:class:`~durable_adk.adk.loops.background.Background`), each once: runs asked to
stop whose owner died are cancelled, expired runs are claimed, classified and
finished (re-driven, marked done or paused, or parked), job submissions not
accepted yet are retried, jobs past their deadline are expired, finished jobs'
calls are answered, stuck sagas are finished, the app's due schedule ticks
are fired (their runs driven to their end). For a cron job, a deploy hook,
or a look after an incident. Runs whose lease has not expired yet are left to
their holder.

``durable-adk purge`` is the one-off pass of the purge loop (a worker runs it
with ``--retention``): it deletes what a retention policy lets go, on the
database (``--db``, every app or ``--app``) or through a worker (``--url``,
its app), and prints per table the rows and bytes that went; ``--dry-run``
deletes nothing and shows what would go (docs/data.md).

Exit codes of recover: 0 when every run the pass took ended DONE, PAUSED or CANCELLED
(or there was nothing to do); 1 when one ended PARKED or FAILED (a person
must look: ``durable-adk runs list --status PARKED``) or the store failed; 3
when none did but a re-drive met a transient fault and is back on the ledger
for a later pass; 2 for bad arguments.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from durable_adk import errors
from durable_adk.cli.options import (
    AppOpt,
    DbOpt,
    JsonOpt,
    LogLevelOpt,
    ServicesOpt,
    TokenOpt,
    UrlOpt,
    _call,
    _fail,
    _short,
    _table,
    console,
    envelope,
    exit_code,
    require_database,
)
from durable_adk.cli.serve import load_app_and_services
from durable_adk.lifecycle.policy import DEFAULT_DUTY
from durable_adk.runlog import configure
from durable_adk.store import DEFAULT_URL
from durable_adk.store.migrate import redact

if TYPE_CHECKING:
    from durable_adk.adk.loops.background import PassReport

EXIT_NEEDS_A_PERSON = 1
"""A run the pass took ended PARKED or FAILED."""

EXIT_LEFT_FOR_LATER = 3
"""A re-drive met a transient fault: the run is back on the ledger for a later pass."""


def register(app: typer.Typer) -> None:
    """Adds ``recover`` and ``purge`` to the CLI."""
    app.command("recover")(recover)
    app.command("purge")(purge_command)


def recover(
    app_spec: Annotated[
        str, typer.Argument(metavar="MODULE:APP", help="An ADK App, root agent or factory of one.")
    ],
    db: DbOpt = None,
    idempotent_tool: Annotated[
        list[str] | None, typer.Option(help="A tool safe to re-run after a crash (repeatable).")
    ] = None,
    worker_id: Annotated[
        str | None, typer.Option(help="The name this pass claims under (default host:pid:random).")
    ] = None,
    lease: Annotated[
        float, typer.Option(min=0.1, help="Lease of the runs it re-drives, s.")
    ] = 30.0,
    max_attempts: Annotated[int, typer.Option(min=1, help="Claims before a run is parked.")] = 3,
    sync_tools: Annotated[
        str, typer.Option(help="Where sync tools run: pool or loop, as serve's.")
    ] = "pool",
    batch: Annotated[int, typer.Option(min=1, max=10_000, help="Most runs recovered.")] = 100,
    as_json: JsonOpt = False,
    services: ServicesOpt = None,
    app_version: Annotated[
        str | None,
        typer.Option(
            envvar="DURABLE_ADK_APP_VERSION",
            help="The app's version (PEP 440), as serve's: the pass claims only runs it serves "
            "(default: the module's durable_adk_version, if any).",
        ),
    ] = None,
    compatible_version: Annotated[
        list[str] | None,
        typer.Option(help="An earlier version whose runs this code continues (repeatable)."),
    ] = None,
    log_level: LogLevelOpt = None,
) -> None:
    """Runs one recovery pass (sweeper, jobs, sagas, schedules) for an app and exits with what
    it left."""
    try:
        configure(log_level)
        agent, app_services = load_app_and_services(app_spec, services)
        app_services = app_services.declared_as(app_version, compatible_version or ())
        from durable_adk.adk.runs.policy import check_sync_tools

        tools_where = check_sync_tools(sync_tools)
    except errors.DurableError as exc:
        _fail(str(exc))
    where = db or DEFAULT_URL
    require_database(where)

    async def go() -> tuple[str, PassReport, dict[str, str]]:
        from durable_adk.adk.loops.background import Background, BackgroundSettings
        from durable_adk.adk.runner import DurableRunner
        from durable_adk.store import open_store

        async with open_store(where, create_if_empty=False) as store:
            runner = DurableRunner(
                app=agent,
                store=store,
                worker_id=worker_id,
                lease=lease,
                max_attempts=max_attempts,
                idempotent_tools=tuple(idempotent_tool or ()),
                sync_tools=tools_where,
                background=False,
                **app_services.runner_kwargs(),
            )
            settings = BackgroundSettings(sweep_batch=batch, sweep_concurrency=min(batch, 4))
            try:
                report = await Background(runner, settings, one_off=True).once()
            finally:
                await runner.aclose()
            sessions = {}
            for done in report.recoveries:
                row = await runner.ledger.get(done.run_id)
                sessions[done.run_id] = row.session_id if row else "?"
            return runner.app_name, report, sessions

    try:
        app_name, report, sessions = asyncio.run(go())
    except errors.DurableError as exc:
        _fail(str(exc), exit_code(exc))
    summary = _summary(app_name, report, sessions)
    if as_json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        _print(summary, where)
    raise typer.Exit(summary["exit_code"])


def _summary(app_name: str, report: PassReport, sessions: dict[str, str]) -> dict[str, Any]:
    """The pass as JSON-ready data, with its exit code."""
    counts: dict[str, int] = {}
    for done in report.recoveries:
        counts[done.status.value] = counts.get(done.status.value, 0) + 1
    if report.need_a_person:
        code = EXIT_NEEDS_A_PERSON
    elif report.left_for_later:
        code = EXIT_LEFT_FOR_LATER
    else:
        code = 0
    return {
        "app": app_name,
        "runs": [
            {
                "run": r.run_id,
                "session": sessions.get(r.run_id, "?"),
                "found": r.found.value,
                "action": r.action,
                "status": r.status.value,
                "reason": r.reason,
                "reattached": list(r.reattached),
            }
            for r in report.recoveries
        ],
        "by_status": counts,
        "cancelled": report.cancelled,
        "jobs_submitted": [j.job_id for j in report.submitted],
        "jobs_expired": [j.job_id for j in report.expired],
        "timers_woken": [j.job_id for j in report.woken],
        "resumed": [r.run_id for r in report.resumed],
        "sagas": [s.saga_id for s in report.sagas],
        "ticks": [
            {"schedule": t.schedule, "tick": t.tick_key, "run": t.run_id, "state": str(t.state)}
            for t in report.ticks
        ],
        "need_a_person": [r.run_id for r in report.need_a_person],
        "left_for_later": [r.run_id for r in report.left_for_later],
        "exit_code": code,
    }


def _print(summary: dict[str, Any], where: str) -> None:
    runs = summary["runs"]
    if runs:
        rows = [
            [r["run"], r["session"], r["found"], r["action"], r["status"], _short(r["reason"], 60)]
            for r in runs
        ]
        console.print(
            _table(
                f"recovery of app {summary['app']!r} on {redact(where)}",
                ["run", "session", "class found", "action", "status", "reason"],
                rows,
            )
        )
    by_status = ", ".join(f"{n} {status}" for status, n in sorted(summary["by_status"].items()))
    console.print(
        f"{len(runs)} run(s) recovered"
        + (f" ({by_status})" if by_status else "")
        + f"; {len(summary['cancelled'])} cancelled, {len(summary['jobs_submitted'])} job "
        f"submission(s), {len(summary['jobs_expired'])} job(s) expired, "
        f"{len(summary['resumed'])} resume run(s), {len(summary['sagas'])} saga(s) finished, "
        f"{len(summary['ticks'])} schedule tick(s) fired",
        highlight=False,
    )
    if summary["need_a_person"]:
        console.print(
            f"[red]{len(summary['need_a_person'])} run(s) need a person[/red]: "
            "durable-adk runs list --status PARKED (or FAILED), then runs show RUN",
            highlight=False,
        )
    elif summary["left_for_later"]:
        console.print(
            f"{len(summary['left_for_later'])} run(s) met a transient fault and wait for a "
            "later pass",
            highlight=False,
        )


# ----------------------------------------------------------------- purge
# ``durable-adk purge`` is the one-off pass of the purge loop, as ``recover`` is
# of the recovery sweeper: it lives beside it.


def purge_command(
    retention: Annotated[
        str | None,
        typer.Option(
            "--retention",
            help="The policy: STATUS=AGE pairs joined by commas, e.g. done=30d, failed=90d, "
            "parked=never, idle=14d, payload-only (docs/data.md; through --url: default "
            "the worker's).",
        ),
    ] = None,
    app: AppOpt = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Delete nothing: show what would go.")
    ] = False,
    batch: Annotated[int, typer.Option(min=1, max=100_000, help="Rows per statement.")] = 500,
    duty: Annotated[
        float,
        typer.Option(
            help="Share of the time the purge spends in its statements, resting between "
            "them so live runs' appends barely wait (0 < duty <= 1; 1: flat out, e.g. "
            "at a quiet hour).",
        ),
    ] = DEFAULT_DUTY,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Purges what a retention policy lets go (every app, or --app): per table, rows and bytes."""
    from durable_adk.lifecycle import RetentionPolicy

    if not 0 < duty <= 1:
        _fail(f"duty must be a share of the time in (0, 1], e.g. 0.05 or 1, got {duty!r}")
    policy = None
    if retention is not None:
        try:
            policy = RetentionPolicy.parse(retention, batch=batch, duty=duty)
        except errors.InvalidArgument as exc:
            _fail(str(exc))
    elif not url:
        _fail("give the policy with --retention, e.g. --retention done=30d,failed=90d")

    reports = _call(
        db,
        url,
        token,
        lambda source: source.purge(retention, policy, app, dry_run, batch, duty),
    )
    if as_json:
        # One shape whichever transport and however many apps: the list envelope,
        # one report per app purged.
        print(json.dumps(envelope(reports), indent=2))
        return
    if not reports:
        console.print("no app has sessions or runs on this database: nothing to purge")
    for report in reports:
        _print_purge(report)


def _print_purge(report: dict[str, Any]) -> None:
    verb = "would go" if report["dry_run"] else "went"
    scrub = ""
    if report["payload_only"]:
        scrub = " (payload-only: the ledger's rows keep their skeleton)"
    rows = [
        [name, str(count["rows"]), _bytes(count["bytes"])]
        for name, count in report["tables"].items()
        if count["rows"]
    ]
    title = (
        f"app {report['app_name']!r}, policy {report['policy']}: {report['rows']} row(s), "
        f"{_bytes(report['bytes'])} {verb}{scrub}"
    )
    console.print(_table(title, ["table", "rows", "bytes"], rows))
    oldest = {k: v for k, v in (report.get("oldest_kept") or {}).items() if v is not None}
    if oldest:
        console.print(
            "oldest kept: " + ", ".join(f"{k} {v / 86400:.1f} days" for k, v in oldest.items())
        )


def _bytes(size: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"
