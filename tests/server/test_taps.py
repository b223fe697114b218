"""The taps of a stream: sorted by hook once, each hook called only where a tap has it.

The end-to-end behaviour of each tap (summary line, span, inspector, recording, metrics,
the write capture of ``test-client --html``) is tested through the running proxy
elsewhere; this is the contract of :class:`Taps` itself.
"""

from __future__ import annotations

from typing import Any

from sse_proxy.core.alerts import Alert, Truncated
from sse_proxy.server.tap_types import StreamEnd
from sse_proxy.server.taps import ClientWrites, Taps
from sse_proxy.server.timing import _GapHistogram


def _end() -> StreamEnd:
    return StreamEnd(
        ended_by="upstream_eof",
        fields={"verdict": "ok"},
        alerts={},
        closing=(),
        received=0,
        events=0,
        ttfb=None,
        duration=0.0,
        gaps=_GapHistogram(),
    )


class _Log:
    def __init__(self, seen: list[Any], name: str) -> None:
        self.seen = seen
        self.name = name

    def finish(self, end: StreamEnd) -> None:
        self.seen.append((self.name, "finish", end.ended_by))


class _Reader(_Log):
    def read(self, chunk: bytes) -> None:
        self.seen.append((self.name, "read", chunk))


class _Observer(_Log):
    def observed(self, chunk: bytes, alerts: tuple[Alert, ...]) -> None:
        self.seen.append((self.name, "observed", chunk, alerts))


class _Writer(_Log):
    def wrote(self, data: bytes) -> None:
        self.seen.append((self.name, "wrote", data))


def test_no_per_read_tap_means_no_per_read_hook() -> None:
    seen: list[Any] = []
    taps = Taps((_Log(seen, "a"), None, _Log(seen, "b")))
    assert (taps.read, taps.observed, taps.wrote) == (None, None, None)
    taps.finish(_end())
    assert seen == [("a", "finish", "upstream_eof"), ("b", "finish", "upstream_eof")]


def test_one_tap_per_hook_is_called_directly() -> None:
    """No layer in between: the hook is the tap's own bound method."""
    seen: list[Any] = []
    reader, observer, writer = _Reader(seen, "r"), _Observer(seen, "o"), _Writer(seen, "w")
    taps = Taps((reader, observer, writer))
    assert taps.read == reader.read
    assert taps.observed == observer.observed
    assert taps.wrote == writer.wrote


def test_several_taps_of_a_hook_are_called_in_order() -> None:
    seen: list[Any] = []
    alert = Truncated(reason=Truncated.UPSTREAM_CLOSED, dialect="text", byte_offset=1)
    taps = Taps((_Reader(seen, "r1"), _Observer(seen, "o"), _Reader(seen, "r2")))
    assert taps.read is not None
    assert taps.observed is not None
    taps.read(b"x")
    taps.observed(b"y", (alert,))
    taps.finish(_end())
    assert seen == [
        ("r1", "read", b"x"),
        ("r2", "read", b"x"),
        ("o", "observed", b"y", (alert,)),
        ("r1", "finish", "upstream_eof"),
        ("o", "finish", "upstream_eof"),
        ("r2", "finish", "upstream_eof"),
    ]


def test_client_writes_keeps_one_streams_writes_up_to_its_cap() -> None:
    writes = ClientWrites(max_bytes=5)
    assert writes.one_stream() is None  # no stream
    tap = writes.tap(None)  # type: ignore[arg-type]
    assert writes.one_stream() is None  # a stream, nothing re-chunked
    for data in (b"ab", b"cde", b"fgh"):
        tap.wrote(data)
    assert writes.one_stream() == (b"abcde", (2, 5))
    writes.tap(None)  # type: ignore[arg-type]
    assert writes.one_stream() is None  # two streams: which one's writes would it be?
