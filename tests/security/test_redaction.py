"""Secrets never reach a log line, at any level, in errors and tracebacks included.

The proxy runs as a real ``sse-proxy serve`` subprocess (its stderr is the JSON log) and
in-process with ``configure_logging(stream=...)``; requests carry every kind of secret the
issue names, upstreams fail in every way we can provoke, and the whole log text must not
contain the marker ``SECRET`` anywhere. Message text stays out of the log unless asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sse_proxy.errors import ConfigError
from sse_proxy.obs.logs import configure_logging, get_logger
from sse_proxy.obs.redact import format_exception_redacted, redact_text
from sse_proxy.settings import Config
from sse_proxy.tools.mock_upstream import mock_upstream
from tests.support.cli import ServeProcess
from tests.support.net import dead_port, free_port, raw_exchange, running_proxy

MARKER = "SECRET"
WORD = "Zanzibarquux"  # a distinctive word of the streamed message text

SECRET_HEADERS = {
    "Authorization": "Bearer sk-SECRET-authz",
    "Proxy-Authorization": "Basic SECRET-proxyauthz",
    "x-api-key": "SECRET-xapikey",
    "api-key": "SECRET-apikey",
    "Cookie": "session=SECRET-cookie; theme=dark",
    "X-Custom-Token": "SECRET-customtoken",
    "X-Secret-Thing": "SECRET-thing",
}
SECRET_QUERY = "?api_key=SECRET-q1&token=SECRET-q2&model=gpt"


def _sse_body() -> bytes:
    frames = [
        {"choices": [{"index": 0, "delta": {"content": f"Hello {WORD} "}}]},
        {"choices": [{"index": 0, "delta": {"content": "world"}}]},
    ]
    body = b"".join(b"data: " + json.dumps(f).encode() + b"\n\n" for f in frames)
    return body + b"data: [DONE]\n\n"


@contextlib.asynccontextmanager
async def hostile_upstream() -> AsyncIterator[int]:
    """A raw upstream: a clean stream, a malformed response, a reset, secret response headers."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            target = head.split(b" ", 2)[1]
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            if length:
                await reader.readexactly(length)
            if target.startswith(b"/v1/chat/completions"):
                body = _sse_body()
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Set-Cookie: session=SECRET-setcookie\r\nX-Api-Key: SECRET-respkey\r\n"
                    b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
                )
            elif target.startswith(b"/malformed"):
                # A header line without its colon: the parser error quotes the line.
                writer.write(b"HTTP/1.1 200 OK\r\nSet-Cookie session=SECRET-bad\r\n\r\n")
            elif target.startswith(b"/reset"):
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b'Transfer-Encoding: chunked\r\n\r\n10\r\ndata: {"choices\r\n'
                )
                await writer.drain()
                writer.transport.abort()
                return
            else:
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield int(server.sockets[0].getsockname()[1])
    finally:
        server.close()
        await server.wait_closed()


async def _send_everything(port: int) -> list[int]:
    """Every request shape that carries a secret; returns the statuses seen."""
    statuses = []
    timeout = aiohttp.ClientTimeout(total=10)
    base = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for method, path in (
            ("POST", "/v1/chat/completions"),
            ("GET", "/malformed"),
            ("GET", "/reset"),
            ("GET", "/missing"),
        ):
            body = {"stream": True, "api_key": "SECRET-inbody"} if method == "POST" else None
            try:
                async with session.request(
                    method, base + path + SECRET_QUERY, json=body, headers=SECRET_HEADERS
                ) as resp:
                    statuses.append(resp.status)
                    with contextlib.suppress(aiohttp.ClientPayloadError):
                        await resp.read()
            except aiohttp.ClientError:
                statuses.append(-1)
    # Malformed requests: aiohttp's parser errors quote the raw bytes in their messages.
    huge_auth = b"Authorization: Bearer SECRET-huge" + b"A" * 70000 + b"\r\n"
    for request in (
        b"GET /v1/x HTTP/1.1\r\nHost: 127.0.0.1\r\n" + huge_auth + b"\r\n",
        b"GET /v1/x?token=SECRET-longurl" + b"B" * 70000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"GET /v1/x HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization SECRET-badline\r\n\r\n",
        b"GET /v1/x HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Api-Key: SECRET-\x00nul\r\n\r\n",
    ):
        reply = await raw_exchange(port, request)
        statuses.append(reply.status)
    return statuses


