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
import traceback
import uuid
from collections import Counter
from collections.abc import Mapping, MutableMapping
from types import TracebackType
from typing import Any, TextIO

import orjson
import structlog

from proxy.core.alerts import Alert, Level

__all__ = [
    "AlertSink",
    "configure_logging",
    "format_exception_redacted",
    "get_logger",
    "hold_secret",
    "new_stream_id",
    "redact_headers",
    "redact_text",
    "redact_url",
    "scrub_held",
]

REDACTED = "[redacted]"
_SECRET_EXACT = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie", "set-cookie"}
)
_SECRET_PART = ("key", "token", "secret", "password", "auth", "session")
_QUERY_SECRET = re.compile(
    r"(?i)([?&][^=&#]*(?:key|token|secret|password|auth|sig)[^=&#]*=)[^&#\s\"]*"
)


# The proxy's own log fields whose names merely look secret (token counts, not tokens).
_NOT_SECRET = frozenset(
    {
        "tool_call",
        "input_tokens",
        "output_tokens",
        "cached_tokens",
        "reasoning_tokens",
        "output_tokens_per_s",
    }
)
# Values the proxy itself holds (route headers with keys): never in a log line, whatever
# the field is called. Registered at startup by the route table.
_HELD: set[str] = set()


def hold_secret(value: str) -> None:
    """Never log ``value``: every log line has it replaced, in any field, from now on."""
    if len(value) >= 4:  # a shorter one would blank out ordinary words
        _HELD.add(value)


def scrub_held(text: str) -> str:
    """``text`` with every held value replaced (for fields built before the log sink)."""
    return _scrub_held(text) if _HELD else text


def _scrub_held(text: str) -> str:
    for secret in _HELD:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def is_secret_header(name: str) -> bool:
    low = name.lower()
    return low in _SECRET_EXACT or any(part in low for part in _SECRET_PART)


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Header dict safe to log: secret-looking values replaced."""
    return {k: (REDACTED if is_secret_header(k) else v) for k, v in headers.items()}


def redact_url(url: str) -> str:
    """URL safe to log: credentials and key-like query values replaced."""
    url = re.sub(r"(?<=://)[^/@\s]+@", f"{REDACTED}@", url)
    if _HELD:
        url = _scrub_held(url)
    return _QUERY_SECRET.sub(lambda m: m.group(1) + REDACTED, url)


# Free text (exception messages, foreign log lines): credentials after an auth scheme, the
# value of a header-like `name: value` / `name=value` whose name looks secret, and URLs.
# Bounded repeats only: this runs on attacker-influenced text and must stay linear.
_TEXT_AUTH_SCHEME = re.compile(r"(?i)\b(bearer|basic|digest|negotiate)(\s+)[^\s'\",;]+")
_TEXT_WHOLE_LINE = re.compile(
    r"(?i)\b((?:proxy-)?authorization|(?:set-)?cookie)(['\"]?[ \t]*[:=][ \t]*)[^\r\n'\"]+"
)
_TEXT_NAMED = re.compile(
    r"(?i)\b([\w-]{0,40}(?:key|token|secret|passw|auth|session)[\w-]{0,40})"
    r"(['\"]?[ \t]*[:=][ \t]*['\"]?)[^\s'\",;&]+"
)


def redact_text(text: str) -> str:
    """Free text safe to log, best effort: URLs, auth schemes and secret-named values."""
    text = redact_url(text)
    text = _TEXT_WHOLE_LINE.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    text = _TEXT_AUTH_SCHEME.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    return _TEXT_NAMED.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)


def _exception_message(exc: BaseException) -> str:
    from aiohttp.http_exceptions import HttpProcessingError

    if isinstance(exc, HttpProcessingError):
        # A malformed request: aiohttp quotes the client's raw bytes (headers, query, all of
        # it) in the message, so only the status survives.
        return f"{exc.code} (message withheld: it quotes the request's raw bytes)"
    try:
        return redact_text(str(exc))
    except Exception:  # noqa: BLE001 - a broken __str__ must not break logging
        return "<unprintable>"


def format_exception_redacted(
    exc_info: tuple[type[BaseException], BaseException, TracebackType | None],
) -> str:
    """A traceback with every exception message in the chain redacted.

    Frames (file, line, source line) are code, never data; only the messages can carry a
    header value or a URL, so those go through :func:`redact_text`, and aiohttp's HTTP
    parse errors lose their message entirely.
    """
    parts: list[str] = []
    seen: set[int] = set()

    def walk(exc: BaseException) -> None:
        seen.add(id(exc))
        cause, context = exc.__cause__, exc.__context__
        if cause is not None and id(cause) not in seen:
            walk(cause)
            parts.append(
                "\nThe above exception was the direct cause of the following exception:\n\n"
            )
        elif context is not None and not exc.__suppress_context__ and id(context) not in seen:
            walk(context)
            parts.append(
                "\nDuring handling of the above exception, another exception occurred:\n\n"
            )
        if exc.__traceback__ is not None:
            parts.append("Traceback (most recent call last):\n")
            parts.extend(traceback.format_tb(exc.__traceback__))
        name = type(exc).__qualname__
        module = type(exc).__module__
        if module not in ("builtins", "__main__"):
            name = f"{module}.{name}"
        parts.append(f"{name}: {_exception_message(exc)}")

    walk(exc_info[1])
    return "".join(parts)


# Fields that carry exception messages, which may quote raw bytes from either side.
_FREE_TEXT_FIELDS = frozenset({"error", "reason", "message", "exception"})


def _redact_processor(
    _logger: Any, _name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Last line of defence: no secret-named field or header value leaves the process."""
    for key, value in list(event_dict.items()):
        if key in ("event", "level", "timestamp", "stream_id", "event_index"):
            continue
        if isinstance(value, Mapping) and key.endswith("headers"):
            event_dict[key] = redact_headers(value)
        elif key not in _NOT_SECRET and is_secret_header(key):
            event_dict[key] = REDACTED
        elif isinstance(value, str) and key in _FREE_TEXT_FIELDS:
            event_dict[key] = redact_text(value)
        elif isinstance(value, str) and "://" in value:
            event_dict[key] = redact_url(value)
        if _HELD:  # whatever the field and whatever was redacted above: held values go
            event_dict[key] = _scrub_nested(event_dict[key])
    return event_dict


