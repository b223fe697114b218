"""A real OTLP/HTTP receiver on loopback: the traces and metrics the proxy's exporters post,
decoded with the official ``opentelemetry-proto`` messages."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

__all__ = ["Receiver", "attrs", "value"]


class Receiver:
    """An OTLP/HTTP receiver: every span posted to /v1/traces and every metric posted to
    /v1/metrics (with the resource it came from), decoded."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.metrics: list[tuple[dict[str, Any], Any]] = []
        """(resource attributes, the Metric message) for each metric of each export."""
        self.content_types: list[str] = []
        self.arrived = asyncio.Event()

    async def handle(self, request: web.Request) -> web.Response:
        self.content_types.append(request.headers.get("Content-Type", ""))
        msg = ExportTraceServiceRequest()
        msg.ParseFromString(await request.read())
        for rs in msg.resource_spans:
            for ss in rs.scope_spans:
                self.spans.extend(ss.spans)
        self.arrived.set()
        return web.Response(body=b"", content_type="application/x-protobuf")

    async def handle_metrics(self, request: web.Request) -> web.Response:
        self.content_types.append(request.headers.get("Content-Type", ""))
        msg = ExportMetricsServiceRequest()
        msg.ParseFromString(await request.read())
        for rm in msg.resource_metrics:
            resource = attrs(rm.resource.attributes)
            for sm in rm.scope_metrics:
                self.metrics.extend((resource, m) for m in sm.metrics)
        self.arrived.set()
        return web.Response(body=b"", content_type="application/x-protobuf")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/traces", self.handle)
        app.router.add_post("/v1/metrics", self.handle_metrics)
        return app


def value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    assert kind is not None
    return getattr(v, kind)


def attrs(items: Any) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in items}
