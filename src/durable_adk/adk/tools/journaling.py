"""ADK tools whose outside effects go through the journal.

``@journaled(key="send-invoice:{invoice_id}", lookup=find_invoice)`` turns a
sync or async Python function into an ADK tool:

* the key is formatted from the call's arguments: the effect's business
  identity, the same on every retry and every re-driven model call;
* the function's ``idempotency_key`` parameter receives that key (pass it
  downstream) and is hidden from the model's schema, as is ``tool_context``;
* inside a durable run the effect goes through :class:`~durable_adk.effect_tables.journal.Journal`
  with the run's fencing epoch; outside one (an ADK Runner on another session
  service) the function is simply called with the key, so the tool still
  works, only without the journal (parallel calls of one key in one process
  still share one call);
* the recovery sweeper treats journaled tools as safe to re-drive.

``lookup(idempotency_key)`` returns the outside system's record of the effect,
or None if it never happened; it may be sync or async. Without a lookup, any
intent left unfinished (a crash, or an error, between recording the intent and
recording the result) parks the run ("outcome unknown").
"""

from __future__ import annotations

import asyncio
import inspect
import string
import typing
from collections.abc import Awaitable, Callable
from typing import Any

from google.adk.agents.invocation_context import InvocationContext
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.tool_context import ToolContext

from durable_adk import errors
from durable_adk.adk.commits.drive import begin_with_events_of
from durable_adk.adk.services.sessions import RUN_METADATA_KEY, DurableSessionService
from durable_adk.adk.shapes.marks import JOURNALED_MARK as JOURNALED_MARK
from durable_adk.adk.shapes.marks import is_journaled as is_journaled
from durable_adk.effect_tables.journal import Attempt, Journal
from durable_adk.fencing.fence import current_fence
from durable_adk.store.base import Store

KEY_PARAM = "idempotency_key"


def as_async(fn: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """``fn`` itself if it is a coroutine function, else ``fn`` run in a worker thread."""
    if inspect.iscoroutinefunction(fn):
        return fn

    async def call(*args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(fn, *args, **kwargs)

    return call


def template_fields(template: str, *, what: str = "key template") -> set[str]:
    """The parameter names a ``str.format`` key template uses.

    Raises:
        durable_adk.errors.InvalidArgument: A field is not a plain name; the
            message calls the template ``what``.
    """
    fields = set()
    for _, field, _, _ in string.Formatter().parse(template):
        if field is not None:
            if not field.isidentifier():
                raise errors.InvalidArgument(f"{what} field {field!r} must be a parameter name")
            fields.add(field)
    return fields


def effect_parameters(fn: Callable[..., Any], fields: set[str]) -> dict[str, inspect.Parameter]:
    """The parameters of a journaled function, checked against its key template's ``fields``.

    Raises:
        durable_adk.errors.InvalidArgument: No ``idempotency_key`` parameter, or
            the template names a parameter the function does not have.
    """
    params = dict(inspect.signature(fn).parameters)
    if KEY_PARAM not in params:
        raise errors.InvalidArgument(f"{fn.__name__} must take an {KEY_PARAM!r} parameter")
    unknown = fields - set(params) - {KEY_PARAM}
    if unknown:
        raise errors.InvalidArgument(f"key template names unknown parameters {sorted(unknown)}")
    return params


def format_key(key: str, arguments: dict[str, Any], owner: str) -> str:
    """The effect's key: ``key`` formatted from a call's arguments.

    Raises:
        durable_adk.errors.InvalidArgument: An argument the template names is missing.
    """
    try:
        return key.format(**arguments)
    except (KeyError, IndexError) as exc:
        raise errors.InvalidArgument(f"{owner}: missing argument {exc} for its key") from exc


def present_as(
    wrapper: Callable[..., Any],
    fn: Callable[..., Any],
    *,
    name: str,
    key: str,
    context: tuple[str, type],
) -> None:
    """Gives ``wrapper`` the face ADK reads of ``fn``: its keyword parameters without
    ``idempotency_key``, plus the ADK context parameter; its name, doc and module; the mark.

    ADK binds a tool's or node's arguments from this signature and its annotations
    (which are resolved in ``fn``'s own module, where its names live).
    """
    context_name, context_type = context
    signature = inspect.signature(fn)
    hidden = (KEY_PARAM, context_name)
    visible = [p for n, p in signature.parameters.items() if n not in hidden]
    parameter = inspect.Parameter(
        context_name, inspect.Parameter.KEYWORD_ONLY, annotation=context_type
    )
    wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in visible] + [parameter]
    )
    try:
        hints = typing.get_type_hints(fn)
    except (NameError, TypeError):
        hints = dict(getattr(fn, "__annotations__", {}))
    annotations = {n: a for n, a in hints.items() if n not in hidden}
    annotations[context_name] = context_type
    wrapper.__annotations__ = annotations
    wrapper.__name__ = name
    wrapper.__qualname__ = name
    wrapper.__doc__ = fn.__doc__
    wrapper.__module__ = fn.__module__
    setattr(wrapper, JOURNALED_MARK, key)


