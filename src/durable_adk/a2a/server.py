"""Serving an app over A2A: the request handler, the routes, :func:`to_a2a`.

:class:`DurableA2aServer` puts the pieces on one store: the executor
(:class:`~durable_adk.a2a.executor.DurableA2aExecutor`), the versioned task
store with its event stream (cluster mode: any worker answers tasks/get,
tasks/resubscribe and tasks/cancel for any task), the push config store, the
task sync, and the SDK's request handler taught one thing more: a message id
already taken in its context (:meth:`~durable_adk.a2a_tables.tasks.A2aTable.claim_message`,
checked before any work starts) is answered with the task that took it, so a
re-sent message never starts the work twice. Given callers (bearer
tokens, :mod:`durable_adk.a2a.auth`), its JSON-RPC routes admit only them
and the card declares the scheme; push URLs are checked by one policy
(:mod:`durable_adk.a2a.push_urls`) when set and again before each delivery.

:func:`to_a2a` is ADK's ``to_a2a`` with durable tasks: one call gives the
Starlette app (agent card at the well-known path, JSON-RPC at the root).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from typing import Any

from a2a.server.agent_execution import RequestContext, SimpleRequestContextBuilder
from a2a.server.agent_execution.active_task import INTERRUPTED_TASK_STATES, TERMINAL_TASK_STATES
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers import DefaultRequestHandlerV2
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    Message,
    SendMessageRequest,
    Task,
    TaskStatusUpdateEvent,
)
from a2a.utils.task import apply_history_length
from google.adk.a2a.executor.config import A2aAgentExecutorConfig
from google.adk.a2a.utils.agent_card_builder import AgentCardBuilder
from starlette.applications import Starlette
from starlette.routing import BaseRoute

from durable_adk import errors
from durable_adk.a2a import codec
from durable_adk.a2a.auth import Callers, declare_bearer, guard_routes
from durable_adk.a2a.executor import DurableA2aExecutor, cancel_task_runs
from durable_adk.a2a.push import PushDelivery
from durable_adk.a2a.push_urls import PushUrlPolicy
from durable_adk.a2a.stores import (
    DurableEventStream,
    DurablePushConfigStore,
    DurableVersionedTaskStore,
)
from durable_adk.a2a.sync import TaskSync
from durable_adk.adk.runner import DurableRunner
from durable_adk.store import open_store

logger = logging.getLogger("durable_adk.a2a")

ADOPT_KEY = "durable_adk.adopt_task"
"""ServerCallContext.state key: a claimed task id never saved, adopted by its re-send."""

CARD_PATH = "/.well-known/agent-card.json"


class DuplicateMessage(Exception):
    """The message id was taken before in its context: answer with ``task_id``."""

    def __init__(self, task_id: str) -> None:
        super().__init__(task_id)
        self.task_id = task_id


class DedupeContextBuilder(SimpleRequestContextBuilder):
    """Takes the message id before any work starts; a taken one raises :class:`DuplicateMessage`."""

    def __init__(self, tasks: DurableVersionedTaskStore) -> None:
        super().__init__(should_populate_referred_tasks=False, task_store=None)
        self.tasks = tasks

    async def build(
        self,
        context: ServerCallContext,
        params: SendMessageRequest | None = None,
        task_id: str | None = None,
        context_id: str | None = None,
        task: Task | None = None,
    ) -> RequestContext:
        """Claims (context, message id) for the task, then builds the SDK's request context."""
        if params is not None and params.message.message_id:
            adopted = context.state.pop(ADOPT_KEY, None)
            wanted = task_id or adopted or str(uuid.uuid4())
            if adopted is None:
                claim = await self.tasks.table.claim_message(
                    owner=codec.owner_of(context),
                    context_id=params.message.context_id,
                    message_id=params.message.message_id,
                    task_id=wanted,
                )
                if not claim.taken:
                    raise DuplicateMessage(claim.task_id)
            task_id = wanted
        return await super().build(
            context=context, params=params, task_id=task_id, context_id=context_id, task=task
        )


