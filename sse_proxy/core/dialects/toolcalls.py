"""Tool calls as they stream: fragments joined per call, each call checked when it ends.

A call is announced (its id and name), its arguments arrive as partial JSON in fragments,
then something ends it: the choice's finish reason (OpenAI Chat), ``content_block_stop``
(Anthropic), ``function_call_arguments.done`` (Responses); Gemini sends a call whole. At
that point, or at the end of the stream for a call nothing ended, the call is checked once:
its fragments must form JSON, and where the request declared the tool's JSON Schema
(:class:`~sse_proxy.core.toolschema.ToolSchemas`) the arguments must satisfy it. What the
stream said along the way that contradicts itself (two calls sharing one index, a fragment
for a call never announced) is noted on the call and reported instead, since a client that
assembles calls by index gets that call wrong whatever its JSON says. One alert per call at
most, :class:`~sse_proxy.core.alerts.ToolCallInvalid`, never quoting the arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sse_proxy.core.alerts import Alert, ToolCallInvalid
from sse_proxy.core.toolschema import VALIDATE_LIMIT, ToolSchemas

__all__ = ["ToolCall", "call_progress", "check_call"]

_NO_ARGS = object()


@dataclass(slots=True)
class ToolCall:
    """A tool/function call whose arguments arrive as partial-JSON fragments.

    ``value`` holds arguments that arrived as an object (Gemini), instead of ``parts``.
    """

    key: str
    name: str | None = None
    id: str | None = None
    parts: list[str] = field(default_factory=list)
    index: int = 0
    problem: str | None = None
    checked: bool = False
    value: Any = _NO_ARGS

    @property
    def arguments(self) -> str:
        return "".join(self.parts)

    def inconsistent(self, problem: str) -> None:
        """Note the first contradiction; it is what gets reported."""
        if self.problem is None:
            self.problem = problem


def call_progress(calls: Iterable[ToolCall]) -> int:
    """Characters of arguments the calls have received so far (how far they got)."""
    return sum(sum(map(len, call.parts)) for call in calls)


def check_call(
    call: ToolCall,
    schemas: ToolSchemas | None,
    alerts: list[Alert],
    offset: int,
    event_index: int,
    decode: Callable[[str], Any],
) -> None:
    """Check ``call`` once (later calls do nothing); append at most one alert. ``decode``
    reads JSON as the dialects do (``ValueError`` when it is not)."""
    if call.checked:
        return
    call.checked = True

    def report(reason: str, error: str) -> None:
        alerts.append(
            ToolCallInvalid(
                index=call.index,
                tool=call.name[:200] if call.name else None,
                reason=reason,
                error=error[:200],
                byte_offset=offset,
                event_index=event_index,
            )
        )

    if call.problem is None and call.name is None and (call.parts or call.value is not _NO_ARGS):
        call.problem = "the call never got a function name"
    if call.problem is not None:
        report(ToolCallInvalid.INCONSISTENT, call.problem)
        return
    if call.value is not _NO_ARGS:
        value = call.value
        size = 0
    else:
        text = call.arguments
        size = len(text)
        if not text.strip():
            value = {}  # no arguments at all: the empty object, as the APIs read it
        else:
            try:
                value = decode(text)
            except ValueError as exc:
                report(ToolCallInvalid.INVALID_JSON, f"the arguments are not JSON: {exc}")
                return
    if schemas is None or size > VALIDATE_LIMIT:
        return
    error = schemas.check(call.name, value)
    if error is not None:
        report(ToolCallInvalid.SCHEMA, error)
