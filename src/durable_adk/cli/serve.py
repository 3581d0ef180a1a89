"""``durable-adk serve MODULE:APP``: a worker with its HTTP API, dashboard, runner and sweepers."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Annotated

import typer

from durable_adk import errors
from durable_adk.cli.options import (
    LogLevelOpt,
    ServicesOpt,
    _fail,
    exit_code,
)
from durable_adk.lifecycle.policy import DEFAULT_DUTY
from durable_adk.limits import DEFAULT_MAX_BYTES, DEFAULT_MAX_DEPTH, MAX_DEPTH_CEILING
from durable_adk.store import DEFAULT_URL
from durable_adk.store.migrate import redact

if TYPE_CHECKING:
    from google.adk.agents import BaseAgent
    from google.adk.apps import App

    from durable_adk.adk.services.app_services import AppServices
    from durable_adk.service.server import WorkerServer


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
    sync_tools: Annotated[
        str,
        typer.Option(
            help="Where sync tools run: pool (ADK's tool thread pool) or loop (the event loop: "
            "no thread hop, but one that blocks stalls every run of the worker)."
        ),
    ] = "pool",
    sweep_interval: Annotated[float, typer.Option(min=0.05, help="Seconds between sweeps.")] = 5.0,
    drain_seconds: Annotated[
        float, typer.Option(min=0, help="On SIGTERM, seconds runs get to finish.")
    ] = 10.0,
    max_body_bytes: Annotated[int, typer.Option(min=1, help="Larger bodies get 413.")] = 1 << 20,
    max_message_chars: Annotated[
        int, typer.Option(min=1, help="Longest user message text a run accepts (else 422).")
    ] = 100_000,
    max_payload_depth: Annotated[
        int,
        typer.Option(
            min=1,
            max=MAX_DEPTH_CEILING,
            help="Deepest nesting of a stored value from outside: a job's result, an answer, "
            "a message, a tool's result (else 422).",
        ),
    ] = DEFAULT_MAX_DEPTH,
    max_payload_bytes: Annotated[
        int,
        typer.Option(min=1, help="Largest stored value from outside, as JSON (else 413)."),
    ] = DEFAULT_MAX_BYTES,
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
    key_file: Annotated[
        str | None,
        typer.Option(
            envvar="DURABLE_ADK_KEY_FILE",
            help="A key file: stored payloads are encrypted with its first key "
            "(docs/data.md, 'Encryption at rest').",
        ),
    ] = None,
    per_user_keys: Annotated[
        bool,
        typer.Option(
            "--per-user-keys",
            help="Encrypt each user's rows under a key of their own (crypto-shredding).",
        ),
    ] = False,
    a2a: Annotated[
        bool,
        typer.Option(
            "--a2a",
            help="Serve the app over A2A too: agent card at /.well-known/agent-card.json, "
            "JSON-RPC at /a2a, every task a durable run (needs the a2a extra).",
        ),
    ] = False,
    a2a_caller: Annotated[
        list[str] | None,
        typer.Option(
            "--a2a-caller",
            envvar="DURABLE_ADK_A2A_CALLERS",
            help="NAME=TOKEN (repeatable): an A2A caller admitted with this bearer token, "
            "owning its own tasks and push configs (the worker's --token is admitted "
            "too, as the caller with no name). A2A routes only, never the run API.",
        ),
    ] = None,
    a2a_push_hosts: Annotated[
        str | None,
        typer.Option(
            "--a2a-push-hosts",
            envvar="DURABLE_ADK_A2A_PUSH_HOSTS",
            help="HOST[,HOST...]: the only hosts A2A push URLs may name "
            "(*.example.com: any host under it); default: any host.",
        ),
    ] = None,
    retention: Annotated[
        str | None,
        typer.Option(
            envvar="DURABLE_ADK_RETENTION",
            help="Purge what this policy lets go, e.g. done=30d,failed=90d,idle=14d "
            "(add payload-only to keep the ledger's skeleton); default: purge nothing "
            "(docs/data.md).",
        ),
    ] = None,
    purge_interval: Annotated[
        float, typer.Option(min=0.1, help="Seconds between purge passes (with --retention).")
    ] = 60.0,
    purge_duty: Annotated[
        float,
        typer.Option(
            help="Share of the time the purge spends in its statements, resting between "
            "them so live runs' appends barely wait (0 < duty <= 1).",
        ),
    ] = DEFAULT_DUTY,
    log_level: LogLevelOpt = None,
    http_log_level: Annotated[str, typer.Option(help="uvicorn's log level.")] = "warning",
) -> None:
    """Runs a worker: HTTP API, dashboard, runner, sweepers; drains on SIGTERM."""
    from durable_adk.adk.runs.policy import check_sync_tools
    from durable_adk.lifecycle.policy import RetentionPolicy
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
    callers: list[tuple[str, str]] = []
    for spec in a2a_caller or ():
        name, sep, secret = spec.partition("=")
        if not sep:
            _fail("--a2a-caller takes NAME=TOKEN")
        callers.append((name.strip(), secret.strip()))
    push_hosts = tuple(h.strip() for h in (a2a_push_hosts or "").split(",") if h.strip())
    try:
        policy = (
            None
            if retention is None
            else RetentionPolicy.parse(retention, interval=purge_interval, duty=purge_duty)
        )
        settings = ServiceSettings(
            db=db,
            host=host,
            port=port,
            token=token or new_token(),
            worker_id=worker_id,
            lease=lease,
            max_attempts=max_attempts,
            idempotent_tools=tuple(idempotent_tool or ()),
            sync_tools=check_sync_tools(sync_tools),
            sweep_interval=sweep_interval,
            drain_seconds=drain_seconds,
            max_body_bytes=max_body_bytes,
            max_message_chars=max_message_chars,
            max_payload_depth=max_payload_depth,
            max_payload_bytes=max_payload_bytes,
            webhook_secret=webhook_secret,
            interrupt_deadlines=tuple(deadlines),
            streaming=streaming,
            app_version=app_version,
            compatible_versions=tuple(compatible_version or ()),
            key_file=key_file,
            per_user_keys=per_user_keys,
            a2a=a2a,
            a2a_callers=tuple(callers),
            a2a_push_hosts=push_hosts,
            retention=policy,
        )
        if a2a:
            from durable_adk.service.server import require_a2a

            require_a2a()
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
        if settings.a2a:
            print(f"A2A: {base}/.well-known/agent-card.json (JSON-RPC at {base}/a2a)", flush=True)
        if generated:
            print(f"bearer token (generated): {settings.token}", flush=True)

    try:
        asyncio.run(run_worker(agent, settings, on_ready=ready, log_level=http_log_level))
    except errors.DurableError as exc:
        _fail(str(exc), exit_code(exc))


def register(app: typer.Typer) -> None:
    """Adds ``serve``."""
    app.command("serve")(serve)
