"""Log lines for a person at a terminal: one line per stream, verdict first.

The JSON lines carry everything; these carry what a person scans for. A stream's
``stream.summary`` is one line led by its verdict and reason, then method, path, status,
model, the client's request id, time to first token and duration. An alert is one
indented line with its own fields only (the stream's context is on the summary line),
and ``proxy.started`` says what to set in the app. Values are JSON (``true``, ``null``,
``{"lf":1}``), never Python reprs. Colour by level, when enabled (:func:`use_color`).

Everything a line prints that is not the renderer's own has its control characters
escaped (C0, DEL and C1, as ``\u001b``): a path or a model name is the client's, and on
a terminal ``ESC ]0;`` retitles the window, ``ESC ]52;`` writes the clipboard and
``ESC [2K`` erases what the operator was reading.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any

import orjson

from sse_proxy.obs.redact import format_exception_redacted

__all__ = [
    "CONTEXT_FIELDS",
    "ConsoleLines",
    "console_value",
    "is_terminal",
    "safe",
    "use_color",
]

# Fields the shell binds to every line of a stream: the summary line shows the ones a
# person scans for; an alert line shows none of them, only its own fields.
CONTEXT_FIELDS = frozenset(
    {
        "method",
        "path",
        "upstream_status",
        "upstream_request_id",
        "upstream_url",
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
# What the summary line shows, in its own shape; the rest of its 40-odd fields are in JSON.
_SUMMARY_SHOWN = frozenset(
    {"verdict", "verdict_reason", "ttft_ms", "duration_ms", "alerts", "alerts_suppressed"}
)
_BARE = re.compile(r"[^\s\"'=\\\x00-\x1f\x7f-\x9f]{1,80}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_IN_TEXT = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")  # (line breaks kept)


def _escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def safe(text: str) -> str:
    """``text`` with every control character escaped: safe to print on a terminal."""
    return _CONTROL.sub(_escaped, text) if _CONTROL.search(text) else text


# Messages a person reads whole (an upstream's error says what failed, in its own words):
# a wider cut, and only between words.
_MESSAGES = frozenset({"error", "message", "reason", "detail"})
_MESSAGE_WIDTH = 400
_RESET = "\x1b[0m"
_STYLE = {
    "ok": "\x1b[32m",
    "degraded": "\x1b[33m",
    "broken": "\x1b[1;31m",
    "debug": "\x1b[2m",
    "info": "",
    "warning": "\x1b[33m",
    "error": "\x1b[1;31m",
    "critical": "\x1b[1;31m",
    "dim": "\x1b[2m",
}


def use_color(stream: Any, env: Mapping[str, str]) -> bool:
    """Colour on a terminal; ``NO_COLOR`` (non-empty) turns it off, ``FORCE_COLOR``
    (non-empty, not ``0``) on even for a file or pipe. ``NO_COLOR`` wins over both."""
    if env.get("NO_COLOR"):
        return False
    force = env.get("FORCE_COLOR", "")
    if force and force.lower() not in ("0", "false", "no"):
        return True
    return is_terminal(stream)


def is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is a terminal (a closed or odd stream is not)."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):
        return False


def console_value(value: Any, width: int = 80) -> str:
    """One value for a person: a bare word as is, JSON for the rest, never a Python repr;
    a long one cut between words (never inside one), with an ellipsis."""
    if isinstance(value, bool) or value is None:
        return "true" if value is True else "false" if value is False else "null"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str) and _BARE.fullmatch(value):
        return value
    # (JSON escapes C0 itself, not DEL or C1; a key or a default=str value may hold any)
    text = safe(orjson.dumps(value, default=str).decode())
    if len(text) <= width:
        return text
    cut = text[: width - 1]
    space = cut.rfind(" ")
    if space > width // 2:  # the last whole word; a word longer than half: cut inside it
        cut = cut[:space]
    return cut + "…"


def _ms(value: Any) -> str:
    """A duration in ms as a person reads it: ``312ms``, ``1.24s``, ``-`` when unknown."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "-"
    if value < 1000:
        return f"{value:.0f}ms"
    return f"{value / 1000:.2f}s"


