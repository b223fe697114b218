"""The built-in mock LLM upstream: OpenAI Chat, OpenAI Responses, Anthropic, Gemini streaming,
and an MCP server (:mod:`sse_proxy.tools.mcp_server`).

It serves the canonical fixtures of :mod:`sse_proxy.tools.fixtures`, clean or with a fault,
and writes them in seeded random pieces (:func:`sse_proxy.tools.fixtures.split_reads`) so that
characters and frames straddle TCP writes the way real upstreams make them. A fault in time
(``stall_keepalive``, ``stall_silent``, ``linger``, ``drip``) is performed frame by frame,
as the chaos proxy performs it (:mod:`sse_proxy.rechunk.timefaults`), its durations the
app's (``--stall``...) unless a request names its own (``X-Mock-Stall``, ``?stall=``). Echo and
raw-byte endpoints let proxy tests push any byte stream through. Used by the demo,
``sse-proxy mock-upstream``, the client-test harness and the test suite; it never touches
the network beyond loopback unless told to bind elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, Final

from aiohttp import web

from sse_proxy.errors import UsageError
from sse_proxy.names import DIALECT_PATHS, MOCK_SEED_HEADER
from sse_proxy.rechunk.shapes.rewriter import split_frames
from sse_proxy.rechunk.timefaults import DEFAULT_TIMING, Timeline, TimeSettings
from sse_proxy.server.delivery import Dropped, hold, stream_kind
from sse_proxy.tools import fixtures, mock_interactions
from sse_proxy.tools.fixtures.mcp import McpOptions
from sse_proxy.tools.fixtures.resume import DEFAULT_RESUME, ResumeSettings
from sse_proxy.tools.mcp_server import BODY_SENT, McpServer, StreamFor
from sse_proxy.tools.mock_base import (
    SETTINGS,
    MockSettings,
    bad_request,
    check_fault,
    mcp_options_of,
    request_delay,
    request_fault,
    request_mcp,
    request_seed,
    request_timing,
    reset_connection,
    resume_of,
    settings_of,
    start_sse,
    timing_of,
)
from sse_proxy.tools.mock_resume import (
    cancel_response,
    create_background,
    get_response,
    install,
    resumes,
    serve_resumable_text,
)

if TYPE_CHECKING:
    from sse_proxy.tools.lockstep import Lockstep

__all__ = [
    "DEFAULT_PORT",
    "ENDPOINTS",
    "MCP_SERVER",
    "make_mock_app",
    "mock_upstream",
    "run_mock_upstream",
    "start_mock_upstream",
]

DEFAULT_PORT: Final[int] = 8788
"""Suggested port for ``sse-proxy mock-upstream`` (the proxy's own default is 8787)."""

ENDPOINTS: Final[tuple[str, ...]] = (
    "POST /v1/chat/completions",
    "POST /v1/responses (background: true: stored, resumable)",
    "GET /v1/responses/{id}[?stream=true&starting_after=N]",
    "POST /v1/responses/{id}/cancel",
    "POST /v1/messages",
    "POST /v1beta/models/{model}:streamGenerateContent?alt=sse (also /v1, Vertex AI)",
    "POST /v1beta/interactions (Gemini Interactions; also /v1, /v1alpha)",
    "GET /v1beta/interactions/{id}[?stream=true&last_event_id=E]",
    "GET|POST /v1/text (Last-Event-ID: resumed)",
    "POST|GET|DELETE /mcp (MCP Streamable HTTP; tool stream_text)",
    "GET /healthz",
    "ANY /echo/{tail}",
    "GET /bytes/{n}",
    "POST /sse/raw",
)
"""What the mock serves, as printed on start-up."""

_MAX_BYTES = 64 * 1024 * 1024
_MAX_HEADER = 256 * 1024
MCP_SERVER: Final = web.AppKey("mock_mcp_server", McpServer)
"""The app's MCP server (what it was called with: :attr:`McpServer.calls`)."""


async def _json_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object; an empty body counts as ``{}``."""
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise bad_request(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object")
    return body


def _pieces(data: bytes, seed: int) -> list[bytes]:
    """Realistic write sizes; large bodies get larger pieces so they stay quick to send."""
    return fixtures.split_reads(data, seed, max_size=max(64, len(data) // 1000))


async def _write_pieces(
    resp: web.StreamResponse,
    pieces: Sequence[bytes],
    delay: float,
    lockstep: Lockstep | None = None,
) -> bool:
    """Write each piece on its own, yielding in between; False if the client went away.

    With a ``lockstep`` (an in-process proxy reading this stream), each piece waits until
    the proxy has read the one before, so its reads are exactly these pieces.
    """
    pace = None if lockstep is None else lockstep.begin()
    written = 0
    try:
        for piece in pieces:
            await resp.write(piece)
            written += len(piece)
            if pace is not None:
                await pace.written(written)
            await asyncio.sleep(delay)
    except ConnectionResetError:
        return False
    return True


async def _serve_sse(
    request: web.Request, body: bytes, *, reset: bool = False
) -> web.StreamResponse:
    """Stream ``body`` as an SSE response in seeded random pieces; then end the response,
    or (``reset``) reset the connection instead, as an upstream that crashed does."""
    pieces = _pieces(body, request_seed(request))
    delay = request_delay(request)
    resp = await start_sse(request)
    if not await _write_pieces(resp, pieces, delay, settings_of(request).lockstep):
        return resp
    request[BODY_SENT] = True
    if reset:
        await reset_connection(request)
        return resp
    with contextlib.suppress(ConnectionResetError):
        await resp.write_eof()
    return resp


async def _serve_mcp_sse(
    request: web.Request, body: bytes, reset: bool, timed: str | None
) -> web.StreamResponse:
    if timed is not None:
        return await _serve_timed(request, body, "mcp", timed)
    return await _serve_sse(request, body, reset=reset)


async def _serve_timed(
    request: web.Request, body: bytes, dialect: str, fault: str
) -> web.StreamResponse:
    """``body`` frame by frame with a fault in time: the pauses the timeline puts in front
    of frames (a stall with its keep-alives, a drip's waits), and a linger at the end; a
    drop resets the connection (a stream nothing can resume: every request is cut)."""
    timeline = Timeline(
        fault, request_timing(request), stream_kind(dialect), seed=request_seed(request)
    )
    resp = await start_sse(request)

    async def cut() -> None:
        await reset_connection(request)

    try:
        for frame in split_frames(body):
            for piece, pause in timeline.frame(frame):
                if pause is not None:
                    await hold(pause, resp.write, cut)
                await resp.write(piece)
        request[BODY_SENT] = True
        end = timeline.end()
        if end is not None:
            await hold(end, resp.write, cut)
        await resp.write_eof()
    except (ConnectionResetError, ConnectionError, Dropped):
        pass  # the client left (the fault is over), or the drop cut it off
    return resp


async def _serve_stream(
    request: web.Request, dialect: str, fault: str | None
) -> web.StreamResponse:
    """The canonical stream of ``dialect``, broken by ``fault`` if any."""
    if fault is None:
        return await _serve_sse(request, fixtures.clean_stream(dialect))
    if fixtures.KINDS[fault].timed:
        return await _serve_timed(request, fixtures.clean_stream(dialect), dialect, fault)
    reset = fixtures.KINDS[fault].reset
    return await _serve_sse(request, fixtures.faulty_stream(fault, dialect), reset=reset)


def _wants_tools(request: web.Request, body: dict[str, Any]) -> bool:
    """Stream the tool-call fixture: the mock was started so, or the request declares tools."""
    tools = body.get("tools")
    return settings_of(request).tools or (isinstance(tools, list) and bool(tools))


async def _serve_tools(request: web.Request, dialect: str) -> web.StreamResponse:
    """The tool-call fixture of ``dialect``: the answer, then the fixture's three calls."""
    return await _serve_sse(request, fixtures.tool_stream(dialect))


def _stream_body(dialect: str, fault: str | None) -> bytes:
    if fault is not None:
        return fixtures.faulty_stream(fault, dialect)
    return fixtures.clean_stream(dialect)


# ------------------------------------------------------------------------ LLM routes


def _chat_completion(n: int) -> dict[str, Any]:
    """A non-streaming ``chat.completion`` carrying the canonical message."""
    return {
        "id": "chatcmpl-mock0000000000000000000001",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-4o-mini-2024-07-18",
        "system_fingerprint": "fp_mock0001",
        "choices": [
            {
                "index": i,
                "message": {"role": "assistant", "content": fixtures.MESSAGE, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
            for i in range(n)
        ],
        "usage": {
            "prompt_tokens": 12,
            "completion_tokens": len(fixtures.TOKENS) * n,
            "total_tokens": 12 + len(fixtures.TOKENS) * n,
        },
    }


def _json_response(obj: object) -> web.Response:
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return web.Response(text=text, content_type="application/json", charset="utf-8")


async def _chat_completions(request: web.Request) -> web.StreamResponse:
    """OpenAI Chat Completions: SSE when ``"stream": true``, else one JSON object."""
    body = await _json_body(request)
    n = body.get("n", 1)
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 8:
        raise bad_request("n must be an integer between 1 and 8")
    if body.get("stream") is not True:
        return _json_response(_chat_completion(n))
    fault = request_fault(request)
    if fault is not None:
        return await _serve_stream(request, "openai", fault)
    if _wants_tools(request, body):
        return await _serve_tools(request, "openai")
    options = body.get("stream_options")
    usage = isinstance(options, dict) and options.get("include_usage") is True
    stream = fixtures.openai_chat_stream(
        fixtures.TOKENS, choices=n, include_usage=usage, first_text=settings_of(request).first_text
    )
    return await _serve_sse(request, stream)


async def _responses(request: web.Request) -> web.StreamResponse:
    """OpenAI Responses API: SSE when ``"stream": true``, else the completed response; with
    ``"background": true`` a stored response (:mod:`.mock_resume`)."""
    body = await _json_body(request)
    if body.get("background") is True:  # stored: it can be streamed again, from a cursor
        return await create_background(request, body.get("stream") is True)
    if body.get("stream") is True:
        fault = request_fault(request)
        if fault is None and _wants_tools(request, body):
            return await _serve_tools(request, "responses")
        return await _serve_stream(request, "responses", fault)
    item = {
        "id": "msg_mock0000000000000001",
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": fixtures.MESSAGE, "annotations": []}],
    }
    return _json_response(
        {
            "id": "resp_mock0000000000000001",
            "object": "response",
            "created_at": 1_700_000_000,
            "status": "completed",
            "model": "gpt-4o-mini-2024-07-18",
            "output": [item],
        }
    )


async def _messages(request: web.Request) -> web.StreamResponse:
    """Anthropic Messages: SSE when ``"stream": true``, else the whole message."""
    body = await _json_body(request)
    if body.get("stream") is True:
        fault = request_fault(request)
        if fault is None and _wants_tools(request, body):
            return await _serve_tools(request, "anthropic")
        return await _serve_stream(request, "anthropic", fault)
    return _json_response(
        {
            "id": "msg_mock0000000000000001",
            "type": "message",
            "role": "assistant",
            "model": "claude-3-5-sonnet-20241022",
            "content": [{"type": "text", "text": fixtures.MESSAGE}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 12, "output_tokens": len(fixtures.TOKENS)},
        }
    )


async def _text(request: web.Request) -> web.StreamResponse:  # first event: always text
    """Raw text SSE, one unquoted ``data:`` event per token; always streams. A request that
    resumes (``Last-Event-ID``), or with a drop on, gets the resumable stream."""
    fault = request_fault(request)
    if resumes(request, fault):
        return await serve_resumable_text(request, fault)
    await request.read()
    return await _serve_stream(request, "text", fault)


def _gemini_chunks(fault: str | None) -> list[Any]:
    """The Gemini stream's chunks as objects (what ``alt=sse`` absent returns, as an array)."""
    body = _stream_body("gemini", fault).decode("utf-8", "replace")
    return [json.loads(line[6:]) for line in body.split("\n") if line.startswith("data: {")]


async def _gemini(request: web.Request) -> web.StreamResponse:
    """Gemini ``models/{model}:streamGenerateContent`` (SSE with ``?alt=sse``, else a JSON
    array of chunks) and ``:generateContent``; Generative Language and Vertex AI paths."""
    model, sep, action = request.match_info["model_action"].rpartition(":")
    if not sep or not model or action not in ("streamGenerateContent", "generateContent"):
        body = {"error": {"code": 404, "message": "unknown method", "status": "NOT_FOUND"}}
        return web.json_response(body, status=404)
    body = await _json_body(request)
    fault = request_fault(request)
    if action == "streamGenerateContent" and fault is None and _wants_tools(request, body):
        if request.query.get("alt") == "sse":
            return await _serve_tools(request, "gemini")
        chunks = fixtures.tool_stream("gemini").decode().split("\n")
        return _json_response([json.loads(c[6:]) for c in chunks if c.startswith("data: {")])
    if action == "generateContent":
        return _json_response(
            {
                "candidates": [
                    {
                        "content": {"parts": [{"text": fixtures.MESSAGE}], "role": "model"},
                        "finishReason": "STOP",
                        "index": 0,
                    }
                ],
                "usageMetadata": {"promptTokenCount": 12, "totalTokenCount": 12},
                "modelVersion": model,
            }
        )
    if request.query.get("alt") == "sse":
        return await _serve_stream(request, "gemini", fault)
    return _json_response(_gemini_chunks(fault))


@web.middleware
async def _require_key(request: web.Request, handler: Any) -> web.StreamResponse:
    """With an API key set, LLM endpoints need it, as each vendor takes it (401 otherwise)."""
    key = settings_of(request).api_key
    if key is not None and request.path.startswith("/v1"):
        offered = {
            request.headers.get("Authorization", "").removeprefix("Bearer "),
            request.headers.get("x-api-key", ""),
            request.headers.get("x-goog-api-key", ""),
            request.query.get("key", ""),
        }
        if key not in offered:
            body = {"error": {"type": "authentication_error", "message": "invalid API key"}}
            return web.json_response(body, status=401)
    response: web.StreamResponse = await handler(request)
    return response


async def _healthz(request: web.Request) -> web.Response:
    settings = settings_of(request)
    return _json_response({"status": "ok", "fault": settings.fault, "seed": settings.seed})


# ---------------------------------------------------------------------- test helpers


async def _echo(request: web.Request) -> web.Response:
    """What the upstream received: method, raw path and query, headers, body digest.

    The body is hashed as it streams in, so large or slow uploads are fine.
    """
    digest = hashlib.sha256()
    size = 0
    async for block in request.content.iter_any():
        digest.update(block)
        size += len(block)
    headers: dict[str, str] = {}
    for name, value in request.headers.items():
        key = name.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return _json_response(
        {
            "method": request.method,
            "path": request.rel_url.raw_path,
            "query": request.rel_url.raw_query_string,
            "headers": headers,
            "header_list": [[k, v] for k, v in request.headers.items()],
            "body_len": size,
            "body_sha256": digest.hexdigest(),
        }
    )


async def _bytes(request: web.Request) -> web.StreamResponse:
    """``n`` deterministic non-SSE bytes (:func:`sse_proxy.tools.fixtures.pattern_bytes`)."""
    try:
        n = int(request.match_info["n"])
    except ValueError:
        raise bad_request("n must be an integer") from None
    if not 0 <= n <= _MAX_BYTES:
        raise bad_request(f"n must be between 0 and {_MAX_BYTES}")
    data = fixtures.pattern_bytes(n)
    resp = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
    resp.content_length = n
    await resp.prepare(request)
    step = 64 * 1024
    if await _write_pieces(resp, [data[i : i + step] for i in range(0, n, step)], 0.0):
        with contextlib.suppress(ConnectionResetError):
            await resp.write_eof()
    return resp


async def _sse_raw(request: web.Request) -> web.StreamResponse:
    """Stream the request body back verbatim as ``text/event-stream``.

    ``?chunk=N`` writes N-byte pieces (else one write, or seeded random pieces with
    ``?seed=``); ``?close_early=1`` drops the connection after half the body, the way an
    upstream that dies mid-stream looks to the client.
    """
    body = await request.read()
    chunk = request.query.get("chunk")
    if chunk is not None:
        if not chunk.isdigit() or int(chunk) < 1:
            raise bad_request("chunk must be a positive integer")
        size = int(chunk)
        pieces = [body[i : i + size] for i in range(0, len(body), size)]
    elif "seed" in request.query or MOCK_SEED_HEADER in request.headers:
        pieces = fixtures.split_reads(body, request_seed(request))
    else:
        pieces = [body] if body else []
    close_early = request.query.get("close_early", "0") not in ("", "0", "false")
    if close_early:
        half, sent, cut = len(body) // 2, 0, []
        for piece in pieces:
            if sent + len(piece) > half:
                piece = piece[: half - sent]  # noqa: PLW2901 - trim the piece at the half
            if piece:
                cut.append(piece)
            sent += len(piece)
            if sent >= half:
                break
        pieces = cut
    delay = request_delay(request)
    resp = await start_sse(request)
    if not await _write_pieces(resp, pieces, delay):
        return resp
    if close_early:
        # close() flushes what is buffered, then the chunked body never gets its last chunk.
        resp.force_close()
        if request.transport is not None:
            request.transport.close()
        return resp
    with contextlib.suppress(ConnectionResetError):
        await resp.write_eof()
    return resp


# ------------------------------------------------------------------------- app, runner


def make_mock_app(
    *,
    fault: str | None = None,
    seed: int = 0,
    chunk_delay: float = 0.0,
    first_text: bool = False,
    api_key: str | None = None,
    tools: bool = False,
    lockstep: Lockstep | None = None,
    mcp_stream: StreamFor | None = None,
    timing: TimeSettings = DEFAULT_TIMING,
    mcp: McpOptions | None = None,
    resume: ResumeSettings = DEFAULT_RESUME,
    resumable: bool = False,
) -> web.Application:
    """The mock upstream app; ``fault`` applies to every stream unless a request overrides it.

    ``first_text``: the OpenAI Chat stream's first event (the role chunk) carries text.
    ``tools``: every stream is the tool-call fixture (the answer, then three tool calls), as
    it is anyway for a request that declares ``tools``.
    With ``api_key``, every ``/v1*`` request must carry it (``Authorization: Bearer``,
    ``x-api-key``, ``x-goog-api-key`` or ``?key=``), like the real APIs: a test of held
    keys then fails unless the key really arrived. A ``lockstep`` paces the streams to an
    in-process proxy's reads (:mod:`sse_proxy.tools.lockstep`). ``mcp_stream`` answers
    the MCP server's tool calls instead of the fixture (:data:`StreamFor`). ``timing``: the
    faults in time's durations, unless a request names its own; ``mcp``: the MCP streams'
    options (priming, ids, ``retry``), likewise; ``resume``: the resumable
    streams' settings (``retry``, ``resume_window``), likewise; ``resumable``: every raw SSE
    stream is resumable (:mod:`.mock_resume`), not only those that resume or drop. Raises
    :class:`~sse_proxy.errors.UsageError` for an unknown fault, listing the valid kinds.
    """
    if chunk_delay < 0:
        raise UsageError("chunk_delay must be >= 0")
    app = web.Application(client_max_size=_MAX_BYTES, middlewares=[_require_key])
    app[SETTINGS] = MockSettings(
        fault=check_fault(fault),
        seed=seed,
        chunk_delay=chunk_delay,
        first_text=first_text,
        api_key=api_key,
        tools=tools,
        lockstep=lockstep,
        timing=timing,
        mcp=mcp or McpOptions(),
        resume=resume,
        resumable=resumable,
    )
    # (every dialect of the registry has its endpoint here: tests/test_dialect_registry)
    app.router.add_post(DIALECT_PATHS["openai"], _chat_completions)
    app.router.add_post(DIALECT_PATHS["responses"], _responses)
    app.router.add_get(DIALECT_PATHS["responses"] + "/{response_id}", get_response)
    app.router.add_post(DIALECT_PATHS["responses"] + "/{response_id}/cancel", cancel_response)
    install(app)
    mock_interactions.install(app)
    app.router.add_post(DIALECT_PATHS["anthropic"], _messages)
    app.router.add_post("/{version:v1|v1beta|v1alpha}/models/{model_action}", _gemini)
    app.router.add_post(
        "/v1/projects/{project}/locations/{location}/publishers/google/models/{model_action}",
        _gemini,
    )
    interactions = "/{version:v1|v1beta|v1alpha}/interactions"
    app.router.add_post(interactions, mock_interactions.create_interaction)
    app.router.add_get(interactions + "/{interaction_id}", mock_interactions.get_interaction)
    app.router.add_get(DIALECT_PATHS["text"], _text)
    app.router.add_post(DIALECT_PATHS["text"], _text)
    app[MCP_SERVER] = mcp_server = McpServer(_serve_mcp_sse, request_fault, mcp_stream, request_mcp)
    app.router.add_route("*", DIALECT_PATHS["mcp"], mcp_server.handle)
    app.router.add_get("/healthz", _healthz)
    app.router.add_route("*", "/echo", _echo)
    app.router.add_route("*", "/echo/{tail:.*}", _echo)
    app.router.add_get("/bytes/{n}", _bytes)
    app.router.add_post("/sse/raw", _sse_raw)
    return app


def _base_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def start_mock_upstream(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    fault: str | None = None,
    seed: int = 0,
    chunk_delay: float = 0.0,
    first_text: bool = False,
    api_key: str | None = None,
    tools: bool = False,
    lockstep: Lockstep | None = None,
    mcp_stream: StreamFor | None = None,
    timing: TimeSettings = DEFAULT_TIMING,
    mcp: McpOptions | None = None,
    resume: ResumeSettings = DEFAULT_RESUME,
    resumable: bool = False,
) -> tuple[web.AppRunner, str]:
    """Start the mock on ``host:port`` (0 = ephemeral); return its runner and base URL.

    Stop it with ``await runner.cleanup()``; open streams get one second to finish. A
    client that leaves ends its stream's handler (a stall is not waited out for nobody).
    """
    app = make_mock_app(
        fault=fault,
        seed=seed,
        chunk_delay=chunk_delay,
        first_text=first_text,
        api_key=api_key,
        tools=tools,
        lockstep=lockstep,
        mcp_stream=mcp_stream,
        timing=timing,
        mcp=mcp,
        resume=resume,
        resumable=resumable,
    )
    # a header as long as a client sends one (a Last-Event-ID of 100 KB) gets the endpoint's
    # own 400, not aiohttp's plain-text one
    runner = web.AppRunner(
        app,
        access_log=None,
        shutdown_timeout=1.0,
        handler_cancellation=True,
        max_field_size=_MAX_HEADER,
        max_line_size=_MAX_HEADER,
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound_port = int(runner.addresses[0][1])
    return runner, _base_url(host, bound_port)


@contextlib.asynccontextmanager
async def mock_upstream(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    fault: str | None = None,
    seed: int = 0,
    chunk_delay: float = 0.0,
    api_key: str | None = None,
    timing: TimeSettings = DEFAULT_TIMING,
    mcp: McpOptions | None = None,
    resume: ResumeSettings = DEFAULT_RESUME,
) -> AsyncIterator[str]:
    """``async with mock_upstream() as base_url:`` -- started, and cleaned up afterwards."""
    runner, url = await start_mock_upstream(
        host,
        port,
        fault=fault,
        seed=seed,
        chunk_delay=chunk_delay,
        api_key=api_key,
        timing=timing,
        mcp=mcp,
        resume=resume,
    )
    try:
        yield url
    finally:
        await runner.cleanup()


async def _serve_forever(
    host: str,
    port: int,
    fault: str | None,
    seed: int,
    chunk_delay: float,
    first_text: bool,
    tools: bool = False,
    timing: TimeSettings = DEFAULT_TIMING,
    mcp: McpOptions | None = None,
    resume: ResumeSettings = DEFAULT_RESUME,
    resumable: bool = False,
) -> int:
    try:
        runner, url = await start_mock_upstream(
            host,
            port,
            fault=fault,
            seed=seed,
            chunk_delay=chunk_delay,
            first_text=first_text,
            tools=tools,
            timing=timing,
            mcp=mcp,
            resume=resume,
            resumable=resumable,
        )
    except (OSError, OverflowError, UnicodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise UsageError(f"cannot listen on {host}:{port}: {why}") from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    sys.stdout.write(
        f"mock upstream listening on {url} (fault: {fault or 'none'}, seed: {seed}); "
        f"endpoints: {', '.join(ENDPOINTS)}\n"
    )
    sys.stdout.flush()
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
        await runner.cleanup()
    return 0


def run_mock_upstream(
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    fault: str | None = None,
    seed: int = 0,
    *,
    chunk_delay: float = 0.0,
    first_text: bool = False,
    tools: bool = False,
    timing: dict[str, str] | None = None,
    mcp: str | None = None,
    resume: dict[str, str] | None = None,
    resumable: bool = False,
) -> int:
    """Blocking entry for ``sse-proxy mock-upstream``: serve until Ctrl-C or SIGTERM.

    Prints one line with the base URL and endpoints; returns the exit code (0). An unknown
    fault, a bad duration (``timing``, ``resume``: setting name -> text, as flags give it),
    bad MCP stream options (``mcp``: ``priming=off,retry=200``) or an unusable address
    raises :class:`~sse_proxy.errors.UsageError`.
    """
    fault = check_fault(fault)
    if chunk_delay < 0:
        raise UsageError("chunk_delay must be >= 0")
    if not 0 <= port <= 65535:
        raise UsageError(f"--port must be 0..65535, not {port}")
    durations = timing_of(timing)
    options = mcp_options_of(mcp)
    resume_settings = resume_of(resume)
    try:
        return asyncio.run(
            _serve_forever(
                host,
                port,
                fault,
                seed,
                chunk_delay,
                first_text,
                tools,
                durations,
                mcp=options,
                resume=resume_settings,
                resumable=resumable,
            )
        )
    except KeyboardInterrupt:  # platforms without loop signal handlers
        return 0
