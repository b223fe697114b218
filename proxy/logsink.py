"""Where alerts become log lines: structlog, JSON lines by default.

The core returns alert values; this module is the only place that turns them into
``structlog`` calls, bound with ``stream_id`` and whatever the shell knows about the stream.
Alerts of one kind are rate-limited per stream (the first few in full, then only counted),
and the exact counts go into ``stream.summary``.
"""

from __future__ import annotations

import logging
import re
import sys
import uuid
from collections import Counter
from collections.abc import Mapping, MutableMapping
from typing import Any, TextIO

import orjson
import structlog

from proxy.core.alerts import Alert, Level

__all__ = [
    "AlertSink",
    "configure_logging",
    "get_logger",
    "new_stream_id",
    "redact_headers",
    "redact_url",
]

REDACTED = "[redacted]"
_SECRET_EXACT = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie", "set-cookie"}
)
_SECRET_PART = ("key", "token", "secret", "password", "auth", "session")
_QUERY_SECRET = re.compile(r"(?i)([?&][^=&#]*(?:key|token|secret|password|auth|sig)[^=&#]*=)[^&#]*")


def is_secret_header(name: str) -> bool:
    low = name.lower()
    return low in _SECRET_EXACT or any(part in low for part in _SECRET_PART)


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Header dict safe to log: secret-looking values replaced."""
    return {k: (REDACTED if is_secret_header(k) else v) for k, v in headers.items()}


def redact_url(url: str) -> str:
    """URL safe to log: credentials and key-like query values replaced."""
    url = re.sub(r"(?<=://)[^/@\s]+@", f"{REDACTED}@", url)
    return _QUERY_SECRET.sub(lambda m: m.group(1) + REDACTED, url)


def _redact_processor(
    _logger: Any, _name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Last line of defence: no secret-named field or header value leaves the process."""
    for key, value in list(event_dict.items()):
        if key in ("event", "level", "timestamp", "stream_id", "event_index"):
            continue
        if isinstance(value, Mapping) and key.endswith("headers"):
            event_dict[key] = redact_headers(value)
        elif is_secret_header(key) and key not in ("tool_call",):
            event_dict[key] = REDACTED
        elif isinstance(value, str) and "://" in value:
            event_dict[key] = redact_url(value)
    return event_dict


def _orjson_dumps(obj: Any, **_kw: Any) -> str:
    return orjson.dumps(obj, default=str).decode()


def configure_logging(
    *, fmt: str = "json", stream: TextIO | None = None, level: str = "info"
) -> None:
    """JSON lines (``fmt="json"``) or a readable console rendering (``fmt="console"``)."""
    out = stream if stream is not None else sys.stderr
    renderer: Any
    if fmt == "console":
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty())
    else:
        renderer = structlog.processors.JSONRenderer(serializer=_orjson_dumps)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _redact_processor,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )


def get_logger(**bind: Any) -> Any:
    return structlog.get_logger("sse-proxy").bind(**bind)


def new_stream_id() -> str:
    return uuid.uuid4().hex[:16]


class AlertSink:
    """Logs one stream's alerts, bound with its ``stream_id``; rate-limits floods."""

    def __init__(self, logger: Any, *, max_per_kind: int = 10) -> None:
        self.log = logger
        self.max_per_kind = max_per_kind
        self.counts: Counter[str] = Counter()
        self.suppressed: Counter[str] = Counter()
        self.max_level = Level.INFO

    @property
    def warned(self) -> bool:
        return self.max_level is Level.WARNING

    def emit(self, alert: Alert) -> None:
        name = alert.name
        level = alert.level
        if level is Level.WARNING:
            self.max_level = Level.WARNING
        self.counts[name] += 1
        if self.counts[name] > self.max_per_kind:
            self.suppressed[name] += 1
            return
        fields = alert.fields()
        if self.counts[name] == self.max_per_kind:
            fields["further_suppressed"] = True
        if level is Level.WARNING:
            self.log.warning(name, **fields)
        else:
            self.log.info(name, **fields)

    def emit_all(self, alerts: tuple[Alert, ...]) -> None:
        for alert in alerts:
            self.emit(alert)

    def summary(self, **fields: Any) -> None:
        """The closing ``stream.summary`` line; exact alert counts, suppressed ones too."""
        fields["alerts"] = dict(self.counts)
        if self.suppressed:
            fields["alerts_suppressed"] = dict(self.suppressed)
        self.log.info("stream.summary", **fields)