class ConsoleLines:
    """The human rendering (``--log-format console``, or ``auto`` on a terminal)."""

    def __init__(self, *, color: bool = False) -> None:
        self.color = color

    def _paint(self, style: str, text: str) -> str:
        code = _STYLE.get(style, "")
        return f"{code}{text}{_RESET}" if self.color and code else text

    def __call__(self, _logger: Any, _name: str, event_dict: MutableMapping[str, Any]) -> str:
        d = dict(event_dict)
        exc_info = d.pop("exc_info", None)
        exception = d.pop("exception", None)
        event = str(d.pop("event", ""))
        level = str(d.pop("level", "info"))
        timestamp = d.pop("timestamp", None)
        if event == "stream.summary":
            text = self._summary(d)
        elif event == "proxy.started":
            text = self._started(level, d)
        else:
            text = self._line(event, level, d)
        if isinstance(timestamp, str):  # after the first line: the start-up line has more
            first, sep, rest = text.partition("\n")
            text = f"{first} {self._paint('dim', safe(timestamp[11:23]))}{sep}{rest}"
        return text + _exception_text(exc_info, exception)

    def _fields(self, items: Any) -> list[str]:
        return [
            f"{safe(str(k))}={console_value(v, _MESSAGE_WIDTH if k in _MESSAGES else 80)}"
            for k, v in items
            if v is not None
        ]

    def _line(self, event: str, level: str, d: dict[str, Any]) -> str:
        stream_id = d.pop("stream_id", None)
        event, level = safe(event), safe(level)  # (a foreign line's event is its message)
        head = [] if level == "info" else [self._paint(level, level)]
        head.append(self._paint(level, event) if level != "info" else event)
        if stream_id is None:
            return " ".join(head + self._fields(d.items()))
        own = [(k, v) for k, v in d.items() if k not in CONTEXT_FIELDS]
        tail = self._paint("dim", f"stream={console_value(stream_id)}")
        return "  " + " ".join([*head, *self._fields(own), tail])

    def _summary(self, d: dict[str, Any]) -> str:
        verdict = safe(str(d.get("verdict") or "-"))
        tokens = [self._paint(verdict, f"{verdict:<8}")]
        if d.get("verdict_reason"):
            tokens.append(self._paint(verdict, console_value(d["verdict_reason"])))
        tokens.append(console_value(d.get("method") or "-"))
        tokens.append(console_value(d.get("path") or "-", width=60))
        tokens.append(console_value(d.get("upstream_status") or "-"))
        mcp = d.get("mcp")
        if isinstance(mcp, dict):  # an MCP tool call: its tool and progress, not a model
            tokens.append(console_value(mcp.get("tool") or mcp.get("method") or "-"))
            tokens.append(f"progress={console_value(mcp.get('progress'))}")
        else:
            tokens.append(console_value(d.get("model") or "-"))
        if d.get("client_request_id"):
            tokens.append(f"req={console_value(d['client_request_id'])}")
        tokens.append(f"ttft={_ms(d.get('ttft_ms'))}")
        tokens.append(f"dur={_ms(d.get('duration_ms'))}")
        if d.get("strict_end"):  # --strict-end ended the client's body as broken
            tokens.append(self._paint("broken", f"strict_end={console_value(d['strict_end'])}"))
        if d.get("alerts"):
            tokens.append(f"alerts={console_value(d['alerts'])}")
        if d.get("alerts_suppressed"):
            tokens.append(f"suppressed={console_value(d['alerts_suppressed'])}")
        if d.get("pid") is not None:
            tokens.append(f"pid={console_value(d['pid'])}")
        if d.get("stream_id"):
            tokens.append(self._paint("dim", f"stream={console_value(d['stream_id'])}"))
        return " ".join(tokens)

    def _started(self, level: str, d: dict[str, Any]) -> str:
        shown = (
            "listen",
            "admin",
            "upstream",
            "mode",
            "strict_end",
            "loop",
            "mode_reason",
            "pid",
            "inspector",
        )
        line = self._line("proxy.started", level, {k: d.get(k) for k in shown if d.get(k)})
        for entry in d.get("app_env") or ():
            if not isinstance(entry, Mapping):
                continue
            where = safe(f"route {entry.get('route')} -> {entry.get('upstream')}")
            line += "\n  " + self._paint("ok", safe(f"set {entry.get('set')}")) + f"  ({where})"
        return line


def _exception_text(exc_info: Any, exception: Any) -> str:
    if exc_info:
        info = exc_info if isinstance(exc_info, tuple) else sys.exc_info()
        if isinstance(exc_info, BaseException):
            info = (type(exc_info), exc_info, exc_info.__traceback__)
        if info[1] is not None:
            return "\n" + _text(format_exception_redacted(info))
    elif isinstance(exception, str):
        return "\n" + _text(exception)
    return ""


def _text(text: str) -> str:
    """A traceback's lines as they are, each one's control characters escaped."""
    return _CONTROL_IN_TEXT.sub(_escaped, text)
