"""The stream the cases serve: the built-in mock, a recording or a raw capture; its faults."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from sse_proxy.core.dialects.registry import DIALECTS
from sse_proxy.names import DIALECT_BODIES, DIALECT_PATHS
from sse_proxy.rechunk.shapes.rewriter import split_frames
from sse_proxy.recording import Recording, load_capture
from sse_proxy.tools import fixtures
from sse_proxy.tools.fixtures.resume import INTERACTIONS_BODY, INTERACTIONS_PATH
from sse_proxy.tools.fixtures.streams import error_frame
from sse_proxy.tools.testclient.diagnose import split_parts

__all__ = [
    "DUMMY_KEYS",
    "SSE_HEADERS",
    "FaultStream",
    "Fixture",
    "load_fixture",
    "request_body",
    "stream_path",
    "uses_first_text",
]

DUMMY_KEYS: Final[dict[str, str]] = {
    "OPENAI_API_KEY": "sk-sse-proxy-test-not-a-real-key",
    "ANTHROPIC_API_KEY": "sk-ant-sse-proxy-test-not-a-real-key",
}
"""Set for CMD when not already set (SDKs refuse to start without a key); the browser
clients' headers carry them too. Nothing leaves loopback."""

SSE_HEADERS: Final = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
}

_NO_ERROR_EVENT: Final = b"event: error\ndata: upstream failed\n\n"
"""What stands for an error event in a dialect that has none."""


def uses_first_text(strategy: str | None) -> bool:
    """Whether a case serves the first-event-text fixture: every case that rewrites the
    syntax (they touch the stream's start: a BOM, a comment or data-less block in front,
    another first line ending), so a client that drops the first event loses text."""
    return bool(split_parts(strategy)[1])


@dataclass(frozen=True, slots=True)
class FaultStream:
    """A broken variant of the fixture: the bytes sent, and what they carry."""

    body: bytes
    text: str
    reset: bool = False


