"""The monitor names the faults in time it sees, on real streams through a real `serve`.

The built-in mock upstream performs each fault (``X-Mock-Fault``, short durations as
``X-Mock-*`` headers) behind a ``sse-proxy serve`` subprocess with low thresholds: a stall
is time without text, whatever else arrives, and one kept alive by comments or pings says
so; a body that stays open after its terminal marker is logged once as ``sse.linger`` and
counted. Waits are on log lines and stream ends, never sleeps.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from sse_proxy.tools.mock_upstream import mock_upstream
from tests.support.cli import ServeProcess
from tests.support.logs import metric_sum
from tests.support.net import STREAM_ID, free_port

PATHS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}
FAST = {"X-Mock-Stall": "1.5", "X-Mock-Keepalive-Every": "0.2", "X-Mock-Linger": "1.5"}


async def _stream(
    session: aiohttp.ClientSession, base: str, dialect: str, fault: str
) -> tuple[str, bytes]:
    headers = {"X-Mock-Fault": fault, **FAST}
    body = {"model": "m", "stream": True}
    async with session.post(base + PATHS[dialect], json=body, headers=headers) as resp:
        assert resp.status == 200
        return resp.headers[STREAM_ID], await resp.read()


def _of(lines: list[dict[str, Any]], sid: str, event: str) -> list[dict[str, Any]]:
    return [e for e in lines if e.get("stream_id") == sid and e.get("event") == event]


@pytest.mark.asyncio
async def test_stalls_and_a_linger_are_named_on_real_streams_through_serve() -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    async with mock_upstream() as upstream:
        with ServeProcess(
            "--upstream",
            upstream,
            "--port",
            str(port),
            "--stall-threshold",
            "0.5",
            "--linger-threshold",
            "0.5",
            "--log-format",
            "json",
        ) as serve:
            await asyncio.to_thread(serve.wait_for, "proxy.started")
            async with aiohttp.ClientSession() as session:
                runs = await asyncio.gather(
                    _stream(session, base, "openai", "stall_keepalive"),
                    _stream(session, base, "anthropic", "stall_keepalive"),
                    _stream(session, base, "openai", "stall_silent"),
                    _stream(session, base, "openai", "linger"),
                )
                await asyncio.to_thread(serve.wait_for, "stream.summary", 4)
                async with session.get(base + "/_sse-proxy/metrics") as resp:
                    metrics = await resp.text()
            lines = serve.lines()
    (comments, _), (pings, _), (silent, _), (linger, linger_body) = runs
    for sid in (comments, pings, silent):
        (stall,) = _of(lines, sid, "sse.stall")
        (end,) = _of(lines, sid, "sse.stall_end")
        (summary,) = _of(lines, sid, "stream.summary")
        assert lines.index(stall) < lines.index(end) < lines.index(summary)  # while open
        assert stall["level"] == "warning"
        assert stall["gap_ms"] >= stall["threshold_ms"] == 500
        assert stall["after_event"] > 0  # some text came first
        assert summary["stalls"] == 1
        assert summary["verdict"] == "degraded"
        assert summary["verdict_reason"] == "sse.stall"
        assert summary["text_length"] > 0
    by_comments = _of(lines, comments, "sse.stall")[0]
    assert by_comments["kept_alive_by_comments"] is True
    assert by_comments["comments"] > 0
    assert by_comments["events"] == by_comments["pings"] == 0
    by_pings = _of(lines, pings, "sse.stall")[0]
    assert by_pings["kept_alive_by_comments"] is True  # Anthropic's ping events count too
    assert by_pings["pings"] > 0
    assert by_pings["events"] == by_pings["pings"]
    quiet = _of(lines, silent, "sse.stall")[0]
    assert quiet["kept_alive_by_comments"] is False
    assert quiet["comments"] == quiet["pings"] == quiet["events"] == 0
    kept = [_of(lines, sid, "stream.summary")[0]["stalls_kept_alive"] for sid, _ in runs]
    assert kept == [1, 1, 0, 0]

    (lingered,) = _of(lines, linger, "sse.linger")  # once, though it stayed open 1.5 s
    (summary,) = _of(lines, linger, "stream.summary")
    assert linger_body.endswith(b"data: [DONE]\n\n")
    assert lines.index(lingered) < lines.index(summary)
    assert lingered["level"] == "warning"
    assert lingered["open_ms"] >= lingered["threshold_ms"] == 500
    assert not _of(lines, linger, "sse.stall")  # a complete answer does not stall
    assert summary["linger_ms"] >= 1000
    assert summary["verdict"] == "degraded"
    assert summary["verdict_reason"] == "sse.linger"
    assert summary["alerts"] == {"sse.linger": 1}
    assert metric_sum(metrics, "sse_proxy_stalls_kept_alive_total") == 2
    assert metric_sum(metrics, "sse_proxy_alerts_total", event="sse.linger") == 1
    assert metric_sum(metrics, "sse_proxy_alerts_total", event="sse.stall") == 3


# -- the observer on its own: what is progress and what is not ------------------------------

_TEXT = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
_EMPTY = b'data: {"choices":[{"index":0,"delta":{}}]}\n\n'
_PING = b'event: ping\ndata: {"type": "ping"}\n\n'
_ANTHROPIC_TEXT = (
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"Hi"}}\n\n'
)


def _observer(dialect: str, **thresholds: float) -> tuple[Any, Any, Any, Any]:
    import structlog

    from sse_proxy.core import StreamReassembler
    from sse_proxy.obs.sink import AlertSink
    from sse_proxy.server.context import RequestContext
    from sse_proxy.server.timing import StreamObserver
    from sse_proxy.server.watchdog import Watchdog

    loop = asyncio.get_running_loop()
    r = StreamReassembler(dialect, emit_events=False, frame_ends=False, keep_text=False)
    sink = AlertSink(structlog.get_logger(), max_per_kind=10)
    obs = StreamObserver(
        r,
        sink,
        RequestContext(route="t"),
        stall_threshold=thresholds.get("stall", 0.0),
        linger_threshold=thresholds.get("linger", 0.0),
        now=loop.time,
    )
    dog = Watchdog(loop)
    obs.start(dog)
    return r, obs, loop, dog


async def _feed_until(
    r: Any, obs: Any, loop: Any, chunk: bytes, logs: Any, event: str, within: float = 5.0
) -> Any:
    """Feed ``chunk`` every 20 ms (a busy connection) until ``event`` is logged."""
    from tests.support.logs import named

    end = loop.time() + within
    while not named(logs, event):
        assert loop.time() < end, f"{event} not logged within {within} s"
        r.feed(chunk)
        obs.tick(loop.time())
        await asyncio.sleep(0.02)
    return named(logs, event)[-1]


@pytest.mark.asyncio
async def test_empty_deltas_are_no_progress_and_keep_no_stall_alive(logs: Any) -> None:
    """Events keep coming, none with text: a stall all the same, not one kept alive by
    comments (a client sees events); text ends it."""
    r, obs, loop, _ = _observer("openai", stall=0.15)
    r.feed(_TEXT)
    obs.tick(loop.time())
    stall = await _feed_until(r, obs, loop, _EMPTY, logs, "sse.stall")
    assert stall["events"] > 0
    assert stall["kept_alive_by_comments"] is False
    r.feed(_TEXT)
    obs.tick(loop.time())
    obs.stop()
    (end,) = [e for e in logs if e["event"] == "sse.stall_end"]
    assert end["gap_ms"] >= 150
    assert obs.stalls == 1
    assert obs.stalls_kept_alive == 0


@pytest.mark.asyncio
async def test_pings_and_comments_keep_a_stall_alive_and_say_so(logs: Any) -> None:
    r, obs, loop, _ = _observer("anthropic", stall=0.15)
    r.feed(_ANTHROPIC_TEXT)
    obs.tick(loop.time())
    stall = await _feed_until(r, obs, loop, _PING + b": keep-alive\n\n", logs, "sse.stall")
    obs.stop()
    assert stall["kept_alive_by_comments"] is True
    assert stall["pings"] == stall["events"] > 0
    assert stall["comments"] >= stall["pings"]
    assert obs.stalls_kept_alive == 1
    assert not [e for e in logs if e["event"] == "sse.stall_end"]  # pings end no stall


@pytest.mark.asyncio
async def test_a_body_open_after_its_terminal_marker_lingers_once_and_never_stalls(
    logs: Any,
) -> None:
    r, obs, loop, dog = _observer("openai", stall=0.1, linger=0.15)
    r.feed(_TEXT + b"data: [DONE]\n\n")
    obs.tick(loop.time())
    linger = await _feed_until(r, obs, loop, b": still here\n\n", logs, "sse.linger")
    assert dog.pending() == 0  # reported, the watch is done: no second report can come
    obs.stop()
    assert [e["event"] for e in logs] == ["sse.linger"]
    assert linger["open_ms"] >= linger["threshold_ms"] == 150
    fields = obs.summary_fields("upstream_eof", obs.opened, loop.time())
    assert fields["linger_ms"] >= 150
    assert fields["stalls"] == 0