def attempt_of(
    tool_context: ToolContext, tool_name: str, key_template: str | None = None
) -> tuple[Journal | None, Attempt]:
    """The journal of the durable run this call belongs to (None outside one) and the attempt."""
    return attempt_in(
        tool_context.get_invocation_context(),
        tool_name,
        tool_context.function_call_id,
        key_template,
    )


def attempt_in(
    invocation: InvocationContext,
    tool_name: str,
    function_call_id: str | None = None,
    key_template: str | None = None,
) -> tuple[Journal | None, Attempt]:
    """Like :func:`attempt_of`, from an invocation context (for agents that act themselves).

    An ADK ``AgentTool`` runs its child agent on a throw-away in-memory
    session, with the caller's RunConfig (so the run's stamp) and in the
    caller's task (so the drive's fence): a call there belongs to the
    parent's durable run, and uses its journal, epoch and invocation id,
    found through the fence.

    Raises:
        durable_adk.errors.Fenced: The call runs inside a durable drive whose
            journal it cannot reach (its session service is not durable and
            the run's stamp is not the drive's): refused rather than acting
            unguarded.
    """
    service = invocation.session_service
    stamp = (
        (invocation.run_config.custom_metadata or {}).get(RUN_METADATA_KEY)
        if invocation.run_config
        else None
    )
    run_id = str(stamp["run_id"]) if isinstance(stamp, dict) and "run_id" in stamp else None
    epoch = int(stamp["epoch"]) if isinstance(stamp, dict) and "epoch" in stamp else None
    invocation_id = invocation.invocation_id
    journal: Journal | None = None
    if isinstance(service, DurableSessionService):
        journal = Journal(service.store)
    else:
        fence = current_fence()
        if fence is not None:
            if not (
                run_id == fence.run_id and epoch == fence.epoch and isinstance(fence.store, Store)
            ):
                raise errors.Fenced(
                    f"{tool_name} runs inside durable run {fence.run_id} on a "
                    f"{type(service).__name__} that does not carry the run: refused rather "
                    "than act without its journal"
                )
            journal = Journal(fence.store)  # a child runner of the run (an AgentTool's agent)
            invocation_id = fence.invocation_id or invocation_id
    attempt = Attempt(
        tool_name=tool_name,
        run_id=run_id,
        run_epoch=epoch,
        invocation_id=invocation_id,
        function_call_id=function_call_id,
        key_template=key_template,
    )
    return journal, attempt


