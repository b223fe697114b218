"""What every endpoint of the mock upstream shares: its settings, how a request names its
fault, seed, durations and MCP stream options (a bad one is a one-line 400 in OpenAI's
error shape), how an SSE response starts, and how a connection is reset.

:mod:`.mock_upstream` builds the app and its LLM endpoints on these; :mod:`.mock_resume`
its resumable streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from aiohttp import web

from sse_proxy.errors import UsageError
from sse_proxy.names import (
    MOCK_DELAY_HEADER,
    MOCK_FAULT_HEADER,
    MOCK_MCP_HEADER,
    MOCK_RESUME_HEADERS,
    MOCK_SEED_HEADER,
    MOCK_TIME_HEADERS,
)
from sse_proxy.rechunk.timefaults import DEFAULT_TIMING, TimeSettings
from sse_proxy.server.peer import unsent
from sse_proxy.tools import fixtures
from sse_proxy.tools.fixtures.mcp import DEFAULT_OPTIONS as DEFAULT_MCP
from sse_proxy.tools.fixtures.mcp import McpOptions
from sse_proxy.tools.fixtures.resume import DEFAULT_RESUME, ResumeSettings

if TYPE_CHECKING:
    from sse_proxy.tools.lockstep import Lockstep

__all__ = [
    "MAX_DELAY",
    "SETTINGS",
    "SSE_CONTENT_TYPE",
    "MockSettings",
    "bad_request",
    "check_fault",
    "error_response",
    "mcp_options_of",
    "request_delay",
    "request_fault",
    "request_mcp",
    "request_resume",
    "request_seed",
    "request_timing",
    "reset_connection",
    "resume_of",
    "settings_of",
    "start_sse",
    "timing_of",
]

SSE_CONTENT_TYPE: Final[str] = "text/event-stream; charset=utf-8"
MAX_DELAY: Final = 10.0
_NO_FAULT = ("", "none", "clean")


@dataclass(slots=True)
class MockSettings:
    fault: str | None
    seed: int
    chunk_delay: float
    requests: int = 0
    first_text: bool = False
    api_key: str | None = None
    tools: bool = False
    lockstep: Lockstep | None = None
    timing: TimeSettings = DEFAULT_TIMING
    mcp: McpOptions = DEFAULT_MCP
    resume: ResumeSettings = field(default_factory=ResumeSettings)
    resumable: bool = False
    """Every raw SSE stream is resumable (ids, retry, 204 after the end), not only those
    of a request that resumes or has a drop."""


SETTINGS: Final = web.AppKey("mock_settings", MockSettings)


def check_fault(fault: str | None) -> str | None:
    """The canonical name of a fault (older names too); ``None``/``"none"``: clean."""
    if fault is None or fault.lower() in _NO_FAULT:
        return None
    try:
        return fixtures.fault_named(fault).name
    except ValueError:
        valid = fixtures.names_help(fixtures.KINDS, fixtures.MOCK_LEGACY_NAMES)
        raise UsageError(f"unknown fault {fault!r}; valid kinds: none, {valid}") from None


def error_response(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> web.Response:
    """An OpenAI-shaped error, so SDK clients surface the message instead of a parse error."""
    error: dict[str, Any] = {"message": message, "type": "invalid_request_error"}
    if param is not None or code is not None:
        error.update(param=param, code=code)
    return web.Response(
        status=status, text=json.dumps({"error": error}), content_type="application/json"
    )


def bad_request(message: str) -> web.HTTPBadRequest:
    """An OpenAI-shaped 400, to raise."""
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error"}})
    return web.HTTPBadRequest(text=body, content_type="application/json")


def settings_of(request: web.Request) -> MockSettings:
    return request.app[SETTINGS]


def request_fault(request: web.Request) -> str | None:
    """Per-request fault: ``X-Mock-Fault`` header, else ``?fault=``, else the app's."""
    value = request.headers.get(MOCK_FAULT_HEADER, request.query.get("fault"))
    if value is None:
        return settings_of(request).fault
    try:
        return check_fault(value)
    except UsageError as exc:
        raise bad_request(str(exc)) from None


