"""Traces: one OpenTelemetry span per proxied request, exported over OTLP/HTTP.

Optional (``pip install 'sse-proxy[otel]'``, then ``--otlp-endpoint URL``). The span
continues the client's W3C ``traceparent`` when it sent one, carries the OpenTelemetry
GenAI semantic-convention attributes (provider, request and response model, usage,
finish reasons) and the proxy's own (``sse_proxy.*``: stream id, verdict, timings), and
has one span event per alert. Spans are batched and exported off the event loop by the
SDK's worker thread; without an endpoint nothing here runs.
"""

from __future__ import annotations

import asyncio
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from sse_proxy import __version__
from sse_proxy.core.alerts import Alert
from sse_proxy.core.dialects.registry import DIALECTS
from sse_proxy.errors import ConfigError
from sse_proxy.obs.redact import mask_message_text, redact_text, scrub_held
from sse_proxy.server.context import RequestContext
from sse_proxy.settings import Config

__all__ = ["RequestSpan", "Tracing", "route_of"]


@lru_cache(maxsize=8)
def route_of(upstream: str) -> str:
    """The ``route`` field: the upstream's host (and port when not the default)."""
    parts = urlsplit(upstream)
    host = parts.hostname or ""
    if parts.port is not None:
        return f"{host}:{parts.port}"
    return host


