"""Held secrets are values, not headers: an upstream that quotes the held key back, bare and
as ``Bearer ...``, in its headers, its model name, an error event, message text split across
reads, invalid JSON and an unterminated frame; a real `sse-proxy serve` (debug level,
recording, inspector with text, traces to a real OTLP receiver) must show the key nowhere:
not in a log line, a span, a recording, an inspector page or download, the metrics. Without
``--log-text`` no message text is in a preview, logged or traced.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
from collections.abc import Mapping
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from sse_proxy.obs.redact import HELD, HeldBytes
from sse_proxy.server.replies import json_error
from sse_proxy.server.routes import RouteTable
from sse_proxy.settings import Config
from tests.support.cli import ServeProcess
from tests.support.logs import configured_logging
from tests.support.net import STREAM_ID, free_port, running_app
from tests.support.otlp import Receiver, attrs
from tests.support.stack import StartProxy

TEXT = "PRIVATEWORDS"  # message text that must not be logged without --log-text


def _frame(event: str, data: Mapping[str, object]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def echo_app() -> web.Application:
    """An Anthropic-shaped upstream quoting back whatever Authorization it was sent."""

    async def messages(request: web.Request) -> web.StreamResponse:
        await request.read()
        auth = request.headers.get("Authorization", "")
        key = auth.split()[-1] if auth else "none"
        resp = web.StreamResponse(
            reason="OK",
            headers={
                "Content-Type": "text/event-stream",
                "X-Echo-Auth": auth,
                "X-Echo-Key": key,
                "request-id": f"req_{key}",
            },
        )
        await resp.prepare(request)
        start = {"type": "message_start", "message": {"id": f"msg_{key}", "model": key}}
        await resp.write(_frame("message_start", start))
        delta = _frame(
            "content_block_delta",
            {"type": "content_block_delta", "delta": {"type": "text_delta", "text": key}},
        )
        cut = delta.index(key.encode()) + len(key) // 2
        await resp.write(delta[:cut])  # the key straddles two reads
        await asyncio.sleep(0.05)
        await resp.write(delta[cut:])
        error = {"type": "error", "error": {"type": "auth", "message": f"bad {auth} ({key})"}}
        await resp.write(_frame("error", error))
        await resp.write(f'event: content_block_delta\ndata: {{"t": "{TEXT} {key}"\n\n'.encode())
        await resp.write(f'data: {{"{TEXT}": "{key}'.encode())  # never terminated
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/messages", messages)
    return app


@pytest.mark.asyncio
async def test_an_echoed_key_surfaces_nowhere(tmp_path: Path) -> None:
    key = "sk-echo-" + secrets.token_hex(12)
    record = tmp_path / "rec"
    receiver = Receiver()
    async with running_app(echo_app()) as upstream, running_app(receiver.app()) as otlp:
        port = free_port()
        with ServeProcess(
            "--upstream",
            upstream,
            "--port",
            str(port),
            "--upstream-header",
            "Authorization: Bearer ${ECHO_KEY}",
            "--drop-client-auth",
            "--log-level",
            "debug",
            "--record",
            str(record),
            "--ui",
            "--ui-text",
            "--otlp-endpoint",
            otlp,
            env={"ECHO_KEY": key},
        ) as serve:
            await asyncio.to_thread(serve.wait_for, "proxy.started")
            base = f"http://127.0.0.1:{port}"
            async with aiohttp.ClientSession() as session:
                async with session.post(base + "/v1/messages", json={"stream": True}) as resp:
                    body = await resp.read()
                    sid = resp.headers[STREAM_ID]
                    headers = dict(resp.headers)
                await asyncio.to_thread(serve.wait_for, "stream.summary")
                pages = []
                for path in (
                    "/ui",
                    "/ui/streams.json",
                    f"/ui/stream/{sid}",
                    f"/ui/stream/{sid}.ssrec",
                    "/metrics",
                    "/health",
                ):
                    async with session.get(f"{base}/_sse-proxy{path}") as page:
                        assert page.status == 200, path
                        pages.append((path, await page.text()))
            # off the loop: the OTLP receiver on it must answer the exports at shutdown
            log = await asyncio.to_thread(serve.stop)
        async with asyncio.timeout(10):
            while not receiver.spans:
                receiver.arrived.clear()
                await receiver.arrived.wait()
    # the upstream did quote it back (the client gets the bytes as sent: passthrough)
    assert key.encode() in body
    assert headers["X-Echo-Key"] == key
    # ... and the proxy shows it nowhere
    assert key not in log, [ln for ln in log.splitlines() if key in ln][:3]
    assert "sse.error_event" in log
    assert "sse.invalid_json" in log
    for path, text in pages:
        assert key not in text, path
    assert "sse_proxy_streams_total" in dict(pages)["/metrics"]
    (file,) = record.glob("*.ssrec")
    raw = file.read_text()
    assert key not in raw
    reads = [json.loads(line) for line in raw.splitlines()[1:] if '"data"' in line]
    recorded = b"".join(base64.b64decode(r["data"]) for r in reads)
    assert key.encode() not in recorded
    assert len(recorded) == len(body)  # masked at the same length
    assert recorded.count(b"*" * len(key)) >= 4
    spans = repr(
        [
            (s.name, attrs(s.attributes), [(e.name, attrs(e.attributes)) for e in s.events])
            for s in receiver.spans
        ]
    )
    assert key not in spans
    assert "sse.error_event" in spans
    # no message text without --log-text: previews are shapes, in the log and the spans
    assert TEXT not in log
    assert TEXT not in spans
    lines = [json.loads(ln) for ln in log.splitlines() if ln.strip()]
    (open_frame,) = [e for e in lines if e["event"] == "sse.unterminated_frame"]
    assert open_frame["preview"].startswith('data: {"*": "*'), open_frame


@pytest.mark.asyncio
async def test_with_log_text_the_text_is_logged_but_not_the_key(
    start: StartProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--log-text logs the message text (the summary's ``text``, the previews) and still
    never the key the text quotes (the real log pipeline, rendered to JSON lines)."""
    key = "sk-echo-" + secrets.token_hex(12)
    monkeypatch.setenv("ECHO_KEY_2", key)
    with configured_logging("json") as stream:
        async with running_app(echo_app()) as upstream:
            url = await start(
                upstream,
                log_text=True,
                upstream_headers=(("Authorization", "Bearer ${ECHO_KEY_2}"),),
            )
            async with (
                aiohttp.ClientSession() as session,
                session.post(url + "/v1/messages", json={"stream": True}) as resp,
            ):
                assert key.encode() in await resp.read()
                sid = resp.headers[STREAM_ID]
            for _ in range(300):
                if (
                    f'"stream_id":"{sid}"' in stream.getvalue()
                    and "stream.summary" in stream.getvalue()
                ):
                    break
                await asyncio.sleep(0.01)
        text = stream.getvalue()
    lines = [json.loads(ln) for ln in text.splitlines() if ln.strip()]
    (summary,) = [e for e in lines if e["event"] == "stream.summary"]
    assert summary["text"] == "[redacted]"
    assert TEXT in text  # the previews keep the text with --log-text
    assert key not in text