def _assert_clean(text: str) -> list[dict[str, Any]]:
    """No marker anywhere; every line is one JSON object; returns the parsed lines."""
    assert MARKER not in text, [line for line in text.splitlines() if MARKER in line]
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    assert lines
    return lines


@pytest.mark.asyncio
async def test_serve_subprocess_logs_no_secret_even_in_tracebacks() -> None:
    """`sse-proxy serve` at debug level: errors, tracebacks and summaries, all redacted."""
    async with hostile_upstream() as up:
        port = free_port()
        with ServeProcess(
            "--upstream", f"http://127.0.0.1:{up}", "--port", str(port), "--log-level", "debug"
        ) as serve:
            await asyncio.to_thread(serve.wait_for, "proxy.started")
            statuses = await _send_everything(port)
            await asyncio.to_thread(serve.wait_for, "stream.summary", 2)
        text = serve.stop()
    assert statuses[:2] == [200, 502], statuses
    # an oversized header line or request line is a 431, the other parse errors a 400
    assert statuses[4:6] == [431, 431], statuses
    assert all(s == 400 for s in statuses[6:]), statuses
    lines = _assert_clean(text)
    events = {e["event"] for e in lines}
    assert {"proxy.started", "stream.summary", "upstream.error", "upstream.request"} <= events
    # The parse errors are one warning line each, without a traceback or the raw bytes.
    bad = [e for e in lines if e["event"] == "http.bad_request"]
    assert [e["status"] for e in bad] == [431, 431, 400, 400], bad
    assert bad[0]["error"] == "HeadTooLarge"  # refused as it arrived, before the parser
    assert not [e for e in lines if "exception" in e or e.get("level") == "error"]
    # Message text is not logged by default.
    assert WORD not in text


@pytest.mark.asyncio
async def test_log_text_flag_logs_message_text_but_still_no_secret() -> None:
    """With --log-text the summary carries the text; secrets stay out all the same."""
    async with hostile_upstream() as up:
        port = free_port()
        with ServeProcess(
            "--upstream", f"http://127.0.0.1:{up}", "--port", str(port), "--log-text"
        ) as serve:
            await asyncio.to_thread(serve.wait_for, "proxy.started")
            await _send_everything(port)
            await asyncio.to_thread(serve.wait_for, "stream.summary", 2)
        text = serve.stop()
    lines = _assert_clean(text)
    texts = [e.get("text", "") for e in lines if e["event"] == "stream.summary"]
    assert any(WORD in t for t in texts), texts


@pytest.mark.asyncio
async def test_unreachable_upstream_error_lines_are_redacted() -> None:
    """An upstream that refuses connections: the error lines say so, without secrets."""
    dead = dead_port()
    port = free_port()
    with ServeProcess("--upstream", f"http://127.0.0.1:{dead}", "--port", str(port)) as serve:
        await asyncio.to_thread(serve.wait_for, "proxy.started")
        statuses = await _send_everything(port)
        await asyncio.to_thread(serve.wait_for, "upstream.error", 4)
    text = serve.stop()
    assert statuses[:4] == [502] * 4
    lines = _assert_clean(text)
    errors = [e for e in lines if e["event"] == "upstream.error"]
    assert {e["kind"] for e in errors} == {"upstream_unreachable"}
    assert all(e["level"] == "warning" for e in errors)