def confirmation_check(
    require_confirmation: bool | Callable[..., Any],
) -> bool | Callable[..., Any]:
    """``require_confirmation`` as ADK's ``FunctionTool`` takes it for a journaled tool.

    ADK calls a predicate with every argument of the tool's face, which for a
    journaled tool includes ``tool_context`` even when the app's function does
    not take it: a predicate is given only the arguments it names (all of them
    if it takes ``**kwargs``), as the app's function itself is.

    Raises:
        durable_adk.errors.InvalidArgument: Neither a bool nor a callable.
    """
    if isinstance(require_confirmation, bool):
        return require_confirmation
    if not callable(require_confirmation):
        raise errors.InvalidArgument(
            "require_confirmation must be True, False or a callable, not "
            f"{type(require_confirmation).__name__}"
        )
    predicate = require_confirmation
    params = inspect.signature(predicate).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return predicate

    def named(kwargs: dict[str, Any]) -> dict[str, Any]:
        return {n: v for n, v in kwargs.items() if n in params}

    if inspect.iscoroutinefunction(predicate):

        async def check_async(**kwargs: Any) -> Any:
            return await predicate(**named(kwargs))

        return check_async

    def check(**kwargs: Any) -> Any:
        return predicate(**named(kwargs))

    return check


def journaled(
    key: str,
    *,
    lookup: Callable[[str], Any] | None = None,
    name: str | None = None,
    require_confirmation: bool | Callable[..., Any] = False,
) -> Callable[[Callable[..., Any]], FunctionTool]:
    """Makes a function an ADK tool whose effect happens at most once.

    Args:
        key: A ``str.format`` template over the function's parameters, such as
            ``"send-invoice:{invoice_id}"``.
        lookup: Finds the effect by idempotency key in the outside system
            (its record, or None); omit when the system offers none.
        name: The tool's name for the model (default: the function's): the
            one name of the tool everywhere (the confirmation request, the
            journal, a parked run's reason, ``runs resolve``).
        require_confirmation: As ADK's ``FunctionTool``: True asks a person to
            confirm every call before it acts (the run pauses on an
            ``adk_request_confirmation``; a denial never acts); a callable
            (sync or async) is given the call's arguments it names (and
            ``tool_context`` if it takes one) and returns whether this call
            needs the confirmation.

    Raises:
        durable_adk.errors.InvalidArgument: The function has no
            ``idempotency_key`` parameter, the template names a parameter
            it does not have, or ``require_confirmation`` is neither a bool
            nor a callable.
    """
    fields = template_fields(key)
    confirm = confirmation_check(require_confirmation)

    def decorate(fn: Callable[..., Any]) -> FunctionTool:
        params = effect_parameters(fn, fields)
        tool_name = name or fn.__name__
        act_fn = as_async(fn)
        find = as_async(lookup) if lookup is not None else None
        passes_context = "tool_context" in params
        # Without a journal (no durable store), parallel calls of one key in
        # this process still share one act: the first call's task, by key.
        in_flight: dict[str, asyncio.Task[Any]] = {}

        async def once(effect_key: str, act: Callable[[str], Awaitable[Any]]) -> Any:
            running = in_flight.get(effect_key)
            if running is not None and running.get_loop() is asyncio.get_running_loop():
                return await asyncio.shield(running)  # a waiter's cancel leaves the act be
            task = asyncio.ensure_future(act(effect_key))
            in_flight[effect_key] = task
            try:
                return await task
            finally:
                if in_flight.get(effect_key) is task:
                    del in_flight[effect_key]

        async def tool(tool_context: ToolContext, **kwargs: Any) -> Any:
            effect_key = format_key(key, kwargs, tool_name)
            extra = {"tool_context": tool_context} if passes_context else {}

            async def act(idempotency_key: str) -> Any:
                return await act_fn(**kwargs, **extra, **{KEY_PARAM: idempotency_key})

            journal, attempt = attempt_of(tool_context, tool_name, key)
            if journal is None:
                return await once(effect_key, act)
            return await journal.execute(
                effect_key,
                attempt,
                act,
                find,
                fence=current_fence(),
                begin_with=begin_with_events_of(attempt.run_id),
            )

        present_as(tool, fn, name=tool_name, key=key, context=("tool_context", ToolContext))
        return FunctionTool(func=tool, require_confirmation=confirm)

    return decorate
