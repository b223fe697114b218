"""What in a request makes a variant possible.

Most shapes come whatever the request says (Azure's filter chunks, OpenRouter's comments,
a reasoning model's ``reasoning_content``); some come only when the request asks for them:
choice 1 only with ``n > 1``, the ``include_usage`` chunk only with
``stream_options.include_usage: true``, tool calls only with declared tools, a ``thinking``
block only with ``thinking`` enabled. A variant of the second kind declares a
:class:`Requires`; the chaos proxy serves it only to a request that meets it (or when told
to force it), so a client is never blamed for a stream its own request rules out.

Pure: a request body parsed as JSON in, a yes or no out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "CITATIONS",
    "HOSTED_SEARCH",
    "INCLUDE_THOUGHTS",
    "INCLUDE_USAGE",
    "N_CHOICES",
    "REASONING_SUMMARY",
    "THINKING",
    "TOOLS",
    "WEB_SEARCH",
    "Request",
    "Requires",
]

Request = Mapping[str, Any]
"""A request body, parsed (a JSON object)."""


@dataclass(frozen=True, slots=True)
class Requires:
    """A request field (and value) without which no provider sends the shape.

    ``what`` reads after "the request did not ask for": ``n > 1``,
    ``stream_options.include_usage: true``.
    """

    what: str
    check: Callable[[Request], bool]

    def met(self, request: Request | None) -> bool:
        """Whether ``request`` asks for it; an unknown request (not JSON, too large, no
        body) asks for nothing."""
        if request is None:
            return False
        try:
            return bool(self.check(request))
        except (AttributeError, TypeError, ValueError):  # a request of another shape
            return False


def _get(obj: Any, *path: str) -> Any:
    """``obj[path[0]][path[1]]...``, or None where a step is missing or not an object."""
    for key in path:
        if type(obj) is not dict:
            return None
        obj = obj.get(key)
    return obj


def _either(obj: Any, *paths: tuple[str, ...]) -> Any:
    """The first of ``paths`` that is present (the REST APIs take camelCase and
    snake_case alike)."""
    for path in paths:
        found = _get(obj, *path)
        if found is not None:
            return found
    return None


def _tools(request: Request) -> list[Any]:
    tools = request.get("tools")
    return tools if type(tools) is list else []


def _n_choices(request: Request) -> bool:
    n = request.get("n")
    return type(n) is int and n > 1


def _declares_tools(request: Request) -> bool:
    functions = request.get("functions")  # OpenAI's older spelling
    return bool(_tools(request)) or (type(functions) is list and bool(functions))


def _thinking(request: Request) -> bool:
    return _get(request, "thinking", "type") in ("enabled", "adaptive")


def _cited_document(request: Request) -> bool:
    messages = request.get("messages")
    for message in messages if type(messages) is list else ():
        content = _get(message, "content")
        for block in content if type(content) is list else ():
            if _get(block, "citations", "enabled") is True:
                return True
    return False


def _tool_type(request: Request, *prefixes: str) -> bool:
    return any(str(_get(tool, "type") or "").startswith(prefixes) for tool in _tools(request))


def _include_thoughts(request: Request) -> bool:
    found = _either(
        request,
        ("generationConfig", "thinkingConfig", "includeThoughts"),
        ("generation_config", "thinking_config", "include_thoughts"),
        ("config", "thinking_config", "include_thoughts"),
    )
    return found is True


N_CHOICES: Final = Requires("n > 1", _n_choices)
INCLUDE_USAGE: Final = Requires(
    "stream_options.include_usage: true",
    lambda r: _get(r, "stream_options", "include_usage") is True,
)
TOOLS: Final = Requires("tools", _declares_tools)
THINKING: Final = Requires("thinking (thinking.type: enabled)", _thinking)
CITATIONS: Final = Requires("citations (a document with citations.enabled: true)", _cited_document)
WEB_SEARCH: Final = Requires("a web_search tool", lambda r: _tool_type(r, "web_search"))
REASONING_SUMMARY: Final = Requires(
    "reasoning.summary",
    lambda r: bool(_get(r, "reasoning", "summary")),
)
HOSTED_SEARCH: Final = Requires(
    "a web_search or file_search tool",
    lambda r: _tool_type(r, "web_search", "file_search"),
)
INCLUDE_THOUGHTS: Final = Requires(
    "generationConfig.thinkingConfig.includeThoughts: true", _include_thoughts
)