def test_each_substituted_value_is_held(tmp_path: Path) -> None:
    """The bare ${ENV} and ${file:} values are held, not only the assembled header."""
    key_file = tmp_path / "k"
    key_file.write_text("file-held-value-0042\n")
    RouteTable.from_config(
        Config(
            upstream="http://127.0.0.1:9",
            upstream_headers=(
                ("Authorization", "Bearer ${HELD_TEST_ENV}"),
                ("X-Other", "pre-${file:" + str(key_file) + "}-post"),
            ),
        ),
        env={"HELD_TEST_ENV": "env-held-value-0041"},
    )
    held = set(HELD.values())
    assert {"env-held-value-0041", "file-held-value-0042"} <= held
    assert {"Bearer env-held-value-0041", "pre-file-held-value-0042-post"} <= held
    body = json_error(502, "x", "upstream said env-held-value-0041", None).text or ""
    assert "env-held-value-0041" not in body


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 64])
def test_held_bytes_masked_at_every_cut(size: int) -> None:
    """The stream scrubber masks a value however the stream is cut (every cut point of a
    stream holding it twice, split into reads of ``size`` bytes from each offset), keeps
    every read's length and releases every byte exactly once."""
    secret = b"sk-0123456789"
    stream = b"x" * 5 + secret + b"yy" + b"Bearer " + secret + b"z" * 3
    bearer = b"Bearer " + secret  # the longer value goes whole
    expected = stream.replace(bearer, b"*" * len(bearer)).replace(secret, b"*" * len(secret))
    for first in range(len(stream)):
        reads = [stream[:first]] + [stream[i : i + size] for i in range(first, len(stream), size)]
        scrubber = HeldBytes([secret, bearer])
        out: list[tuple[object, bytes]] = []
        for n, read in enumerate(reads):
            out += scrubber.feed(read, n)
        out += scrubber.finish()
        assert [tag for tag, _ in out] == list(range(len(reads))), first
        assert [len(data) for _, data in out] == [len(r) for r in reads], first
        assert b"".join(data for _, data in out) == expected, first


@pytest.mark.asyncio
async def test_a_key_cut_by_a_truncated_recordings_gap_is_masked_on_both_sides(
    start: StartProxy, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A stream over ``record_max_stream_bytes`` is recorded as its head and tail; a held
    key the left-out middle cuts in two is masked in what is kept of it, on either side
    (one unterminated frame: no frame end to cut the gap at instead)."""
    key = "sk-gap-" + secrets.token_hex(12)
    size, reads = 1000, 10
    body = bytearray(b"data: " + b"z" * (size * reads - 6))
    for at in (1990, 7990, 500):  # across the head's end, the tail's start, in the head
        body[at : at + len(key)] = key.encode()

    async def stream(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(reads):
            await resp.write(bytes(body[i * size : (i + 1) * size]))
            await asyncio.sleep(0.02)  # one read each
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", stream)
    saved = HELD._values
    monkeypatch.setenv("GAP_KEY", key)
    try:
        async with running_app(app) as upstream:
            url = await start(
                upstream,
                upstream_headers=(("X-Key", "${GAP_KEY}"),),
                record_dir=str(tmp_path),
                record_max_stream_bytes=4096,
            )
            async with (
                aiohttp.ClientSession() as session,
                session.post(url + "/v1/chat/completions", json={}) as resp,
            ):
                assert await resp.read() == bytes(body)
        # the recorder's thread has written it once the proxy is stopped
        await start.stop_all()
    finally:
        HELD._values = saved
    (path,) = tmp_path.iterdir()  # noqa: ASYNC240 - the test's own small folder
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["truncated"]["kept"] == 4000
    recorded = b"".join(base64.b64decode(x["data"]) for x in lines if "data" in x)
    assert key.encode() not in recorded
    assert key[:10].encode() not in recorded  # the part before the gap
    assert key[-10:].encode() not in recorded  # the part after it
    assert recorded.count(b"*") >= 2 * 10 + len(key)
