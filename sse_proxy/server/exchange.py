"""One proxied request's exchange, built once at admission and passed whole.

httpcore hands one ``Request`` (with its ``extensions``) down every layer; this is the
shell's equivalent: the request, the route and upstream URL it was admitted to, the chaos
spec, the client's context, the trace span and the logger bound for it. Nothing below
admission takes a request apart into a dozen parameters again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web
from yarl import URL

from sse_proxy.config import Config
from sse_proxy.obs.metrics import Metrics
from sse_proxy.obs.redact import redact_url
from sse_proxy.rechunk.spec import ChaosSpec
from sse_proxy.server.context import RequestContext
from sse_proxy.server.delivery import Delivery
from sse_proxy.server.routes import Route
from sse_proxy.server.tracing import RequestSpan

__all__ = ["Exchange", "RequestContext"]


@dataclass(slots=True, kw_only=True)
class Exchange:
    """One request, from its admission to its last log line."""

    request: web.Request
    cfg: Config
    metrics: Metrics
    stream_id: str
    log: Any
    """Bound once with ``stream_id``, ``method`` and ``path``: every line of the request
    starts from it (a stream's lines add what the response says)."""
    route: Route
    url: URL
    """The upstream URL: the route's upstream joined with the request's path and query."""
    spec: ChaosSpec | None
    """The chaos spec, from the request's header or the server's chaos mode."""
    ctx: RequestContext
    upstream_context: bool = False
    """Whether the ``upstream.*`` lines carry the request's context (HTTP: yes)."""
    _upstream_log: Any = None
    span: RequestSpan | None = None
    delivery: Delivery | None = None
    """Chaos mode: how the stream's cuts reach the client (set when its relay starts)."""
    started: float = 0.0
    """When the upstream request was opened (the monotonic clock): durations and TTFB."""

    @property
    def upstream_log(self) -> Any:
        """:attr:`log` with the route and the upstream URL (and, on HTTP, the request's
        context): the ``upstream.*`` lines. Bound when first asked for: most streams log
        no such line, and binding (a redacted URL, two context copies) is per request."""
        log = self._upstream_log
        if log is None:
            log = self.log.bind(route=self.route.name, upstream_url=redact_url(str(self.url)))
            if self.upstream_context:
                log = log.bind(**self.ctx.fields())
            self._upstream_log = log
        return log

    @property
    def mode(self) -> str:
        """The mode asked for: ``chaos`` with a spec, else the server's."""
        return "chaos" if self.spec is not None else self.cfg.mode