@pytest.mark.asyncio
async def test_upstream_credentials_never_printed() -> None:
    """Userinfo or a query key in --upstream: refused or used, but never printed."""
    for upstream in (
        "http://127.0.0.1:{up}/?api_key=SECRET-upq",
        "http://user:SECRET-pw@127.0.0.1:{up}",
    ):
        async with hostile_upstream() as up:
            port = free_port()
            with ServeProcess(
                "--upstream", upstream.format(up=up), "--port", str(port), "--log-level", "debug"
            ) as serve:
                assert serve.proc is not None
                code = await asyncio.to_thread(_exit_or_start, serve)
                if code is None:  # accepted: it must work and log nothing secret
                    statuses = await _send_everything(port)
                    assert statuses[0] == 200, statuses  # never a 500 for Authorization
            text = serve.stop()
        assert MARKER not in text, text
        if code is not None:
            assert code == 2
            assert "upstream" in text


def _exit_or_start(serve: ServeProcess) -> int | None:
    """The exit code of a serve that refused to start, or None once it has started."""
    assert serve.proc is not None
    for _ in range(400):
        code = serve.proc.poll()
        if code is not None:
            return code
        if any(e.get("event") == "proxy.started" for e in _json_lines(serve.log_text())):
            return None
        time.sleep(0.05)
    raise AssertionError(serve.log_text())


def _json_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def test_upstream_userinfo_config_error_does_not_echo_it() -> None:
    """A rejected upstream URL is quoted in the error only with its secrets redacted."""
    for url in (
        "http://127.0.0.1:1/?api_key=SECRET-1",
        "http://u:SECRET-2@127.0.0.1:1/#frag",
        "ftp://u:SECRET-3@127.0.0.1/",
    ):
        with pytest.raises(ConfigError) as info:
            Config(upstream=url)
        assert MARKER not in str(info.value)


# ------------------------------------------------------------------------ in-process


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    """configure_logging into a StringIO at debug level; the previous setup restored after."""
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    stream = io.StringIO()
    configure_logging(stream=stream, level="debug")
    try:
        yield stream
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        structlog.configure(**saved)


