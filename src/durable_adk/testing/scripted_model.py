"""A scripted, offline `BaseLlm` that replays canned model turns.

`ScriptedModel` lets ADK agents run without a network and deterministically,
including across processes, which is what crash-recovery tests need.

Script:
    A script is a list of steps; each step is one model turn:

    * `Say("text")` - a text reply.
    * `Call(name, args, id=None)` - a function call. Several parts in one turn
      are written as a tuple (or list), e.g. ``(Call("a"), Call("b"))`` or
      ``(Say("checking"), Call("a"))``.
    * `Fail(error)` - `generate_content_async` raises ``error``.
    * a callable ``(LlmRequest) -> step`` - computes the step from the request.

    A script is one list (each agent replays it from its own position) or a
    dict mapping agent name to list. The calling agent is read from the
    ``adk_agent_name`` label ADK sets on every request (google/adk/flows/
    llm_flows/core/_model_call.py:224), else from the ``Your internal name is
    "..."`` system instruction; one instance can serve every agent of an app.

Replay rule (the guarantee):
    The step replayed is ``script[agent][n]`` where ``n`` is the number of
    ``role="model"`` contents in the request. ADK builds the request contents
    from the stored session events, keeps only the calling agent's own turns as
    ``model`` and rewrites other agents' turns as ``user`` context
    (``_present_other_agent_message``, flows/llm_flows/context/_fencing.py).
    Hence ``n`` is the number of turns this agent already has in the stored
    history, and the answer is a pure function of (script, session events): a
    fresh process re-driving an invocation at the same point gets the same
    step. No in-process counter is consulted. Consequences:

    * A script spans the whole session: turn-2 steps follow turn-1 steps.
    * A calls-only turn left unanswered by a crash is dropped from the request
      (``drop_orphaned_function_calls``, flows/llm_flows/tools/_rearranger.py),
      so ``n`` does not count it and the same `Call` is replayed. (With
      resumability on, ADK re-runs the stored call and does not ask at all.)
    * `Fail` stores no model turn, so ``n`` does not move and a `Fail` step
      fails on every attempt. For a transient error use a callable step, or
      give the next process a different script.
    * ``include_contents="none"``, event compaction and rewinds hide earlier
      turns and so shift ``n``; do not combine them with a script.
    * Long-running tools: if the tool returns ``None``, the answer simply gets
      the next step. If it returns an interim result, the model is asked at
      step ``k`` right away, and again at ``k`` when the final answer arrives
      (ADK hides the turns between a call and its late answer:
      ``rearrange_events_for_latest_function_response``); the turn after that
      is ``k + 2``. Use a callable at ``k`` that looks at the last response.

    When ``n`` is past the end of the agent's script, or the agent has no
    script, `ScriptExhausted` is raised instead of inventing output.

Function-call ids:
    A `Call` without ``id`` is emitted without one and ADK assigns
    ``"adk-" + uuid4()`` (``populate_client_function_call_id``,
    flows/llm_flows/tools/_functions.py:68, called from core/_finalizer.py:95).
    Such ids are random, so a re-asked call gets a new id; ADK also strips
    ``adk-`` ids from the contents it sends to models like this one. Pass
    ``id=`` when a test needs a stable id.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from google.adk.models import BaseLlm, LlmCapabilities
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types
from pydantic import PrivateAttr

from durable_adk.faults import crash_point

__all__ = [
    "Call",
    "Fail",
    "Say",
    "Script",
    "ScriptExhausted",
    "ScriptedModel",
    "Step",
    "Turn",
    "agent_name_of",
    "turn_index_of",
]

_AGENT_LABEL = "adk_agent_name"
_IDENTITY_RE = re.compile(r'Your internal name is "([^"]+)"')


@dataclass(frozen=True)
class Say:
    """A text reply (a whole turn, or one part of a tuple turn).

    Attributes:
        text: The text the model says.
        chunks: How the text streams when ADK asks for a stream
            (``StreamingMode.SSE``): the pieces, in order, that make up
            ``text``. Empty: word by word.
    """

    text: str
    chunks: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.chunks and "".join(self.chunks) != self.text:
            raise ValueError(f"Say: chunks {self.chunks!r} do not make up {self.text!r}")

    def pieces(self) -> list[str]:
        """The streamed pieces of the text (see ``chunks``)."""
        return list(self.chunks) if self.chunks else re.findall(r"\s*\S+\s*", self.text)


@dataclass(frozen=True)
class Call:
    """A function call (a whole turn, or one part of a tuple turn).

    Attributes:
        name: The function (tool) name.
        args: The call arguments.
        id: The function-call id; ``None`` lets ADK assign a random one.
    """

    name: str
    args: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True)
class Fail:
    """A turn that raises instead of answering.

    Attributes:
        error: The exception (instance or class) to raise.
    """

    error: BaseException | type[BaseException]


Part: TypeAlias = Say | Call
Turn: TypeAlias = Say | Call | Fail | tuple[Part, ...] | list[Part]
Step: TypeAlias = Turn | Callable[[LlmRequest], "Step"]
Script: TypeAlias = Sequence[Step] | Mapping[str, Sequence[Step]]


class ScriptExhausted(RuntimeError):
    """The model was asked for a turn its script does not have.

    Attributes:
        agent: The calling agent, if known.
        position: The requested step index.
        length: The number of steps scripted for the agent.
    """

    def __init__(self, agent: str | None, position: int, length: int) -> None:
        """Builds the error from the agent, requested index and script length."""
        super().__init__(
            f"ScriptedModel: no step {position} for agent {agent!r} (script has {length} step(s))"
        )
        self.agent = agent
        self.position = position
        self.length = length


def agent_name_of(llm_request: LlmRequest) -> str | None:
    """Returns the name of the agent that built ``llm_request``, if known.

    Args:
        llm_request: The request passed to the model.

    Returns:
        The ``adk_agent_name`` label, else the name in the identity system
        instruction, else ``None``.
    """
    labels = llm_request.config.labels or {}
    if name := labels.get(_AGENT_LABEL):
        return name
    match = _IDENTITY_RE.search(str(llm_request.config.system_instruction or ""))
    return match.group(1) if match else None


def turn_index_of(llm_request: LlmRequest) -> int:
    """Returns how many turns the calling agent already has in the request.

    Args:
        llm_request: The request passed to the model.

    Returns:
        The number of ``role="model"`` contents.
    """
    return sum(1 for content in llm_request.contents if content.role == "model")


def _to_part(part: Part) -> types.Part:
    if isinstance(part, Say):
        return types.Part(text=part.text)
    call = types.FunctionCall(name=part.name, args=dict(part.args), id=part.id)
    return types.Part(function_call=call)


class ScriptedModel(BaseLlm):
    """A `BaseLlm` that replays a script; the module docstring has the rules.

    Example:
        model = ScriptedModel({"greeter": [Call("lookup", {"q": "x"}), Say("hi")]})
        agent = LlmAgent(name="greeter", model=model, tools=[lookup])
    """

    model: str = "scripted"
    _script: Script = PrivateAttr()
    _calls: list[tuple[str | None, int]] = PrivateAttr(default_factory=list)

    def __init__(self, script: Script, *, model: str = "scripted") -> None:
        """Creates the model.

        Args:
            script: One list of steps for every agent, or a mapping from agent
                name to its list of steps.
            model: The model name reported to ADK.
        """
        super().__init__(model=model)
        self._script = script

    @property
    def capabilities(self) -> LlmCapabilities:
        """Declares capabilities explicitly (no name-based fallback)."""
        return LlmCapabilities()

    @property
    def calls(self) -> list[tuple[str | None, int]]:
        """The (agent, step index) pairs served by this instance, in order.

        Observational and process-local; replay never reads it.
        """
        return list(self._calls)

    def steps_for(self, agent: str | None) -> Sequence[Step]:
        """Returns the steps scripted for ``agent`` (empty if none)."""
        if isinstance(self._script, Mapping):
            return self._script.get(agent, ()) if agent is not None else ()
        return self._script

    def step_for(self, llm_request: LlmRequest) -> Turn:
        """Returns the turn to replay for ``llm_request``, callables resolved.

        Args:
            llm_request: The request passed to the model.

        Returns:
            A `Say`, `Call`, `Fail` or tuple of `Say`/`Call` parts.

        Raises:
            ScriptExhausted: The agent has no step at this position.
        """
        agent = agent_name_of(llm_request)
        position = turn_index_of(llm_request)
        steps = self.steps_for(agent)
        if position >= len(steps):
            raise ScriptExhausted(agent, position, len(steps))
        self._calls.append((agent, position))
        step = steps[position]
        while not isinstance(step, (Say, Call, Fail, tuple, list)):
            step = step(llm_request)
        return step

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        """Yields the scripted turn as one final response.

        With ``stream`` (ADK's ``StreamingMode.SSE``) the text of each `Say`
        part comes first as partial responses (``partial=True``), one per
        piece (:meth:`Say.pieces`), as a streaming model's would; the crash
        point ``scripted_model.after_partial`` passes after each. The final
        response then holds the whole turn (every text and call), as ADK's
        streaming aggregator makes it.

        Raises:
            ScriptExhausted: The script has no step for this point.
            BaseException: The error of a `Fail` step.
        """
        step = self.step_for(llm_request)
        if isinstance(step, Fail):
            raise step.error
        parts = tuple(step) if isinstance(step, (tuple, list)) else (step,)
        if not parts or not all(isinstance(p, (Say, Call)) for p in parts):
            raise TypeError(f"ScriptedModel: invalid step {step!r}")
        if stream:
            for part in parts:
                if not isinstance(part, Say):
                    continue
                for piece in part.pieces():
                    yield LlmResponse(
                        content=types.Content(role="model", parts=[types.Part(text=piece)]),
                        partial=True,
                    )
                    crash_point("scripted_model.after_partial")
        yield LlmResponse(
            content=types.Content(role="model", parts=[_to_part(p) for p in parts]),
            finish_reason=types.FinishReason.STOP,
            # Zero usage: ADK telemetry logs a warning when usage is missing.
            usage_metadata=types.GenerateContentResponseUsageMetadata(
                prompt_token_count=0, candidates_token_count=0, total_token_count=0
            ),
        )