@dataclass
class Fixture:
    """The upstream the cases stream from: the mock, or a recording / raw capture."""

    dialect: str
    path: str
    expected: str
    short: bytes
    short_expected: str
    body: bytes
    recording: Recording | None = None
    note: str | None = None
    headers: dict[str, str] = field(default_factory=lambda: dict(SSE_HEADERS))
    tools: bool = False

    @property
    def raw_capture(self) -> bool:
        return self.recording is not None and bool(self.recording.meta.get("raw_capture"))

    def fault(self, kind: str, request: object = None) -> FaultStream:
        """The fixture broken by ``kind`` (:data:`sse_proxy.tools.testclient.plan.FAULT_KINDS`).

        Unlike the mock's faults (:func:`sse_proxy.tools.fixtures.faulty_stream`), which
        keep the whole text, these break after about half of it, so that a client which
        takes a broken stream for a whole one shows it; the error event and the terminal
        marker are the dialect's own (its :class:`~sse_proxy.core.dialects.Dialect`). For
        a dialect whose streams answer requests (MCP), ``request`` is the one answered:
        the stream is built for it, and so is the error (its id). MCP's text comes whole
        in the response, so there the break comes before it: the text carried is none.
        """
        body = self.body
        if request is not None:
            body = fixtures.clean_stream(self.dialect, request=request)
        frames = split_frames(body)
        texts = [i for i, f in enumerate(frames) if _text_of(self.dialect, f)]
        # Break after about half of the text-carrying frames, never before the first.
        keep = (texts[len(texts) // 2] if texts else len(frames) // 2) or 1
        head = b"".join(frames[:keep])
        described = DIALECTS.get(self.dialect)
        if kind == "unterminated":
            nxt = frames[keep] if keep < len(frames) else b"data: {"
            body = head + nxt[: max(1, min(len(nxt) - 2, len(nxt) // 2))]
        elif kind == "no_terminal":
            marker = described.terminal_frame if described is not None else None
            body = b"".join(f for f in frames if marker is None or marker not in f)
        elif kind == "error_event":
            error = error_frame(self.dialect, request) if described is not None else None
            body = head + (error or _NO_ERROR_EVENT)
        elif kind == "reset":
            body = head
        else:
            raise ValueError(f"unknown fault {kind!r}")
        carried = head if kind == "error_event" else body  # the error's own data is no text
        return FaultStream(body, _text_of(self.dialect, carried), reset=kind == "reset")


def _text_of(dialect: str, body: bytes) -> str:
    from sse_proxy.core import StreamReassembler

    reassembler = StreamReassembler(dialect, emit_events=False)
    reassembler.feed(body)
    reassembler.close()
    return reassembler.text


def load_fixture(dialect: str, path: str | None, *, tools: bool = False) -> Fixture:
    """The mock's canonical stream of ``dialect``, or the recording / capture at ``path``.

    ``tools``: the tool-call fixture (the text, then three calls), whose expected output is
    the text and the calls as :mod:`sse_proxy.tools.fixtures.tools` prints them.
    """
    if path is None and tools:
        from sse_proxy.tools.fixtures.streams import tool_stream
        from sse_proxy.tools.fixtures.tools import tool_output

        return Fixture(
            dialect=dialect,
            path=DIALECT_PATHS[dialect],
            expected=tool_output(fixtures.MESSAGE),
            short=tool_stream(dialect, fixtures.SHORT_TOKENS),
            short_expected=tool_output(fixtures.SHORT_MESSAGE),
            body=tool_stream(dialect),
            tools=True,
        )
    if path is None:
        return Fixture(
            dialect=dialect,
            path=DIALECT_PATHS[dialect],
            expected=fixtures.expected_text(dialect),
            short=fixtures.clean_stream(dialect, fixtures.SHORT_TOKENS),
            short_expected=fixtures.SHORT_MESSAGE,
            body=fixtures.clean_stream(dialect),
        )
    from sse_proxy.core import StreamReassembler, dialect_for_path
    from sse_proxy.core.alerts import Level

    recording = load_capture(path)
    req_path = str(recording.request.get("path") or "")
    query = str(recording.request.get("query") or "")
    reassembler = StreamReassembler(
        None, hint=dialect_for_path(req_path) if req_path else None, emit_events=False
    )
    alerts = list(reassembler.feed(recording.body).alerts)
    alerts += reassembler.close().alerts
    found = reassembler.dialect if reassembler.dialect != "none" else dialect
    found = found if found in DIALECT_PATHS else dialect
    warned = sorted({a.name for a in alerts if a.level is Level.WARNING})
    note = None
    if warned:
        what = "capture" if recording.meta.get("raw_capture") else "recording"
        note = (
            f"the {what} itself is not clean ({', '.join(warned)}): the expected text is "
            "what a correct client makes of it"
        )
    headers = {
        str(k): str(v)
        for k, v in (recording.response.get("headers") or {}).items()
        if str(k).lower() in ("content-type", "cache-control")
    } or dict(SSE_HEADERS)
    return Fixture(
        dialect=found,
        path=(req_path or DIALECT_PATHS[found]) + (f"?{query}" if query else ""),
        expected=reassembler.text,
        short=recording.body,
        short_expected=reassembler.text,
        body=recording.body,
        recording=recording,
        note=note,
        headers=headers,
    )


def request_body(fixture: Fixture, *, resume: bool = False) -> dict[str, object]:
    """A request body that makes the fixture's endpoint stream (with its tools); with
    ``resume``, a stream the client can resume (Responses: in background mode; Gemini: an
    interaction)."""
    if fixture.tools:
        from sse_proxy.tools.fixtures.tools import tool_request_body

        return tool_request_body(fixture.dialect)
    if resume and DIALECTS[fixture.dialect].resumes_by == "event_id":
        return dict(INTERACTIONS_BODY)  # Gemini: an interaction, not generateContent
    body = dict(DIALECT_BODIES.get(fixture.dialect, {}))
    if resume and fixture.dialect == "responses":
        body["background"] = True  # stored, so it can be streamed again from a cursor
    return body


def stream_path(fixture: Fixture, *, resume: bool = False) -> str:
    """Where the client streams the fixture from; in a ``resume`` case of Gemini, the
    Interactions endpoint (its resumable stream)."""
    if resume and DIALECTS[fixture.dialect].resumes_by == "event_id":
        return INTERACTIONS_PATH
    return fixture.path