def _scrub_nested(value: Any) -> Any:
    if isinstance(value, str):
        return _scrub_held(value)
    if isinstance(value, (list, tuple)):
        return [_scrub_nested(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _scrub_nested(v) for k, v in value.items()}
    return value


def _redact_foreign(
    _logger: Any, _name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """A stdlib (aiohttp, asyncio) line: its message is free text, redact it as such."""
    event = event_dict.get("event")
    if isinstance(event, str):
        event_dict["event"] = redact_text(event)
    return event_dict


class _StdlibHandler(logging.Handler):
    """Stdlib records rendered by structlog, written where structlog's lines go.

    Without a stream it writes to ``sys.stderr`` as it is at each call. If rendering a
    record fails, a fixed line is written instead: ``logging``'s own error report would
    print the record's raw message and arguments.
    """

    def __init__(self, out: TextIO | None) -> None:
        super().__init__()
        self.out = out

    def emit(self, record: logging.LogRecord) -> None:
        stream = self.out if self.out is not None else sys.stderr
        try:
            line = self.format(record)
        except Exception:  # noqa: BLE001 - never let logging's own report print the record
            line = _orjson_dumps(
                {"event": "log.unrenderable", "logger": record.name, "level": "error"}
            )
        try:
            stream.write(line + "\n")
            stream.flush()
        except (OSError, ValueError):  # closed stream: nowhere left to say it
            pass


_STDLIB_HANDLER: _StdlibHandler | None = None


def _orjson_dumps(obj: Any, **_kw: Any) -> str:
    return orjson.dumps(obj, default=str).decode()


def configure_logging(
    *, fmt: str = "json", stream: TextIO | None = None, level: str = "info"
) -> None:
    """JSON lines (``fmt="json"``) or a readable console rendering (``fmt="console"``).

    The stdlib ``logging`` root (aiohttp's and asyncio's loggers, tracebacks of unexpected
    handler errors) is routed through the same redaction and rendering, so every line on
    the stream is one redacted JSON object; tracebacks have their messages redacted.
    """
    global _STDLIB_HANDLER  # noqa: PLW0603 - one handler, replaced on reconfiguration
    out = stream if stream is not None else sys.stderr
    renderer: Any
    if fmt == "console":
        renderer = ConsoleLines()
        exceptions: Any = _keep_event
    else:
        renderer = structlog.processors.JSONRenderer(serializer=_orjson_dumps)
        exceptions = structlog.processors.ExceptionRenderer(format_exception_redacted)
    numeric_level = logging.getLevelNamesMapping()[level.upper()]
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _redact_processor,
            exceptions,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric_level),
        # One write() per line: worker processes share stderr, and print()'s two writes
        # (text, then newline) on an unbuffered stream let their lines interleave.
        logger_factory=structlog.WriteLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
    handler = _StdlibHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                structlog.processors.add_log_level,
                structlog.stdlib.add_logger_name,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                _redact_foreign,
                _redact_processor,
            ],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                exceptions,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    if _STDLIB_HANDLER is not None:
        root.removeHandler(_STDLIB_HANDLER)
    root.addHandler(handler)
    root.setLevel(numeric_level)
    _STDLIB_HANDLER = handler


