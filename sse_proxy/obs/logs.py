"""Log set-up: structlog; JSON lines, or human lines when a person reads the terminal.

``auto`` (the default) renders human lines (:mod:`sse_proxy.obs.console`) when the log
stream is a terminal and JSON lines otherwise: files and pipes always get JSON. The
stdlib ``logging`` root (aiohttp's and asyncio's loggers) is routed through the same
redaction and rendering, so every line on the stream is one redacted object.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any, TextIO

import orjson
import structlog

from sse_proxy.obs.console import (
    CONTEXT_FIELDS,
    ConsoleLines,
    console_value,
    is_terminal,
    use_color,
)
from sse_proxy.obs.redact import format_exception_redacted, redact_foreign, redact_processor

__all__ = [
    "CONTEXT_FIELDS",
    "ConsoleLines",
    "configure_logging",
    "console_value",
    "get_logger",
    "log_this_thread",
    "new_stream_id",
    "resolve_format",
    "write_line",
]


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


def resolve_format(fmt: str, stream: Any) -> str:
    """``json`` or ``console``: ``auto`` is console on a terminal, JSON anywhere else."""
    if fmt == "auto":
        return "console" if is_terminal(stream) else "json"
    return fmt


class UtcTimestamp:
    """The ``timestamp`` field as structlog's ``TimeStamper(fmt="iso", utc=True)`` writes
    it (``2026-12-03T15:47:22.123456Z``; no fraction on a whole second, as isoformat()),
    with the part up to the second formatted once a second, since isoformat() with a time
    zone, then replace(), on every line is a visible part of the line's cost."""

    __slots__ = ("_clock", "_second")

    def __init__(self, clock: Callable[[], int] = time.time_ns) -> None:
        self._clock = clock
        self._second: tuple[int, str] = (-1, "")
        """The last second stamped and its text (one tuple: threads see both or neither)."""

    def __call__(
        self, _logger: Any, _name: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        second, nanos = divmod(self._clock(), 1_000_000_000)
        last, text = self._second
        if second != last:
            text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = (second, text)
        micros = nanos // 1000
        event_dict["timestamp"] = f"{text}.{micros:06d}Z" if micros else f"{text}Z"
        return event_dict


class _Exceptions:
    """structlog's ``ExceptionRenderer``, asked only when a line carries ``exc_info`` (it
    does nothing otherwise, at the cost of a few calls on every line)."""

    __slots__ = ("_render",)

    def __init__(self) -> None:
        self._render = structlog.processors.ExceptionRenderer(format_exception_redacted)

    def __call__(
        self, logger: Any, name: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        if "exc_info" not in event_dict:
            return event_dict
        return self._render(logger, name, event_dict)


def _rendering(fmt: str, out: Any, env: Mapping[str, str] | None) -> tuple[Any, Any]:
    """The exception processor and the renderer of a format on a stream."""
    if resolve_format(fmt, out) == "console":
        renderer = ConsoleLines(color=use_color(out, os.environ if env is None else env))
        return _keep_event, renderer
    return _Exceptions(), structlog.processors.JSONRenderer(serializer=_orjson_dumps)


def _processors(exceptions: Any, renderer: Any) -> list[Any]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        UtcTimestamp(),
        redact_processor,
        exceptions,
        renderer,
    ]


def configure_logging(
    *,
    fmt: str = "auto",
    stream: TextIO | None = None,
    level: str = "info",
    env: Mapping[str, str] | None = None,
) -> None:
    """JSON lines (``json``), human lines (``console``), or ``auto``: human on a terminal.

    The stdlib ``logging`` root (aiohttp's and asyncio's loggers, tracebacks of unexpected
    handler errors) is routed through the same redaction and rendering, so every line on
    the stream is one redacted object; tracebacks have their messages redacted. Colour
    follows the stream and ``NO_COLOR``/``FORCE_COLOR`` in ``env`` (default: os.environ).
    """
    global _STDLIB_HANDLER  # noqa: PLW0603 - one handler, replaced on reconfiguration
    out = stream if stream is not None else sys.stderr
    exceptions, renderer = _rendering(fmt, out, env)
    numeric_level = logging.getLevelNamesMapping()[level.upper()]
    structlog.configure(
        processors=_processors(exceptions, renderer),
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
                UtcTimestamp(),
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


_CONFIGURED_BASE: list[Any] = []
"""The configured logger, resolved once per configuration: ``[config parts, logger]``."""


def _configured_base() -> Any:
    """structlog's logger for the current configuration, resolved once, not per request
    (a lazy proxy's ``bind`` looks the configuration up and builds a new logger through
    the factory every time; ``cache_logger_on_first_use`` would outlive a
    reconfiguration, this does not: the parts are compared by identity)."""
    cfg = structlog.get_config()
    parts = (cfg["processors"], cfg["logger_factory"], cfg["wrapper_class"], cfg["context_class"])
    if _CONFIGURED_BASE:
        was = _CONFIGURED_BASE[0]  # (compared inline: a generator costs more than the bind)
        if was[0] is parts[0] and was[1] is parts[1] and was[2] is parts[2] and was[3] is parts[3]:
            return _CONFIGURED_BASE[1]
    base = structlog.get_logger("sse-proxy").bind()
    _CONFIGURED_BASE[:] = [parts, base]
    return base


_THREAD = threading.local()
"""A logger for the proxy code of one thread (:func:`log_this_thread`), if any."""


def log_this_thread(out: TextIO | None, level: str = "info") -> None:
    """Every line the proxy logs from this thread goes to ``out`` as JSON, at ``level``
    and above, whatever the process configured (None: back to that). The pytest plugin's
    proxy runs on a thread of its own in the user's test process: its lines go to a file,
    not into the test's captured output, nor between pytest's progress dots."""
    if out is None:
        _THREAD.__dict__.pop("logger", None)
        return
    _THREAD.logger = structlog.wrap_logger(
        structlog.WriteLogger(out),
        processors=_processors(*_rendering("json", out, None)),
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        cache_logger_on_first_use=False,
    )


def get_logger(**bind: Any) -> Any:
    """The proxy's logger. Where nobody configured structlog (the pytest plugin in a user's
    suite, a library user of ``start_proxy``), lines still follow the contract: JSON on
    stderr, or human lines when stderr is a terminal, at info level; structlog's own
    default (a development renderer with Python reprs, on stdout) is never used. A thread
    given its own (:func:`log_this_thread`) logs there."""
    own = getattr(_THREAD, "logger", None)
    if own is not None:
        return own.bind(**bind) if bind else own
    if structlog.is_configured():
        base = _configured_base()
        return base.bind(**bind) if bind else base
    out = sys.stderr
    return structlog.wrap_logger(
        structlog.WriteLogger(out),
        processors=_processors(*_rendering("auto", out, None)),
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        cache_logger_on_first_use=False,
    ).bind(**bind)


_LEVELS = {"info": logging.INFO, "warning": logging.WARNING}


def write_line(log: Any, level: str, event: str, fields: dict[str, Any]) -> None:
    """``log.<level>(event, **fields)``, the fields handed over as the dict they are.

    structlog's own call passes a line's fields as keywords twice before its processors
    see them, each time a new dict, which for the ``stream.summary`` line's forty fields
    costs more than its processors. ``_process_event`` is the step structlog
    keeps for wrappers such as this one: the level filter, the processors (a ``DropEvent``
    ends the line, as in structlog) and the write are the same. ``fields`` is not changed.
    """
    process = getattr(log, "_process_event", None)
    if process is None:  # not a structlog logger: its own call
        getattr(log, level)(event, **fields)
        return
    enabled = getattr(log, "is_enabled_for", None)
    if enabled is not None and not enabled(_LEVELS[level]):
        return
    try:
        args, kw = process(level, event, fields)
    except structlog.DropEvent:
        return
    getattr(log._logger, level)(*args, **kw)


_ID_BATCH = 256
_ids: list[str] = []
os.register_at_fork(after_in_child=_ids.clear)  # a worker draws its own, never its parent's


def new_stream_id() -> str:
    """16 random hex digits (as ``uuid4().hex[:16]`` was, without building a UUID), from
    one ``os.urandom`` call per 256 ids, so that a stream's start does not wait on the
    kernel for its id."""
    while True:
        try:
            return _ids.pop()
        except IndexError:
            raw = os.urandom(8 * _ID_BATCH).hex()
            _ids.extend([raw[i : i + 16] for i in range(0, len(raw), 16)])
