"""Logs as data: what the proxy logged, found by event name and stream, waited for by event.

``structlog.testing.capture_logs`` (the ``logs`` fixture) collects event dicts in-process;
:class:`tests.support.cli.ServeProcess` reads the JSON lines of a real subprocess.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import re
import time
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import structlog

from sse_proxy.obs.logs import configure_logging

__all__ = [
    "ALERT_EVENTS",
    "LogEntries",
    "alert_names",
    "configured_logging",
    "eventually",
    "metric_sum",
    "named",
    "summary",
    "wait_for",
    "warnings",
]

LogEntries = list[MutableMapping[str, Any]]

ALERT_EVENTS = frozenset(
    {
        "sse.replacement_char",
        "sse.unterminated_frame",
        "sse.crlf_framing",
        "sse.invalid_json",
        "sse.truncated",
        "sse.error_event",
        "sse.oversized_frame",
        "sse.tool_call_invalid",
    }
)


def named(entries: LogEntries, event: str, stream_id: str | None = None) -> LogEntries:
    """The captured events called ``event`` (of one stream, when ``stream_id`` is given)."""
    return [
        e
        for e in entries
        if e["event"] == event and (stream_id is None or e.get("stream_id") == stream_id)
    ]


def alert_names(entries: LogEntries, stream_id: str | None = None) -> set[str]:
    """The names of the alert events logged (for one stream, when given)."""
    return {
        e["event"]
        for e in entries
        if e["event"] in ALERT_EVENTS and (stream_id is None or e.get("stream_id") == stream_id)
    }


def warnings(entries: LogEntries) -> LogEntries:
    """The captured warning-level (and worse) events."""
    return [e for e in entries if e.get("log_level") in ("warning", "error", "critical")]


def summary(entries: LogEntries, stream_id: str) -> MutableMapping[str, Any]:
    """The one ``stream.summary`` line of a stream."""
    found = named(entries, "stream.summary", stream_id)
    assert len(found) == 1, found
    return found[0]


async def eventually(predicate: Callable[[], bool], within: float = 3.0) -> bool:
    """Poll ``predicate`` (state owned by the proxy, which has no event for it) until true."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


async def wait_for(
    entries: LogEntries, event: str, stream_id: str | None = None, within: float = 3.0
) -> MutableMapping[str, Any]:
    """The last ``event`` (of ``stream_id``), waiting for it up to ``within`` seconds (the
    proxy may log it after the client is done)."""
    if not await eventually(lambda: bool(named(entries, event, stream_id)), within):
        seen = [e["event"] for e in entries]
        raise AssertionError(f"{event} not logged within {within}s; saw {seen}")
    return named(entries, event, stream_id)[-1]


def metric_sum(text: str, name: str, **labels: str) -> float:
    """The sum of the Prometheus samples of ``name`` that carry these labels (0 if none)."""
    total = 0.0
    for line in text.splitlines():
        match = re.match(re.escape(name) + r"(?:\{(.*)\})? (\S+)(?: #.*)?$", line)
        if match is None:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(match.group(2))
    return total


@contextlib.contextmanager
def configured_logging(fmt: str, level: str = "info") -> Iterator[io.StringIO]:
    """``configure_logging(fmt=..., level=...)`` into a buffer; the previous logging setup
    restored."""
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, saved_level = root.handlers[:], root.level
    stream = io.StringIO()
    configure_logging(fmt=fmt, stream=stream, level=level)
    try:
        yield stream
    finally:
        root.handlers[:] = handlers
        root.setLevel(saved_level)
        structlog.configure(**saved)
