"""Calling a remote A2A agent from a durable run, as an outside effect.

:class:`DurableRemoteA2aAgent` is ADK's ``RemoteA2aAgent`` (a sub-agent that
talks to another agent over the A2A protocol) whose message send goes
through the side-effect journal:

* **One message id per call, on record before it is sent.** ADK makes a
  fresh random ``message_id`` for every send, so a re-driven invocation
  would send a new message and start the remote work again. Here the id is
  derived from the call's identity (app, user, session, invocation, branch,
  agent, and the ordinal of this agent's exchange in the invocation), the
  same in every process that re-drives the invocation, and the send is
  journaled under ``a2a-send:<message id>`` with the run's buffered events.
* **The remote task id is on record before the run goes on.** The message
  is sent with ``return_immediately`` (A2A's non-blocking send): the answer
  is the remote task, submitted or working; its id and context id are the
  journal entry's result.
* **A recovery re-attaches instead of sending again.** A re-driven call
  whose send is DONE in the journal polls the recorded task with
  ``tasks/get`` until it ends (or asks for input). A send whose intent is
  on record but not its answer (the caller died between sending and
  recording) is looked up on the remote: ``tasks/list`` (in the message's
  context when it has one) for the task whose history holds the message
  id; found, it is recorded and followed; not found, the message was never
  received and is sent. A remote without ``tasks/list`` leaves that window
  unknowable: the run parks (``OutcomeUnknown``) for a person.
* **A task that ended while the caller was dead** is answered from the
  remote's stored result (``tasks/get``); once read, the task's final state
  is also kept in the journal (``a2a-result:<message id>``), so a later
  re-drive of the same call asks the remote nothing.
* **An unreachable remote** is retried with back-off (a connection refused
  is certainly not a delivered message: the same message is sent again;
  any other failure of a send is looked up before sending again) for
  ``unreachable_for`` seconds, then the run is handed back to recovery
  (:class:`RemoteA2aUnavailable`, transient) and tries again after its own
  back-off, still with the same message id.

What RemoteA2aAgent does with the answer is unchanged: the final task (its
artifacts, its status message) becomes the agent's event; an
``input-required`` task whose status message carries a long-running call
ends the invocation on that call, which a durable run records as PAUSED
(its answer continues the invocation and is sent to the same remote task,
as a message with an id of its own).

How it hooks in (and why a subclass): RemoteA2aAgent has no seam for the
send itself (its request interceptors may rewrite the message, not replace
the call) and turns every error of a send into an error event, which would
end a durable run DONE where it must be fenced, parked or handed back. The
subclass wraps the client ``_ensure_resolved`` returns, so the send goes
through the journal, and re-raises the durable errors ADK would swallow.
It relies on two names of google-adk 2.13's ``RemoteA2aAgent``
(``_ensure_resolved``, ``_run_async_impl``), checked by its tests.

This module needs the ``a2a`` extra (``pip install 'durable-adk[a2a]'``:
a2a-sdk 1.x, whose types are protocol buffers); ``import durable_adk`` does
not load it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, cast

from durable_adk import errors
from durable_adk.adk.commits.drive import begin_with_events_of
from durable_adk.adk.tools.journaling import attempt_in
from durable_adk.effect_tables.journal import JournalStatus, OutcomeUnknown
from durable_adk.faults import crash_point
from durable_adk.fencing.fence import current_fence

try:
    import httpx
    from a2a.client import ClientFactory
    from a2a.client.client import Client, ClientCallContext
    from a2a.client.errors import A2AClientError
    from a2a.types import (
        GetTaskRequest,
        ListTasksRequest,
        Message,
        SendMessageRequest,
        StreamResponse,
        Task,
        TaskState,
    )
    from a2a.utils.errors import TaskNotFoundError, UnsupportedOperationError
    from google.adk.a2a.agent._remote_a2a_agent import A2A_METADATA_PREFIX, RemoteA2aAgent
    from google.adk.a2a.agent.config import ParametersConfig, RequestInterceptor
    from google.adk.agents.invocation_context import InvocationContext
    from google.adk.events.event import Event
    from google.protobuf.json_format import (  # type: ignore[import-untyped]
        MessageToDict,
        ParseDict,
    )
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "durable_adk.adk.tools.remote_a2a needs the A2A SDK: pip install 'durable-adk[a2a]' "
        f"({exc})"
    ) from exc

logger = logging.getLogger("durable_adk.a2a.calls")

_NAMESPACE = uuid.UUID("6f1c2f60-4b7e-5d35-9a57-0d1a2a2c0a11")

_ENDED = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)
_ASKING = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})
_SETTLED = _ENDED | _ASKING
"""States where the caller stops following a task: it ended, or it waits for the caller."""

_REQUEST_KEY = A2A_METADATA_PREFIX + "request"


class RemoteA2aUnavailable(errors.DurableError, TimeoutError):
    """The remote A2A agent could not be reached within ``unreachable_for``: retry later.

    A :class:`TimeoutError`, so a durable run hands itself back to recovery
    (transient) rather than failing; the retry sends nothing twice.
    """


def message_id_for(ctx: InvocationContext, agent_name: str) -> str:
    """The message id of ``agent_name``'s next send in this invocation: the same on every re-drive.

    Derived from the app, user, session, invocation, branch, agent, and the
    ordinal of this exchange: how many distinct messages this agent already
    sent in the invocation, as its stored events record them (each event
    RemoteA2aAgent makes of an answer carries the request it answered). A
    call that died before its answer was stored left no such event, so its
    re-drive computes the same ordinal, hence the same id.
    """
    sent: list[str] = []
    for event in ctx.session.events:
        if event.invocation_id != ctx.invocation_id or event.author != agent_name:
            continue
        request = (event.custom_metadata or {}).get(_REQUEST_KEY)
        mid = request.get("messageId") if isinstance(request, dict) else None
        if isinstance(mid, str) and mid and mid not in sent:
            sent.append(mid)
    identity = "\x1f".join(
        (
            ctx.app_name,
            ctx.user_id,
            ctx.session.id,
            ctx.invocation_id,
            ctx.branch or "",
            agent_name,
            str(len(sent)),
        )
    )
    return str(uuid.uuid5(_NAMESPACE, hashlib.sha256(identity.encode()).hexdigest()))


def _never_delivered(exc: BaseException) -> bool:
    """Whether a failed request certainly never reached the remote (it could not connect)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, httpx.ConnectError):
            return True
        current = current.__cause__ or current.__context__
    return False


