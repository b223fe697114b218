"""Upstreams that send the shapes real providers send: the proxy's summaries stay exact, and
the tool calls of a request that declared its tools are checked against their schemas."""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from sse_proxy.names import DIALECT_BODIES, DIALECT_PATHS
from sse_proxy.rechunk.shapes.rewriter import apply_variants
from sse_proxy.tools import fixtures
from sse_proxy.tools.fixtures.streams import serialize, tool_frames
from sse_proxy.tools.fixtures.tools import tool_request_body
from tests.core.test_toolcalls import BAD, SECRET
from tests.core.test_variants import FINISH, TOOL_FINISH, _usage
from tests.rechunk.test_shapes import CASES, SAMPLE, SAMPLE_TEXT, _body
from tests.support.logs import LogEntries, named, wait_for
from tests.support.net import STREAM_ID
from tests.support.stack import StartApp, StartProxy


def _upstream() -> web.Application:
    """POST /{dialect}/{tools}/{variant}: that variant of the sample stream."""

    async def serve(request: web.Request) -> web.StreamResponse:
        await request.read()
        dialect, tools, name = (request.match_info[k] for k in ("dialect", "tools", "name"))
        body = _body(dialect, tools == "tools")
        if name == "bad_arguments":
            body = serialize(tool_frames(dialect, SAMPLE, BAD), "\n")
        elif name != "none":
            body = b"".join(f for f, _ in apply_variants([name], body, dialect, seed=2))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(body)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/{dialect}/{tools}/{name}", serve)
    return app


@pytest.mark.asyncio
async def test_summaries_stay_exact_on_every_variant(
    start: StartProxy, start_app: StartApp, session: aiohttp.ClientSession, logs: LogEntries
) -> None:
    url = await start(await start_app(_upstream()))
    wrong = {}
    for name, dialect, tools in CASES:
        path = f"/{dialect}/{'tools' if tools else 'text'}/{name}"
        async with session.post(url + path, json={"stream": True}) as resp:
            data = await resp.read()
            sid = resp.headers[STREAM_ID]
        line = await wait_for(logs, "stream.summary", sid)
        finish = [] if dialect == "text" else [(TOOL_FINISH if tools else FINISH)[dialect]]
        got: tuple[object, ...] = (
            line["verdict"],
            line["alerts"],
            line["text_length"],
            line["finish_reasons"],
            (line["input_tokens"], line["output_tokens"]),
        )
        want: tuple[object, ...] = (
            "ok",
            {},
            len(SAMPLE_TEXT),
            finish * (2 if name == "choices_n2" else 1),
            _usage(dialect, data) if dialect != "text" else (None, None),
        )
        if got != want:
            wrong[path] = (got, want)
    assert not wrong, wrong


@pytest.mark.asyncio
@pytest.mark.parametrize("dialect", ["openai", "anthropic", "responses", "gemini"])
async def test_tool_arguments_against_the_requests_schema(
    start: StartProxy,
    start_app: StartApp,
    session: aiohttp.ClientSession,
    logs: LogEntries,
    dialect: str,
) -> None:
    """The request's tools are read like its model (small JSON bodies, never held back);
    a call whose arguments break its tool's schema is one warning line, without them."""
    url = await start(await start_app(_upstream()))
    body = tool_request_body(dialect)
    async with session.post(f"{url}/{dialect}/tools/bad_arguments", json=body) as resp:
        await resp.read()
        sid = resp.headers[STREAM_ID]
    line = await wait_for(logs, "stream.summary", sid)
    (alert,) = named(logs, "sse.tool_call_invalid", sid)
    assert alert["log_level"] == "warning"
    assert (alert["reason"], alert["tool"]) == ("schema", "get_weather")
    assert alert["index"] == {"openai": 0, "anthropic": 1, "responses": 1, "gemini": 0}[dialect]
    assert "enum" in alert["error"]
    assert SECRET not in json.dumps([e for e in logs if e.get("stream_id") == sid], default=str)
    assert line["alerts"] == {"sse.tool_call_invalid": 1}
    assert line["verdict"] == "degraded"
    async with session.post(f"{url}/{dialect}/tools/none", json=body) as resp:
        await resp.read()
        clean = resp.headers[STREAM_ID]
    assert (await wait_for(logs, "stream.summary", clean))["alerts"] == {}
    async with session.post(f"{url}/{dialect}/tools/bad_arguments", json={"stream": True}) as r:
        await r.read()
        undeclared = r.headers[STREAM_ID]
    assert (await wait_for(logs, "stream.summary", undeclared))["alerts"] == {}  # no schema


@pytest.mark.asyncio
@pytest.mark.parametrize("dialect", ["openai", "anthropic", "responses", "gemini"])
async def test_the_mock_streams_the_tool_calls_to_a_request_that_declares_tools(
    mock_url: str, session: aiohttp.ClientSession, dialect: str
) -> None:
    url = mock_url + DIALECT_PATHS[dialect]
    async with session.post(url, json=tool_request_body(dialect)) as resp:
        assert await resp.read() == fixtures.tool_stream(dialect)
    async with session.post(url, json=DIALECT_BODIES[dialect]) as resp:
        assert await resp.read() == fixtures.clean_stream(dialect)


@pytest.mark.asyncio
async def test_a_variant_only_some_requests_make_possible_follows_the_request(
    mock_url: str,
    start: StartProxy,
    session: aiohttp.ClientSession,
    logs: LogEntries,
) -> None:
    """``choices_n2`` reaches a request that asks for ``n > 1`` (the mock's own two choices,
    not a third), is left out of one that does not (the summary says why), and forced with
    ``force=1``; the body is read whatever its content type says, bounded."""
    url = await start(mock_url, allow_chaos_header=True, log_level="info") + "/v1/chat/completions"

    async def stream(
        body: dict[str, object], header: str, kind: str = "application/json"
    ) -> tuple[bytes, MutableMapping[str, Any]]:
        headers = {"X-SSE-Proxy-Chaos": header, "Content-Type": kind}
        async with session.post(url, data=json.dumps(body), headers=headers) as resp:
            got = await resp.read()
            sid = resp.headers[STREAM_ID]
        return got, await wait_for(logs, "stream.summary", sid)

    plain = dict(DIALECT_BODIES["openai"])
    data, line = await stream(plain, "strategy=choices_n2; seed=1")
    assert b'"index":1' not in data
    assert line["variants_not_applicable"] == {"choices_n2": "n > 1"}
    assert "variants_forced" not in line
    data, line = await stream(plain, "strategy=choices_n2; seed=1; force=1")
    assert b'"index":1' in data
    assert line["variants_forced"] == {"choices_n2": "n > 1"}
    assert "variants_not_applicable" not in line
    two = {**plain, "n": 2}
    data, line = await stream(two, "strategy=choices_n2; seed=1", "text/plain")
    assert data.count(b'"index":1') == data.count(b'"index":0')  # the upstream's, no more
    assert "variants_not_applicable" not in line
    assert "variants_forced" not in line
    data, line = await stream(plain, "strategy=random; seed=1")
    assert "variants_not_applicable" not in line  # no variant: the body is not kept