class DurableRequestHandler(DefaultRequestHandlerV2):
    """The SDK's request handler, answering a re-sent message with the task it started."""

    def __init__(
        self,
        *,
        tasks: DurableVersionedTaskStore,
        stream: DurableEventStream,
        push_urls: PushUrlPolicy,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            task_store=tasks,
            event_stream=stream,
            request_context_builder=DedupeContextBuilder(tasks),
            push_url_validator=push_urls,
            **kwargs,
        )
        self.tasks = tasks
        self.stream = stream
        self.push_urls = push_urls

    def _check_push_url(self, params: SendMessageRequest) -> None:
        """Refuses a bad push URL given with a message before its message id is taken."""
        if params.configuration.HasField("task_push_notification_config"):
            self.push_urls.check(params.configuration.task_push_notification_config.url)

    async def _first_task(self, task_id: str, context: ServerCallContext) -> Task | None:
        """The task a message id took; waits a little for its first save (None: never saved)."""
        for _ in range(50):
            found = await self.tasks.get(task_id, context)
            if found is not None:
                return found.task
            await asyncio.sleep(0.1)
        return None

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Message | Task:
        """tasks/send; a re-sent message id gets the task it started, as it stands."""
        self._check_push_url(params)
        try:
            first: Message | Task = await super().on_message_send(params, context)
            return first
        except DuplicateMessage as dup:
            task = await self._first_task(dup.task_id, context)
            if task is None:
                context.state[ADOPT_KEY] = dup.task_id
                adopted: Message | Task = await super().on_message_send(params, context)
                return adopted
            answer: Task = apply_history_length(task, params.configuration)
            return answer

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        """message/stream; a re-sent message id streams the task it started from where it stands."""
        self._check_push_url(params)
        try:
            async for event in super().on_message_send_stream(params, context):
                yield event
            return
        except DuplicateMessage as dup:
            task = await self._first_task(dup.task_id, context)
            if task is None:
                context.state[ADOPT_KEY] = dup.task_id
                async for event in super().on_message_send_stream(params, context):
                    yield event
                return
        stored = await self.tasks.get(task.id, context)
        assert stored is not None
        yield stored.task
        if stored.task.status.state in (TERMINAL_TASK_STATES | INTERRUPTED_TASK_STATES):
            return
        async with contextlib.aclosing(
            self.stream.subscribe(task.id, after=stored.version)
        ) as events:
            async for versioned in events:
                yield versioned.event
                event = versioned.event
                if (
                    isinstance(event, TaskStatusUpdateEvent)
                    and event.status.state in INTERRUPTED_TASK_STATES
                ):
                    return


class DurableA2aServer:
    """An app served over A2A with durable tasks, on its runner's store (see the module)."""

    def __init__(
        self,
        runner: DurableRunner,
        *,
        agent_card: AgentCard | None = None,
        rpc_url: str = "http://localhost:8000/",
        config: A2aAgentExecutorConfig | None = None,
        sync_grace: float = 2.0,
        sync_every: float = 1.0,
        push_options: dict[str, Any] | None = None,
        callers: Mapping[str, str] | None = None,
        push_hosts: Sequence[str] | None = None,
    ) -> None:
        """Builds the executor, stores, handler and sync of the app.

        Args:
            runner: The app's DurableRunner.
            agent_card: The card to serve (default: built from the agent by
                ADK's AgentCardBuilder, with streaming and push notifications
                on, as this server serves both).
            rpc_url: The JSON-RPC address the built card names.
            config: ADK's converters.
            sync_grace: Seconds after a run's end before the task sync takes it.
            sync_every: Seconds between the task sync's passes.
            push_options: :class:`~durable_adk.a2a.push.PushDelivery`'s
                settings (back-off, attempts, timeout).
            callers: ``{bearer token: owner}`` admitted to the JSON-RPC routes
                (:mod:`durable_adk.a2a.auth`; None: no authentication here, the
                owner is whatever user the app's own middleware set).
            push_hosts: The only hosts push URLs may name (``*.example.com``:
                any host under it); None: any host
                (:class:`~durable_adk.a2a.push_urls.PushUrlPolicy`).
        """
        self.callers = None if callers is None else Callers(callers)
        self.push_urls = PushUrlPolicy(push_hosts)
        self.runner = runner
        self.executor = DurableA2aExecutor(runner, config=config)
        self.tasks = DurableVersionedTaskStore(
            runner.store, runner.app_name, on_cancel=self._cancel_runs
        )
        self.stream = DurableEventStream(self.tasks)
        self.push_configs = DurablePushConfigStore(
            runner.store, runner.app_name, push_urls=self.push_urls
        )
        self.sync = TaskSync(
            runner,
            self.tasks,
            active=self.executor.active,
            config=config,
            grace=sync_grace,
            every=sync_every,
        )
        self.push = PushDelivery(
            runner.store, runner.app_name, push_urls=self.push_urls, **(push_options or {})
        )
        self.rpc_url = rpc_url
        self._card = agent_card
        self._handler: DurableRequestHandler | None = None
        self._loops: list[asyncio.Task[None]] = []

    async def _cancel_runs(self, task_id: str) -> None:
        await cancel_task_runs(self.runner, self.tasks.table, task_id)

    async def agent_card(self) -> AgentCard:
        """The card served: the one given, or ADK's built card, its capabilities told truly."""
        if self._card is None:
            card = await AgentCardBuilder(agent=self.runner.agent, rpc_url=self.rpc_url).build()
            self._card = card
        self._card.capabilities.CopyFrom(AgentCapabilities(streaming=True, push_notifications=True))
        if self.callers is not None:
            declare_bearer(self._card)
        return self._card

    async def handler(self) -> DurableRequestHandler:
        """The request handler (made once)."""
        if self._handler is None:
            self._handler = DurableRequestHandler(
                agent_executor=self.executor,
                tasks=self.tasks,
                stream=self.stream,
                push_urls=self.push_urls,
                agent_card=await self.agent_card(),
                push_config_store=self.push_configs,
            )
        return self._handler

    async def routes(self, prefix: str = "", *, rpc_path: str | None = None) -> list[BaseRoute]:
        """The agent card at ``{prefix}/.well-known/agent-card.json``, JSON-RPC at ``{prefix}/``.

        Args:
            prefix: Where both are mounted (``""``: the root).
            rpc_path: JSON-RPC here instead (the card stays under ``prefix``).
        """
        prefix = prefix.rstrip("/")
        card = await self.agent_card()
        rpc: Sequence[BaseRoute] = create_jsonrpc_routes(
            await self.handler(), rpc_path or prefix or "/", enable_v0_3_compat=True
        )
        if self.callers is not None:
            rpc = guard_routes(rpc, self.callers)
        return [*create_agent_card_routes(card, card_url=f"{prefix}{CARD_PATH}"), *rpc]

    def card_names(self, url: str) -> None:
        """Points the served card's interfaces at ``url`` (known once the socket is bound)."""
        if self._card is None:
            return
        for interface in self._card.supported_interfaces:
            interface.url = url

    def start(self) -> None:
        """Starts the task sync and the push delivery in this event loop."""
        if not self._loops:
            self._loops = [
                asyncio.create_task(self.sync.run(), name="durable-adk-a2a-sync"),
                asyncio.create_task(self.push.run(), name="durable-adk-a2a-push"),
            ]

    async def stop(self) -> None:
        """Stops the task sync and the push delivery, and releases the handler's tasks."""
        loops, self._loops = self._loops, []
        for task in loops:
            task.cancel()
        for task in loops:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._handler is not None:
            await self._handler.aclose()