def _transport_failure(exc: BaseException) -> bool:
    """Whether an error is the network's or a passing one of the server's (retry).

    A transport error (refused, reset, timed out) or an HTTP 429 or 5xx
    answer, bare or behind the SDK's ``A2AClientError``; not an A2A error
    answer (a refused message, an unknown task), which is the remote's word.
    """
    if isinstance(exc, A2AClientError) and exc.__cause__ is not None:
        exc = exc.__cause__
    if isinstance(exc, httpx.TransportError | OSError):
        return True
    if isinstance(exc, httpx.HTTPStatusError):
        status = exc.response.status_code
        return status == 429 or status >= 500
    return False


@dataclasses.dataclass
class _Box:
    """The durable error a send raised, for the agent to re-raise (ADK would swallow it)."""

    failure: BaseException | None = None


class _DurableClient:
    """The A2A client RemoteA2aAgent sends through: journaled send, then follow the task.

    Only ``send_message`` is changed; every other method is the wrapped
    client's.
    """

    def __init__(
        self, inner: Any, agent: DurableRemoteA2aAgent, ctx: InvocationContext, box: _Box
    ) -> None:
        self._inner = inner
        self._agent = agent
        self._ctx = ctx
        self._box = box

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def send_message(
        self, request: SendMessageRequest, *, context: ClientCallContext | None = None
    ) -> AsyncIterator[StreamResponse]:
        try:
            task = await self._agent._call(self._inner, self._ctx, request, context)
        except (errors.DurableError, TimeoutError) as exc:
            self._box.failure = exc
            raise
        yield task


