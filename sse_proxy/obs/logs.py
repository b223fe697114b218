"""Log set-up: structlog, JSON lines by default, a readable console rendering on request.

The stdlib ``logging`` root (aiohttp's and asyncio's loggers) is routed through the same
redaction and rendering, so every line on the stream is one redacted object.
"""

from __future__ import annotations

import logging
import re
import sys
import uuid
from collections.abc import MutableMapping
from typing import Any, TextIO

import orjson
import structlog

from sse_proxy.obs.redact import format_exception_redacted, redact_foreign, redact_processor

__all__ = ["CONTEXT_FIELDS", "ConsoleLines", "configure_logging", "get_logger", "new_stream_id"]


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
            redact_processor,
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
                redact_foreign,
                redact_processor,
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
