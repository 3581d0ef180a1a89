"""``durable-adk jobs``: long-running jobs: list, complete."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from durable_adk.cli.options import (
    DbOpt,
    JsonOpt,
    LimitOpt,
    TokenOpt,
    UrlOpt,
    _call,
    _fail,
    _listing,
    _print_json,
    choice,
    console,
)

_STATES = ["STARTED", "SUCCEEDED", "FAILED", "EXPIRED", "CANCELLED"]
_ENDINGS = ["SUCCEEDED", "FAILED", "CANCELLED"]

jobs_app = typer.Typer(no_args_is_help=True, help="Long-running jobs: list, complete.")


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
    chosen = choice(state, "--state", _STATES)
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
    ending = choice(state, "--state", _ENDINGS) or ""
    try:
        value = json.loads(result)
    except json.JSONDecodeError as exc:
        _fail(f"--result is not JSON: {exc}")
    done = _call(db, url, token, lambda source: source.complete_job(job_id, ending, value))
    if as_json:
        _print_json(done)
        return
    what = "completed" if done["changed"] else "already had its result (nothing changed)"
    console.print(f"job {done['job_id']} {what}: {done['state']}")


def register(app: typer.Typer) -> None:
    """Adds ``jobs``."""
    app.add_typer(jobs_app, name="jobs")