def _keep_event(
    _logger: Any, _name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    return event_dict


# Fields the shell binds to every line of a stream: the console shows them after the
# line's own fields, so an alert reads "what happened" before "to which request".
CONTEXT_FIELDS = frozenset(
    {
        "method",
        "path",
        "upstream_status",
        "upstream_request_id",
        "mode",
        "chaos",
        "client_request_id",
        "trace_id",
        "traceparent",
        "route",
        "model",
        "request_model",
        "response_model",
        "response_id",
        "pid",
        "logger",
    }
)
_BARE = re.compile(r"[^\s\"'=\\]{1,80}")


def _console_value(value: Any, width: int = 80) -> str:
    """One value for the console: bare word, JSON for the rest, never a Python repr."""
    if isinstance(value, bool) or value is None:
        return "true" if value is True else "false" if value is False else "null"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str) and _BARE.fullmatch(value):
        return value
    text = orjson.dumps(value, default=str).decode()
    return text if len(text) <= width else text[: width - 1] + "…"


class ConsoleLines:
    """A readable rendering: ``event stream_id=… level=…``, the line's own fields, then the
    stream's context and the time; long values are cut and long lines wrapped (at most
    ``width`` characters, continuation lines indented), so no line runs for screens.
    """

    def __init__(self, width: int = 160) -> None:
        self.width = width

    def __call__(self, _logger: Any, _name: str, event_dict: MutableMapping[str, Any]) -> str:
        d = dict(event_dict)
        exc_info = d.pop("exc_info", None)
        exception = d.pop("exception", None)
        event = str(d.pop("event", ""))
        level = d.pop("level", None)
        timestamp = d.pop("timestamp", None)
        head = [event]
        if "stream_id" in d:
            head.append(f"stream_id={d.pop('stream_id')}")
        if level is not None:
            head.append(f"level={level}")
        own = [(k, v) for k, v in d.items() if k not in CONTEXT_FIELDS and v is not None]
        ctx = [(k, v) for k, v in d.items() if k in CONTEXT_FIELDS and v is not None]
        tokens = head + [f"{k}={_console_value(v)}" for k, v in (*own, *ctx)]
        if isinstance(timestamp, str):
            tokens.append(f"at={timestamp[11:23]}")
        lines: list[str] = []
        line = ""
        for token in tokens:
            if line and len(line) + 1 + len(token) > self.width:
                lines.append(line)
                line = "    " + token
            else:
                line = f"{line} {token}" if line else token
        lines.append(line)
        text = "\n".join(lines)
        if exc_info:
            info = exc_info if isinstance(exc_info, tuple) else sys.exc_info()
            if isinstance(exc_info, BaseException):
                info = (type(exc_info), exc_info, exc_info.__traceback__)
            if info[1] is not None:
                text += "\n" + format_exception_redacted(info)
        elif isinstance(exception, str):
            text += "\n" + exception
        return text


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
        self.lines: Counter[str] = Counter()
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
        # an alert may stand for several occurrences (a counted U+FFFD flood): the counts
        # are of occurrences, the rate limit is of log lines
        weight = getattr(alert, "count", 1)
        self.counts[name] += weight
        self.lines[name] += 1
        if self.lines[name] > self.max_per_kind:
            self.suppressed[name] += weight
            return
        fields = alert.fields()
        if self.lines[name] == self.max_per_kind:
            fields["further_suppressed"] = True
        if level is Level.WARNING:
            self.log.warning(name, **fields)
        else:
            self.log.info(name, **fields)

    def emit_all(self, alerts: tuple[Alert, ...]) -> None:
        for alert in alerts:
            self.emit(alert)

    def summary(self, *, level: str = "info", **fields: Any) -> None:
        """The closing ``stream.summary`` line; exact alert counts, suppressed ones too.

        ``level`` is ``warning`` for a stream that went wrong, so that filtering on
        ``level >= warning`` finds every bad stream.
        """
        fields["alerts"] = dict(self.counts)
        if self.suppressed:
            fields["alerts_suppressed"] = dict(self.suppressed)
        if level == "warning":
            self.log.warning("stream.summary", **fields)
        else:
            self.log.info("stream.summary", **fields)