class DurableRemoteA2aAgent(RemoteA2aAgent):
    """ADK's RemoteA2aAgent whose calls are outside effects of the durable run (see the module).

    Takes RemoteA2aAgent's arguments, plus:

    Args:
        poll_interval: First wait between two ``tasks/get`` of a task that is
            still working (seconds); it grows by half each time.
        max_poll_interval: The longest wait between two polls.
        unreachable_for: How long the remote may stay unreachable (connection
            refused, timeouts) before the run is handed back to recovery.
    """

    def __init__(
        self,
        *args: Any,
        poll_interval: float = 0.1,
        max_poll_interval: float = 2.0,
        unreachable_for: float = 60.0,
        **kwargs: Any,
    ) -> None:
        """Creates the agent; raises InvalidArgument for a non-positive interval or patience."""
        for name, value in (
            ("poll_interval", poll_interval),
            ("max_poll_interval", max_poll_interval),
            ("unreachable_for", unreachable_for),
        ):
            if not (isinstance(value, int | float) and value > 0):
                raise errors.InvalidArgument(f"{name} must be > 0 seconds, got {value!r}")
        if max_poll_interval < poll_interval:
            raise errors.InvalidArgument(
                f"max_poll_interval ({max_poll_interval!r}) must be >= poll_interval "
                f"({poll_interval!r})"
            )
        super().__init__(*args, **kwargs)
        # Stamp the call's own message id on the request ADK builds, so the
        # events it stores (``a2a:request``) name the message that was sent.
        # Copied, as ADK does, so a config shared with other agents is untouched.
        stamp = RequestInterceptor(before_request=self._stamp)
        self._config = self._config.model_copy(
            update={"request_interceptors": [*(self._config.request_interceptors or []), stamp]}
        )
        self._poll_interval = float(poll_interval)
        self._max_poll_interval = float(max_poll_interval)
        self._unreachable_for = float(unreachable_for)
        self._boxes: dict[int, _Box] = {}
        self._polling_client: Client | None = None

    # -- the hooks into RemoteA2aAgent ------------------------------------------------

    async def _stamp(
        self, ctx: InvocationContext, request: Message, parameters: ParametersConfig
    ) -> tuple[Message, ParametersConfig]:
        request.message_id = message_id_for(ctx, self.name)
        return request, parameters

    async def _ensure_resolved(self, ctx: InvocationContext | None = None) -> Any:
        if ctx is None:
            return await super()._ensure_resolved(ctx)
        # The box of this run of the agent (see _run_async_impl); a call from
        # elsewhere gets one of its own, which nobody reads.
        box = self._boxes.get(id(ctx)) or _Box()
        deadline = time.monotonic() + self._unreachable_for
        delay = self._poll_interval
        while True:
            try:
                inner = await super()._ensure_resolved(ctx)
                break
            except Exception as exc:
                if not _never_delivered(exc):
                    raise
                if time.monotonic() + delay > deadline:
                    box.failure = RemoteA2aUnavailable(
                        f"remote A2A agent {self.name}: its card could not be fetched for "
                        f"{self._unreachable_for:g}s ({exc})"
                    )
                    raise box.failure from exc
                await asyncio.sleep(delay)
                delay = min(delay * 1.5, self._max_poll_interval)
        return _DurableClient(inner, self, ctx, box)

    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        box = self._boxes.setdefault(id(ctx), _Box())
        try:
            async for event in super()._run_async_impl(ctx):
                if box.failure is not None:
                    raise box.failure  # ADK made an error event of it: the run must see it
                yield event
            if box.failure is not None:
                raise box.failure
        finally:
            self._boxes.pop(id(ctx), None)

    # -- the call ----------------------------------------------------------------------

    def _client_for_polling(self, inner: Any) -> Client:
        """A client of the same remote, with the same HTTP client, that never streams.

        The non-blocking send (``return_immediately``) and ``tasks/get`` are
        unary calls; RemoteA2aAgent's own client may prefer streaming.
        """
        if self._polling_client is not None and self._agent_card is not None:
            return self._polling_client
        card = self._agent_card or getattr(inner, "_card", None)
        factory = self._a2a_client_factory
        if card is None or factory is None:
            raise errors.InvalidArgument(
                f"remote A2A agent {self.name}: no resolved card or client factory to call it with"
            )
        config = dataclasses.replace(factory._config, streaming=False, polling=True)
        client = ClientFactory(config).create(card)
        if self._agent_card is not None:
            self._polling_client = client
        return client

    async def _call(
        self,
        inner: Any,
        ctx: InvocationContext,
        request: SendMessageRequest,
        context: ClientCallContext | None,
    ) -> StreamResponse:
        """Sends the message once (journaled), follows its task; the answer to hand to ADK."""
        client = self._client_for_polling(inner)
        message_id = message_id_for(ctx, self.name)
        request.message.message_id = message_id
        request.configuration.return_immediately = True
        journal, attempt = attempt_in(ctx, f"a2a:{self.name}")
        send_key, result_key = f"a2a-send:{message_id}", f"a2a-result:{message_id}"

        async def send(_key: str) -> dict[str, Any]:
            return await self._send(client, request, context)

        async def find(_key: str) -> dict[str, Any] | None:
            return await self._find(client, request.message, context)

        if journal is None:  # not in a durable run: the same protocol, without the record
            sent = await send(send_key)
        else:
            stored = await journal.get(result_key)
            if stored is not None and stored.status is JournalStatus.DONE:
                return _as_answer(stored.result)
            sent = await journal.execute(
                send_key,
                attempt,
                send,
                find,
                fence=current_fence(),
                begin_with=begin_with_events_of(attempt.run_id),
            )
        crash_point("a2a.after_send_recorded")
        if "message" in sent:  # the remote answered with a message: no task to follow
            return _as_answer(sent)
        task = await self._follow(client, str(sent["task_id"]), message_id, context)
        crash_point("a2a.before_result_recorded")
        answer = {"task": MessageToDict(task)}
        if journal is not None:

            async def keep(_key: str) -> dict[str, Any]:
                return answer

            answer = await journal.execute(result_key, attempt, keep, keep, fence=current_fence())
        return _as_answer(answer)

    async def _send(
        self, client: Client, request: SendMessageRequest, context: ClientCallContext | None
    ) -> dict[str, Any]:
        """Sends the message (non-blocking); the remote task's ids, or its direct reply.

        A connection refused is retried at once after a back-off (nothing was
        delivered); any other transport failure may have delivered it, so
        the remote is asked (``_find``) before sending again.
        """
        deadline = time.monotonic() + self._unreachable_for
        delay = self._poll_interval
        while True:
            try:
                answers = cast(
                    AsyncGenerator[StreamResponse, None],
                    client.send_message(request, context=context),
                )
                async with contextlib.aclosing(answers):
                    async for item in answers:
                        crash_point("a2a.after_send")
                        return _sent_record(item)
                raise errors.InvalidArgument(
                    f"remote A2A agent {self.name} answered the message with nothing"
                )
            except Exception as exc:
                if not _transport_failure(exc):
                    raise
                logger.info("a2a %s: send failed (%s), retrying", self.name, exc)
                if not _never_delivered(exc):
                    found = await self._find(client, request.message, context)
                    if found is not None:
                        return found
                if time.monotonic() + delay > deadline:
                    raise RemoteA2aUnavailable(
                        f"remote A2A agent {self.name} unreachable for "
                        f"{self._unreachable_for:g}s ({exc})"
                    ) from exc
                await asyncio.sleep(delay)
                delay = min(delay * 1.5, self._max_poll_interval)

    async def _find(
        self, client: Client, message: Message, context: ClientCallContext | None
    ) -> dict[str, Any] | None:
        """The remote task that holds ``message`` in its history (``tasks/list``), or None.

        Raises:
            durable_adk.errors.LookupUnavailable: The remote offers no
                ``tasks/list`` (the send's outcome cannot be learned).
            RemoteA2aUnavailable: The remote stayed unreachable.
        """
        deadline = time.monotonic() + self._unreachable_for
        delay = self._poll_interval
        token = ""
        while True:
            listing = ListTasksRequest(page_size=100, page_token=token)
            if message.context_id:
                listing.context_id = message.context_id
            try:
                page = await client.list_tasks(listing, context=context)
            except (UnsupportedOperationError, NotImplementedError) as exc:
                raise errors.LookupUnavailable(
                    f"remote A2A agent {self.name} cannot list its tasks: whether it "
                    f"received message {message.message_id} is unknown"
                ) from exc
            except Exception as exc:
                if not _transport_failure(exc):
                    raise
                if time.monotonic() + delay > deadline:
                    raise RemoteA2aUnavailable(
                        f"remote A2A agent {self.name} unreachable for "
                        f"{self._unreachable_for:g}s while looking up message "
                        f"{message.message_id} ({exc})"
                    ) from exc
                await asyncio.sleep(delay)
                delay = min(delay * 1.5, self._max_poll_interval)
                continue
            for task in page.tasks:
                if any(m.message_id == message.message_id for m in task.history):
                    logger.info(
                        "a2a %s: message %s found in remote task %s",
                        self.name,
                        message.message_id,
                        task.id,
                    )
                    return {
                        "task_id": task.id,
                        "context_id": task.context_id,
                        "message_id": message.message_id,
                        "found": True,
                    }
            token = page.next_page_token
            if not token:
                return None

    async def _follow(
        self, client: Client, task_id: str, message_id: str, context: ClientCallContext | None
    ) -> Task:
        """Polls the remote task until it ends or asks for input; returns it."""
        delay = self._poll_interval
        reached = time.monotonic()
        while True:
            try:
                task = await client.get_task(GetTaskRequest(id=task_id), context=context)
            except TaskNotFoundError as exc:
                raise OutcomeUnknown(
                    f"remote A2A agent {self.name} no longer knows task {task_id} (message "
                    f"{message_id}): whether its work happened is unknown"
                ) from exc
            except Exception as exc:
                if not _transport_failure(exc):
                    raise
                if time.monotonic() - reached > self._unreachable_for:
                    raise RemoteA2aUnavailable(
                        f"remote A2A agent {self.name} unreachable for "
                        f"{self._unreachable_for:g}s while following task {task_id} ({exc})"
                    ) from exc
            else:
                reached = time.monotonic()
                if task.status.state in _SETTLED:
                    return task
                crash_point("a2a.while_following")
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, self._max_poll_interval)


def _sent_record(item: StreamResponse) -> dict[str, Any]:
    """What the journal keeps of a send's answer: the task's ids, or the direct message."""
    if item.HasField("task"):
        return {"task_id": item.task.id, "context_id": item.task.context_id}
    if item.HasField("message"):
        return {"message": MessageToDict(item.message)}
    raise errors.InvalidArgument(f"a send was answered with neither a task nor a message: {item}")


def _as_answer(record: Any) -> StreamResponse:
    """The journal's record of an answer, as the stream item RemoteA2aAgent reads."""
    answer = StreamResponse()
    if isinstance(record, dict) and "task" in record:
        answer.task.CopyFrom(ParseDict(record["task"], Task()))
    elif isinstance(record, dict) and "message" in record:
        answer.message.CopyFrom(ParseDict(record["message"], Message()))
    else:
        raise errors.InvalidArgument(f"not a recorded A2A answer: {record!r:.200}")
    return answer


__all__ = ["DurableRemoteA2aAgent", "RemoteA2aUnavailable", "message_id_for"]
