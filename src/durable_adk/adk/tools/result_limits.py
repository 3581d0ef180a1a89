"""A tool's or a model's output past the store's payload limits is answered, not stored.

What it guarantees: a tool whose result (or state change) is nested deeper or
is larger than the store's :class:`~durable_adk.limits.PayloadLimits` is
answered with ``{"error": "..."}`` naming the limit, the way ADK answers a
tool that failed when an ``on_tool_error_callback`` gives the error back to
the model: the model sees the error and may try otherwise, the run goes on,
and the log never holds a value a fresh worker cannot read. A state key the
tool set past the limits is dropped from the call's state delta (it is never
stored) and named in the error. A model whose response is past the limits
gets an ``LlmResponse`` carrying the error as ``error_code``
``PAYLOAD_LIMIT`` instead of its content, as ADK reports a model call that
failed.

The plugin runs right after the barrier plugin, before the app's plugins, so
it sees the tool's own result. A value an app's callback makes later is still
caught by the session service's last guard
(:meth:`~durable_adk.limits.PayloadLimits.check_event`): that event is refused
and the run ends FAILED with the reason, its log intact.
"""

from __future__ import annotations

from typing import Any

from google.adk.agents.callback_context import CallbackContext
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from typing_extensions import override

from durable_adk import errors
from durable_adk.limits import MODEL_ENVELOPE, PayloadLimits

ERROR_CODE = "PAYLOAD_LIMIT"
"""The ``error_code`` of a model response refused for its size or depth."""


class ResultLimitsPlugin(BasePlugin):
    """Answers a tool or model output past the payload limits with an error instead."""

    def __init__(self, limits: PayloadLimits) -> None:
        """Creates the plugin.

        Args:
            limits: The store's limits (``store.limits``).
        """
        super().__init__(name="durable_adk_result_limits")
        self.limits = limits

    @override
    async def after_tool_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        result: dict[str, Any],
    ) -> dict[str, Any] | None:
        refused: list[str] = []
        try:
            self.limits.check(result, f"the result of tool {tool.name!r}")
        except errors.InvalidArgument as exc:
            refused.append(str(exc))
        delta = tool_context.actions.state_delta
        for key in list(delta):
            try:
                self.limits.check(delta[key], f"state {key!r} set by tool {tool.name!r}")
            except errors.InvalidArgument as exc:
                del delta[key]
                refused.append(str(exc))
        if not refused:
            return None
        return {"error": "; ".join(refused)}

    @override
    async def after_model_callback(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        if llm_response.content is None:
            return None
        try:
            self.limits.check(llm_response.content, "the model's response", envelope=MODEL_ENVELOPE)
        except errors.InvalidArgument as exc:
            return LlmResponse(
                error_code=ERROR_CODE,
                error_message=str(exc),
                turn_complete=True,
                usage_metadata=llm_response.usage_metadata,
            )
        return None


__all__ = ["ERROR_CODE", "ResultLimitsPlugin"]