def _attr(value: Any) -> Any:
    """An attribute value OpenTelemetry accepts (str, bool, int, float or lists of those),
    every string scrubbed of the values the proxy holds: a span leaves the process as a log
    line does (an upstream may quote a key back in a model name, an id, an error)."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, list | tuple):
        return [scrub_held(str(v)) for v in value]
    return scrub_held(str(value))


class RequestSpan:
    """The span of one proxied request; every method is safe to call in any order."""

    def __init__(
        self, span: Any, status_code: Any, path: str = "", *, keep_text: bool = False
    ) -> None:
        self._span = span
        self._path = path  # the request's: it tells Vertex AI from the Gemini API
        self._error = status_code.ERROR
        self._ended = False
        self._keep_text = keep_text  # --log-text: previews of message text as they are

    def response(self, status: int) -> None:
        self._span.set_attribute("http.response.status_code", status)

    def alert(self, alert: Alert) -> None:
        """An alert as a span event (the stall timer's too)."""
        fields = alert.fields()
        if not self._keep_text and isinstance(fields.get("preview"), str):
            fields["preview"] = mask_message_text(str(fields["preview"]))
        for key in ("message", "error"):  # free text from the upstream, as in the log lines
            if isinstance(fields.get(key), str):
                fields[key] = redact_text(str(fields[key]))
        attrs = {k: _attr(v) for k, v in fields.items() if v is not None}
        attrs["level"] = str(alert.level)
        self._span.add_event(alert.name, attributes=attrs)

    def failed(self, kind: str, status: int) -> None:
        self._span.set_attribute("error.type", kind)
        self._span.set_attribute("http.response.status_code", status)
        self._span.set_status(self._error, kind)

    def stream(self, fields: dict[str, Any]) -> None:
        """The stream's summary: GenAI attributes, the verdict and the timings."""
        span = self._span
        described = DIALECTS.get(str(fields.get("dialect")))
        provider = described.provider_for(self._path) if described is not None else None
        gen_ai = {
            "gen_ai.provider.name": provider.name if provider else None,
            "gen_ai.system": provider.system if provider else None,
            "gen_ai.operation.name": provider.operation if provider else None,
            "gen_ai.request.model": fields.get("request_model"),
            "gen_ai.response.model": fields.get("response_model"),
            "gen_ai.response.id": fields.get("response_id"),
            "gen_ai.response.finish_reasons": fields.get("finish_reasons") or None,
            "gen_ai.usage.input_tokens": fields.get("input_tokens"),
            "gen_ai.usage.output_tokens": fields.get("output_tokens"),
        }
        own = {
            f"sse_proxy.{k}": fields.get(k)
            for k in (
                "dialect",
                "verdict",
                "verdict_reason",
                "ended_by",
                "ttfb_ms",
                "ttft_ms",
                "gap_p99_ms",
                "gap_max_ms",
                "stalls",
                "events",
                "bytes",
                "cached_tokens",
                "reasoning_tokens",
            )
        }
        for key, value in (gen_ai | own).items():
            if value is not None:
                span.set_attribute(key, _attr(value))
        model = fields.get("model")
        if model:
            span.update_name(_attr(f"{gen_ai['gen_ai.operation.name'] or 'stream'} {model}"))
        if fields.get("verdict") == "broken":
            span.set_attribute("error.type", _attr(fields.get("verdict_reason") or "broken"))
            span.set_status(self._error, _attr(fields.get("verdict_reason")))

    def end(self) -> None:
        if not self._ended:
            self._ended = True
            self._span.end()


class Tracing:
    """The app's tracer: off (``start`` returns ``None``) unless an endpoint is set."""

    def __init__(self, endpoint: str = "", *, keep_text: bool = False) -> None:
        self.endpoint = endpoint
        self.keep_text = keep_text
        self._provider: Any = None
        self._tracer: Any = None
        if endpoint:
            self._setup(endpoint)

    @classmethod
    def for_config(cls, cfg: Config) -> Tracing:
        return cls(cfg.otlp_endpoint, keep_text=cfg.log_text)

    def _setup(self, endpoint: str) -> None:
        # Imported here, not at the top: opentelemetry is the optional ``otel`` extra.
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.trace import StatusCode
        except ImportError:
            raise ConfigError(
                "otlp_endpoint: tracing needs the otel extra (pip install 'sse-proxy[otel]')"
            ) from None

        resource = Resource.create({"service.name": "sse-proxy", "service.version": __version__})
        provider = TracerProvider(resource=resource)
        exporter = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces", timeout=5)
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=500))
        self._provider = provider
        self._tracer = provider.get_tracer("sse-proxy")
        self._status_code = StatusCode

    def start(
        self, request: web.Request, ctx: RequestContext, stream_id: str
    ) -> RequestSpan | None:
        """A span for this request, child of the client's traceparent if it sent one.

        A client without a trace gets a new one, and its id goes into ``ctx.trace_id``
        so that the log lines carry it too.
        """
        if self._tracer is None:
            return None
        # the optional extra, present once _setup ran (imported again: a dict lookup)
        from opentelemetry.trace import (
            NonRecordingSpan,
            SpanContext,
            SpanKind,
            TraceFlags,
            set_span_in_context,
        )

        parent = None
        if ctx.trace_id is not None and ctx.parent_span_id is not None:
            flags = int(ctx.traceparent[-2:], 16) if ctx.traceparent else 1
            remote = SpanContext(
                trace_id=int(ctx.trace_id, 16),
                span_id=int(ctx.parent_span_id, 16),
                is_remote=True,
                trace_flags=TraceFlags(flags & 1),
            )
            parent = set_span_in_context(NonRecordingSpan(remote))
        span = self._tracer.start_span(
            _attr(f"{request.method} {request.path}"),
            context=parent,
            kind=SpanKind.SERVER,
            attributes={
                "http.request.method": request.method,
                "url.path": _attr(request.path),
                "server.address": ctx.route,
                "sse_proxy.stream_id": stream_id,
            },
        )
        if ctx.client_request_id:
            span.set_attribute("sse_proxy.client_request_id", _attr(ctx.client_request_id))
        if ctx.trace_id is None:
            ctx.trace_id = format(span.get_span_context().trace_id, "032x")
        return RequestSpan(span, self._status_code, request.path, keep_text=self.keep_text)

    async def close(self, _app: web.Application | None = None) -> None:
        """Flush and stop off the event loop (the SDK's shutdown blocks on the export)."""
        if self._provider is not None:
            await asyncio.to_thread(self.shutdown)

    def shutdown(self) -> None:
        """Export what is batched, then stop the exporter (at proxy shutdown)."""
        if self._provider is not None:
            self._provider.shutdown()
            self._provider = None
            self._tracer = None