@pytest.mark.asyncio
async def test_in_process_unexpected_exception_traceback_is_redacted(
    log_stream: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handler bug whose message quotes secrets: a 500, a JSON traceback, no secret."""

    def boom(headers: Any) -> Any:
        raise RuntimeError(
            "unexpected: Authorization: Bearer sk-SECRET-a\n"
            "upstream=http://user:SECRET-b@h/v1?api_key=SECRET-c\n"
            "x-custom-token=SECRET-d, Cookie: sid=SECRET-e"
        )

    monkeypatch.setattr("sse_proxy.server.relay.response_headers_for_client", boom)
    async with (
        mock_upstream() as upstream,
        running_proxy(upstream) as proxy,
        aiohttp.ClientSession() as session,
    ):
        url = proxy + "/v1/chat/completions" + SECRET_QUERY
        async with session.post(url, json={"stream": True}, headers=SECRET_HEADERS) as resp:
            assert resp.status == 500
            assert MARKER not in await resp.text()
    lines = _assert_clean(log_stream.getvalue())
    crash = [e for e in lines if "RuntimeError" in e.get("exception", "")]
    assert len(crash) == 1, lines
    assert crash[0]["level"] == "error"
    assert crash[0]["logger"] == "aiohttp.server"
    assert "Traceback (most recent call last)" in crash[0]["exception"]
    assert "in respond" in crash[0]["exception"]  # the frames survive, only data goes


def test_structlog_exception_and_fields_are_redacted(log_stream: io.StringIO) -> None:
    """Our own logger: secret-named fields, header maps, URLs and exception text, redacted."""
    log = get_logger(stream_id="s1")
    log.debug("probe.debug", api_key="SECRET-f1", url="http://u:SECRET-f2@h/?token=SECRET-f3")
    log.info("probe.info", headers={"Authorization": "Bearer SECRET-f4", "Accept": "x"})
    log.warning("probe.warning", x_session_id="SECRET-f5")
    # Built away from the raise lines: a traceback quotes source lines, and those are code.
    inner_text = f"Bearer {MARKER}-f6"
    outer_text = f"https://u:{MARKER}-f7@h/?apikey={MARKER}-f8"
    try:
        try:
            raise KeyError(inner_text)
        except KeyError as inner:
            raise ValueError(outer_text) from inner
    except ValueError:
        log.exception("probe.error")
    logging.getLogger("aiohttp.client").error(
        "stdlib %s", "Authorization: Basic SECRET-f9", exc_info=ValueError("token=SECRET-f10")
    )
    lines = _assert_clean(log_stream.getvalue())
    assert [e["level"] for e in lines] == ["debug", "info", "warning", "error", "error"]
    assert lines[1]["headers"]["Accept"] == "x"
    exc = lines[3]["exception"]
    assert "KeyError" in exc
    assert "direct cause" in exc
    assert "ValueError" in exc


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("Authorization: Bearer SECRET-1", "Authorization: "),
        ("proxy-authorization=Basic SECRET-1", "proxy-authorization="),
        ("headers {'x-api-key': 'SECRET-1'}", "x-api-key"),
        ("Cookie: a=SECRET-1; b=SECRET-2", "Cookie: "),
        ("token=SECRET-1&model=x", "model=x"),
        ("bearer SECRET-1 rest", " rest"),
        ("GET http://u:SECRET-1@h/p?access_token=SECRET-2 failed", " failed"),
        ('{"client_secret": "SECRET-1"}', "client_secret"),
        ("MY_PASSWORD=SECRET-1", "MY_PASSWORD="),
    ],
)
def test_redact_text_scrubs_free_text(text: str, kept: str) -> None:
    """Free-text scrubbing: secrets go, the surrounding words stay."""
    out = redact_text(text)
    assert MARKER not in out
    assert kept in out


def test_redact_text_scrubs_hostile_input() -> None:
    """A long key-like word before a long secret: the secret goes, the word stays. (That
    the scrubber stays linear on such input is measured by bench/bench_redaction.py; a
    quadratic one would trip the suite's per-test timeout here.)"""
    text = ("k" * 200_000) + " token=" + ("a" * 200_000)
    out = redact_text(text)
    assert out.startswith("k" * 200_000 + " token=")
    assert "aaaa" not in out


def test_format_exception_redacted_withholds_parser_messages() -> None:
    """aiohttp parse errors quote raw request bytes: only the status survives."""
    from aiohttp.http_exceptions import LineTooLong

    raw = b"Bearer " + MARKER.encode() + b"-raw"  # no secret literal on the raise line
    try:
        raise LineTooLong(raw, 8190)
    except LineTooLong as exc:
        out = format_exception_redacted((type(exc), exc, exc.__traceback__))
    assert MARKER not in out
    assert "LineTooLong: 400" in out


# -- the log sink's field rules, against a reference written from them ------------------------
# redact_processor classifies each field name once and keeps the class (matching
# every name of a summary line against the secret patterns was most of its cost). The
# reference below applies the rules to every field afresh, as the module docstring states
# them; over generated lines, with and without a held value, the two must agree exactly.

_REF_SECRET_EXACT = {"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie"}
_REF_SECRET_EXACT |= {"set-cookie"}
_REF_SECRET_PARTS = ("key", "token", "secret", "password", "auth", "session")
_REF_NOT_SECRET = {"tool_call", "input_tokens", "output_tokens", "cached_tokens"}
_REF_NOT_SECRET |= {"reasoning_tokens", "output_tokens_per_s"}


def _ref_secret_name(name: str) -> bool:
    low = name.lower()
    return low in _REF_SECRET_EXACT or any(p in low for p in _REF_SECRET_PARTS)


def _ref_scrub(value: Any, held: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        for secret in held:
            value = value.replace(secret, "[redacted]")
        return value
    if isinstance(value, (list, tuple)):
        return [_ref_scrub(v, held) for v in value]
    if isinstance(value, dict):
        return {k: _ref_scrub(v, held) for k, v in value.items()}
    return value


def _ref_redact(fields: dict[str, Any], held: tuple[str, ...]) -> dict[str, Any]:
    from sse_proxy.obs.redact import redact_url

    out: dict[str, Any] = {}
    for key, value in fields.items():
        shown = value
        if key in ("event", "level", "timestamp", "stream_id", "event_index"):
            out[key] = value
            continue
        if isinstance(value, dict) and key.endswith("headers"):
            shown = {k: "[redacted]" if _ref_secret_name(k) else v for k, v in value.items()}
        elif key not in _REF_NOT_SECRET and _ref_secret_name(key):
            shown = "[redacted]"
        elif isinstance(value, str) and key in ("error", "reason", "message", "exception"):
            shown = redact_text(value)
        elif isinstance(value, str) and "://" in value:
            shown = redact_url(value)
        out[key] = _ref_scrub(shown, held) if held else shown
    return out


_HELD_VALUE = "HeLdVaLuE-q9"
_NAMES = st.sampled_from(
    [
        "event",
        "stream_id",
        "route",
        "ttfb_ms",
        "input_tokens",
        "tool_call",
        "api_key",
        "x_session_id",
        "Authorization",
        "headers",
        "upstream_headers",
        "auth_headers",
        "error",
        "reason",
        "message",
        "upstream_url",
        "text",
        "verdict",
        "Set-Cookie",
        "output_tokens_per_s",
        "client_secret",
        "passwordless",
        "level",
    ]
) | st.text(st.characters(codec="ascii", categories=["L", "N", "Pd", "Pc"]), max_size=12)
_TEXT = st.sampled_from(
    ["plain", "http://u:pw@h/p?token=t&x=1", "Bearer abc", f"x{_HELD_VALUE}y", "a://b"]
) | st.text(max_size=20)
_VALUES = st.recursive(
    st.none() | st.integers() | st.floats(allow_nan=False) | st.booleans() | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_NAMES, inner, max_size=3),
    max_leaves=6,
)


@pytest.fixture
def held_value() -> Iterator[str]:
    from sse_proxy.obs.redact import HELD

    saved = HELD._values
    HELD.hold(_HELD_VALUE)
    try:
        yield _HELD_VALUE
    finally:
        HELD._values = saved


@settings(max_examples=400, deadline=None)
@given(fields=st.dictionaries(_NAMES, _VALUES, max_size=12))
def test_field_rules_match_the_reference(fields: dict[str, Any]) -> None:
    from sse_proxy.obs.redact import HELD, redact_processor

    expected = _ref_redact(fields, HELD.values())
    assert redact_processor(None, "info", dict(fields)) == expected, fields


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(fields=st.dictionaries(_NAMES, _VALUES, max_size=12))
def test_field_rules_match_the_reference_with_a_held_value(
    held_value: str, fields: dict[str, Any]
) -> None:
    from sse_proxy.obs.redact import HELD, redact_processor

    expected = _ref_redact(fields, HELD.values())
    got = redact_processor(None, "info", dict(fields))
    assert got == expected, fields
    own = ("event", "level", "timestamp", "stream_id", "event_index")  # the pipeline's own
    shown = {k: v for k, v in got.items() if k not in own}
    assert held_value not in json.dumps(shown, default=str)


def test_names_past_the_cache_bound_are_still_classified() -> None:
    from sse_proxy.obs import redact

    for i in range(redact._MAX_NAMES + 10):  # fill both caches past their bound
        redact.redact_processor(None, "info", {f"field_{i}": 1})
        redact.is_secret_header(f"X-Header-{i}")
    fresh = {"brand_new_api_key": "SECRET-x", "brand_new_count": 3}
    assert redact.redact_processor(None, "info", fresh) == {
        "brand_new_api_key": "[redacted]",
        "brand_new_count": 3,
    }
    assert redact.is_secret_header("X-Brand-New-Token")
    assert not redact.is_secret_header("X-Brand-New-Accept")
