"""`sse-proxy demo`: the whole product in one command, with no network and no API key.

Starts the built-in mock LLM upstream and the proxy in front of it on ephemeral loopback
ports, streams each dialect through the proxy, prints the reassembled text and what the
proxy logged, then runs every faulty variant and shows its alert firing.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any, TextIO

import aiohttp
import structlog
from aiohttp import web

from sse_proxy.core import StreamReassembler
from sse_proxy.core.dialects.registry import DIALECTS
from sse_proxy.names import DIALECT_BODIES, DIALECT_PATHS, MOCK_FAULT_HEADER, STREAM_ID_HEADER
from sse_proxy.obs.console import console_value
from sse_proxy.tools import fixtures
from sse_proxy.tools.stack import Stack, start_stack

__all__ = ["run_demo"]

_ENDPOINTS = tuple(
    (d.name, d.title, d.example_method, DIALECT_PATHS[d.name])
    for d in DIALECTS.values()
    if d.carries_text
)


@dataclass
class _Collector:
    """A structlog processor that keeps every log event of the demo's proxy for display."""

    events: list[dict[str, Any]] = field(default_factory=list)

    def __call__(
        self, _logger: Any, method: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        entry = dict(event_dict)
        entry.setdefault("level", method)
        self.events.append(entry)
        raise structlog.DropEvent

    def for_stream(self, stream_id: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("stream_id") == stream_id]


@dataclass
class _Fetched:
    body: bytes
    reads: list[bytes]
    stream_id: str


async def _fetch(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    fault: str | None,
    extra: dict[str, str] | None = None,
    body: dict[str, Any] | None = None,
) -> _Fetched:
    headers = {MOCK_FAULT_HEADER: fault} if fault else {}
    headers.update(extra or {})
    payload = body or {
        "model": "demo",
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    kwargs: dict[str, Any] = {"headers": headers}
    if method == "POST":
        kwargs["json"] = payload
    reads: list[bytes] = []
    async with session.request(method, url, **kwargs) as resp:
        async for chunk in resp.content.iter_any():
            reads.append(chunk)
        stream_id = resp.headers.get(STREAM_ID_HEADER, "")
    return _Fetched(b"".join(reads), reads, stream_id)


def _naive_losses(reads: list[bytes]) -> int:
    """U+FFFD a client decoding each read on its own would have shown."""
    return sum(r.decode("utf-8", "replace").count("\ufffd") for r in reads)


_ALERT_FIELDS = {
    "sse.replacement_char": ("cause", "byte_offset"),
    "sse.unterminated_frame": ("pending_bytes", "preview"),
    "sse.crlf_framing": ("counts", "mixed"),
    "sse.invalid_json": ("event_index", "error"),
    "sse.truncated": ("reason", "dialect"),
    "sse.oversized_frame": ("kind", "limit"),
    "sse.tool_call_invalid": ("index", "tool", "reason", "error"),
}


def _fields(event: dict[str, Any], names: tuple[str, ...]) -> str:
    """``name=value`` pairs with JSON values (``true``, ``{"lf":0}``), as the logs show them."""
    return " ".join(f"{n}={console_value(event.get(n))}" for n in names)


def _fmt_alert(event: dict[str, Any]) -> str:
    name = str(event.get("event"))
    names = _ALERT_FIELDS.get(name, ())
    return f"{name} [{event.get('level')}]" + (f" {_fields(event, names)}" if names else "")


def _indent(text: str, prefix: str = "    │ ") -> str:
    return "\n".join(prefix + line for line in text.split("\n"))


class _TraceReceiver:
    """A loopback OTLP/HTTP receiver, so the demo can show its own traces (needs [otel])."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.arrived = asyncio.Event()

    @staticmethod
    def available() -> bool:
        from importlib.util import find_spec

        try:
            return all(
                find_spec(name) is not None
                for name in ("opentelemetry.exporter.otlp.proto.http", "opentelemetry.proto")
            )
        except ModuleNotFoundError:  # a parent package is missing
            return False

    async def handle(self, request: web.Request) -> web.Response:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        msg = ExportTraceServiceRequest()
        msg.ParseFromString(await request.read())
        for rs in msg.resource_spans:
            for ss in rs.scope_spans:
                self.spans.extend(ss.spans)
        self.arrived.set()
        return web.Response(body=b"", content_type="application/x-protobuf")

    async def start(self) -> tuple[web.AppRunner, str]:
        app = web.Application()
        app.router.add_post("/v1/traces", self.handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"

    def find(self, stream_id: str) -> Any:
        for span in self.spans:
            for kv in span.attributes:
                if kv.key == "sse_proxy.stream_id" and kv.value.string_value == stream_id:
                    return span
        return None


_DEMO_REQUEST_ID = "demo-app-req-42"
_DEMO_TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def _find_by_request_id(
    session: aiohttp.ClientSession,
    proxy_url: str,
    collector: _Collector,
    receiver: _TraceReceiver | None,
    stack: Stack,
    w: Any,
) -> bool:
    """One failing stream, found from the app's own request id in logs, metrics and trace."""
    w(f"\nFind a failing stream from your app's request id (X-Request-ID: {_DEMO_REQUEST_ID}):\n")
    got = await _fetch(
        session,
        "POST",
        proxy_url + "/v1/chat/completions",
        "no_terminal",
        {"X-Request-ID": _DEMO_REQUEST_ID, "traceparent": _DEMO_TRACEPARENT},
    )
    for _ in range(100):  # the summary is logged as the stream ends, just after the client
        if any(e.get("event") == "stream.summary" for e in collector.for_stream(got.stream_id)):
            break
        await asyncio.sleep(0.01)
    found = [
        e
        for e in collector.events
        if e.get("client_request_id") == _DEMO_REQUEST_ID and e.get("event") == "stream.summary"
    ]
    ok = len(found) == 1
    if found:
        e = found[0]
        shown = ("verdict", "verdict_reason", "model", "ttft_ms", "trace_id")
        w(f"  logs:    stream.summary [{e.get('level')}] {_fields(e, shown)}\n")
    async with session.get(
        proxy_url + "/_sse-proxy/metrics", headers={"Accept": "application/openmetrics-text"}
    ) as resp:
        exposition = await resp.text()
    exemplar = next(
        (
            line
            for line in exposition.splitlines()
            if line.startswith("sse_proxy_streams_total") and _DEMO_REQUEST_ID in line
        ),
        None,
    )
    ok &= exemplar is not None
    w(f"  metrics: {exemplar or 'no exemplar found'}\n")
    if receiver is None:
        w("  trace:   install the otel extra (pip install 'sse-proxy[otel]') to see it\n")
        return ok
    await stack.stop_proxy()  # flushes the span batch
    span = None
    for _ in range(50):
        span = receiver.find(got.stream_id)
        if span is not None:
            break
        receiver.arrived.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(receiver.arrived.wait(), 0.2)
    if span is None:
        w("  trace:   no span received\n")
        return False
    events = ", ".join(ev.name for ev in span.events) or "none"
    w(
        f"  trace:   span {console_value(span.name)} trace_id={span.trace_id.hex()} "
        f"(the app's traceparent continued), events: {events}\n"
    )
    return ok and span.trace_id.hex() == _DEMO_TRACEPARENT[3:35]


async def _demo(mode: str, out: TextIO) -> int:
    collector = _Collector()
    structlog.configure(processors=[structlog.processors.add_log_level, collector])
    receiver = _TraceReceiver() if _TraceReceiver.available() else None
    receiver_runner, endpoint = await receiver.start() if receiver is not None else (None, "")
    stack = await start_stack(
        mock_seed=7,
        mode=mode,
        seed=7 if mode == "chaos" else None,
        shutdown_grace=10.0,
        otlp_endpoint=endpoint,
    )
    upstream_url, proxy_url = stack.upstream_url, stack.url
    ok = True
    w = out.write
    try:
        w(f"sse-proxy demo: mock LLM upstream at {upstream_url}, proxy at {proxy_url} ({mode})\n")
        w("The mock upstream cuts its writes at random: inside characters and inside frames.\n\n")
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            for dialect, title, method, path in _ENDPOINTS:
                # an MCP server streams the answer to a JSON-RPC request (a tool call)
                body = DIALECT_BODIES[dialect] if DIALECTS[dialect].rpc else None
                got = await _fetch(session, method, proxy_url + path, None, body=body)
                client = StreamReassembler(dialect)
                client.feed(got.body)
                client.close()
                text = client.text
                expected = fixtures.expected_text(dialect)
                exact = text == expected
                ok &= exact
                logged = collector.for_stream(got.stream_id)
                alerts = [e for e in logged if str(e.get("event", "")).startswith("sse.")]
                summary = next((e for e in logged if e.get("event") == "stream.summary"), {})
                w(f"▶ {title}  {method} {path}\n")
                w(
                    f"  {summary.get('events', '?')} events, {len(got.body)} bytes in "
                    f"{len(got.reads)} reads; a client decoding each read alone would have "
                    f"shown {_naive_losses(got.reads)} U+FFFD\n"
                )
                w(_indent(text) + "\n")
                verdict = "exact ✓" if exact else "DIFFERS from the fixture ✗"
                w(f"  reassembled text: {len(text)} characters, {verdict}")
                w(f"; alerts: {', '.join(_fmt_alert(a) for a in alerts) or 'none'}\n\n")

            w("Faulty upstream variants (X-Mock-Fault), each should raise its alert:\n")
            for fault in fixtures.FAULTS:
                got = await _fetch(session, "POST", proxy_url + DIALECT_PATHS["openai"], fault)
                logged = collector.for_stream(got.stream_id)
                fired = [e for e in logged if str(e.get("event", "")).startswith("sse.")]
                names = sorted({str(e["event"]) for e in fired})
                want = sorted(set(fixtures.expected_alerts("openai", fault)))
                hit = names == want
                ok &= hit
                mark = "✓" if hit else f"✗ (expected {', '.join(want)})"
                w(f"  {fault:<17} {mark} {fixtures.FAULTS[fault]}\n")
                for event in fired[:3]:
                    w(f"      {_fmt_alert(event)}\n")
                if len(fired) > 3:
                    w(f"      … and {len(fired) - 3} more\n")
            ok &= await _find_by_request_id(session, proxy_url, collector, receiver, stack, w)
        w(
            "\nEvery alert above is a JSON log line in production "
            "(`sse-proxy serve --upstream URL`).\n"
        )
        w(
            "Result: "
            + (
                "all streams reassembled exactly, every fault detected.\n"
                if ok
                else "MISMATCH, see ✗ above.\n"
            )
        )
    finally:
        await stack.stop()
        if receiver_runner is not None:
            await receiver_runner.cleanup()
        structlog.reset_defaults()
    return 0 if ok else 1


def run_demo(*, mode: str = "passthrough", out: TextIO | None = None) -> int:
    """Run the demo; 0 when every stream came out exact and every fault was detected."""
    stream = out if out is not None else sys.stdout
    if stream is sys.stdout and hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(encoding="utf-8")
    return asyncio.run(_demo(mode, stream))