def request_seed(request: web.Request) -> int:
    """Per-request seed (``X-Mock-Seed`` or ``?seed=``), else the app's."""
    raw = request.headers.get(MOCK_SEED_HEADER, request.query.get("seed"))
    if raw is None:
        return settings_of(request).seed
    try:
        return int(raw)
    except ValueError:
        raise bad_request(f"seed must be an integer, not {raw!r}") from None


def request_delay(request: web.Request) -> float:
    """Per-request delay between writes (``X-Mock-Delay`` or ``?delay=``), else the app's."""
    raw = request.headers.get(MOCK_DELAY_HEADER, request.query.get("delay"))
    if raw is None:
        return settings_of(request).chunk_delay
    try:
        value = float(raw)
    except ValueError:
        raise bad_request(f"delay must be a number of seconds, not {raw!r}") from None
    if not 0 <= value <= MAX_DELAY:
        raise bad_request(f"delay must be between 0 and {MAX_DELAY} seconds")
    return value


def _given(request: web.Request, headers: dict[str, str]) -> dict[str, str]:
    given: dict[str, str] = {}
    for name, header in headers.items():
        raw = request.headers.get(header, request.query.get(name))
        if raw is not None:
            given[name] = raw
    return given


def request_timing(request: web.Request) -> TimeSettings:
    """The faults in time's durations: the app's, with what the request names
    (``X-Mock-Stall: 2`` or ``?stall=2``...); a bad one is a one-line 400."""
    try:
        return settings_of(request).timing.changed(_given(request, MOCK_TIME_HEADERS))
    except ValueError as exc:
        raise bad_request(str(exc)) from None


def request_resume(request: web.Request) -> ResumeSettings:
    """The resumable streams' settings: the app's, with what the request names
    (``X-Mock-Retry: 0.5`` or ``?retry=0.5``...); a bad one is a one-line 400."""
    try:
        return settings_of(request).resume.changed(_given(request, MOCK_RESUME_HEADERS))
    except ValueError as exc:
        raise bad_request(str(exc)) from None


def request_mcp(request: web.Request) -> McpOptions:
    """The MCP stream options: the app's, with the request's (``X-Mock-Mcp: retry=200`` or
    ``?mcp=...``); a bad one is a one-line 400."""
    raw = request.headers.get(MOCK_MCP_HEADER, request.query.get("mcp"))
    if raw is None:
        return settings_of(request).mcp
    try:
        return settings_of(request).mcp.changed(McpOptions.parse(raw))
    except ValueError as exc:
        raise bad_request(str(exc)) from None


def mcp_options_of(text: str | None) -> McpOptions:
    """MCP stream options given as text (a flag), checked; :class:`UsageError` if bad."""
    try:
        return McpOptions.parse(text or "")
    except ValueError as exc:
        raise UsageError(f"--mcp: {exc}") from None


def timing_of(values: dict[str, str] | None) -> TimeSettings:
    """Durations given as text (flags), checked; :class:`UsageError` for a bad one."""
    try:
        return DEFAULT_TIMING.changed(values or {})
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def resume_of(values: dict[str, str] | None) -> ResumeSettings:
    """The resumable streams' settings given as text (flags); :class:`UsageError`."""
    try:
        return DEFAULT_RESUME.changed(values or {})
    except ValueError as exc:
        raise UsageError(str(exc)) from None


async def start_sse(request: web.Request) -> web.StreamResponse:
    settings = settings_of(request)
    settings.requests += 1
    resp = web.StreamResponse(
        headers={
            "Content-Type": SSE_CONTENT_TYPE,
            "Cache-Control": "no-cache",
            "x-request-id": f"req_mock_{settings.requests:08d}",
        }
    )
    await resp.prepare(request)
    return resp


async def reset_connection(request: web.Request) -> None:
    """Close the connection with a TCP RST (``SO_LINGER`` 0), not the chunked body's end.

    A reset throws away what is not sent yet, so the body goes out first: out of the
    transport's buffer, then out of the kernel's (a second at most, for a client that
    stopped reading).
    """
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    for _ in range(1000):
        if not transport.get_write_buffer_size() and (sock is None or not unsent(sock)):
            break
        await asyncio.sleep(0.001)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()