def to_a2a(
    agent: Any = None,
    *,
    db: str | None = None,
    runner: DurableRunner | None = None,
    host: str = "localhost",
    port: int = 8000,
    protocol: str = "http",
    rpc_path: str = "",
    agent_card: AgentCard | None = None,
    config: A2aAgentExecutorConfig | None = None,
    callers: Mapping[str, str] | None = None,
    push_hosts: Sequence[str] | None = None,
    **runner_options: Any,
) -> Starlette:
    """ADK's ``to_a2a`` with durable tasks: a Starlette app serving an agent over A2A.

    Either ``agent`` (an ADK App or root agent) with ``db`` (the store URL; the
    store is opened and a DurableRunner made when the app starts), or a
    ``runner`` made by the caller on an open store. The runner's background
    loops (recovery, resumer) and the task sync run for the app's lifespan.
    Serve it with uvicorn (``uvicorn module:app``); run several on one
    PostgreSQL behind one address and any of them answers for any task.

    Args:
        agent: The ADK App or root agent (with ``db``).
        db: ``sqlite:///path.db`` or ``postgresql://...`` (with ``agent``).
        runner: A DurableRunner instead of ``agent`` and ``db``.
        host: The host the built card names.
        port: The port the built card names.
        protocol: ``http`` or ``https``, for the card.
        rpc_path: A path prefix the routes are mounted under (``""``: the root).
        agent_card: A card to serve instead of the built one.
        config: ADK's converters (``A2aAgentExecutorConfig``).
        callers: ``{bearer token: owner}``: only these may call the JSON-RPC
            routes, each owning its own tasks (None: no authentication; see
            :mod:`durable_adk.a2a.auth`).
        push_hosts: The only hosts push URLs may name (None: any host; see
            :mod:`durable_adk.a2a.push_urls`).
        **runner_options: More DurableRunner arguments (with ``agent``), e.g.
            ``lease=``, ``idempotent_tools=``.

    Raises:
        durable_adk.errors.InvalidArgument: Neither or both of ``runner`` and
            ``agent`` with ``db``; a bad caller token or name, or push host.
    """
    by_runner = runner is not None and agent is None and db is None
    by_agent = runner is None and agent is not None and db is not None
    if not (by_runner or by_agent):
        raise errors.InvalidArgument("to_a2a takes a runner, or an agent with db=")
    if callers is not None:
        Callers(callers)  # refused now, not when the app starts
    PushUrlPolicy(push_hosts)
    prefix = "/" + rpc_path.strip("/") if rpc_path.strip("/") else ""
    rpc_url = f"{protocol}://{host}:{port}{prefix}/"

    async def serve(app: Starlette, made: DurableRunner) -> AsyncIterator[None]:
        server = DurableA2aServer(
            made,
            agent_card=agent_card,
            rpc_url=rpc_url,
            config=config,
            callers=callers,
            push_hosts=push_hosts,
        )
        app.state.durable_a2a = server
        app.router.routes.extend(await server.routes(prefix))
        async with made:
            server.start()
            try:
                yield
            finally:
                await server.stop()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if runner is not None:
            async for _ in serve(app, runner):
                yield
            return
        assert db is not None
        async with open_store(db) as store:
            made = DurableRunner(app=agent, store=store, **runner_options)
            async for _ in serve(app, made):
                yield

    return Starlette(lifespan=lifespan)
