"""The byte-strip model: exact offsets of reads, frames, line endings, cut characters, alerts."""

from __future__ import annotations

import random
import re
from html.parser import HTMLParser

import pytest

from sse_proxy.core import StreamReassembler
from sse_proxy.inspect.html import render_strip
from sse_proxy.inspect.strip import analyse, build_strip, cut_chars, line_endings
from sse_proxy.tools import fixtures

MULTI = "aé€🦊z".encode()  # 1-, 2-, 3-, 4-byte characters: é at 1, € at 3, 🦊 at 6, z at 10


def _char_spans(data: bytes) -> list[tuple[int, int]]:
    """(start, length) of every character, from the decoded text (independent of the model)."""
    spans = []
    pos = 0
    for ch in data.decode("utf-8"):
        n = len(ch.encode("utf-8"))
        spans.append((pos, n))
        pos += n
    return spans


def test_line_endings_exact_offsets() -> None:
    data = b"a\nb\r\nc\rd\r\r\n\n"
    got = [(e.offset, e.kind) for e in line_endings(data)]
    assert got == [(1, "LF"), (3, "CRLF"), (6, "CR"), (8, "CR"), (9, "CRLF"), (11, "LF")]


def test_crlf_split_across_reads_is_one_line_ending() -> None:
    data = b"data: x\r\n\r\n"
    for cut in range(1, len(data)):
        model = build_strip(data, [cut, len(data) - cut], [], [])
        assert [(e.offset, e.kind) for e in model.line_endings] == [(7, "CRLF"), (9, "CRLF")]
        assert model.boundaries == (cut,)


@pytest.mark.parametrize("data", [MULTI, fixtures.SHORT_MESSAGE.encode()])
def test_cut_chars_every_cut_point(data: bytes) -> None:
    inside = {start + k: (start, n) for start, n in _char_spans(data) if n > 1 for k in range(1, n)}
    for cut in range(len(data) + 1):
        found = cut_chars(data, [cut])
        if cut in inside:
            start, n = inside[cut]
            assert len(found) == 1, cut
            c = found[0]
            assert (c.start, c.length, c.boundary) == (start, n, cut)
            assert c.char == data[start : start + n].decode()
        else:
            assert found == (), cut


def test_cut_inside_invalid_bytes_has_no_char() -> None:
    data = b"x\xf0\x9f\xa6y"  # a truncated 4-byte sequence
    (c,) = cut_chars(data, [2])
    assert (c.start, c.length, c.char) == (1, 4, None)
    assert cut_chars(b"\x80\x80", [1]) == ()  # stray continuation bytes: nothing was cut


def _expected_frame_ends(data: bytes) -> list[int]:
    return [m.end() for m in re.finditer(rb"\n\n", data)]


def test_seeded_random_reads_give_the_same_model_but_their_own_boundaries() -> None:
    data = fixtures.faulty_stream("invalid_utf8", "openai")
    whole = StreamReassembler()
    alerts = whole.feed(data).alerts + whole.close().alerts
    offsets = sorted(a.byte_offset for a in alerts if hasattr(a, "byte_offset"))
    assert offsets, "the fault must raise alerts with offsets"
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    for _ in range(20):
        cuts = sorted(rng.sample(range(1, len(data)), rng.randint(1, 40)))
        reads = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        got = analyse(reads)
        assert got.strip.boundaries == tuple(cuts), f"seed={seed}"
        assert list(got.strip.frame_ends) == _expected_frame_ends(data), f"seed={seed}"
        assert sorted(a.offset for a in got.strip.alerts) == offsets, f"seed={seed}"
        assert [e.start for e in got.events] == [0, *_expected_frame_ends(data)][
            : len(got.events)
        ], f"seed={seed}"
        data_cut = {c.boundary for c in got.strip.cut_chars}
        assert data_cut <= set(cuts), f"seed={seed}"


def test_alert_marks_sit_at_the_alert_offset() -> None:
    data = fixtures.faulty_stream("invalid_utf8", "openai")
    got = analyse([data])
    bad = data.index(b"\xff")
    marks = [a for a in got.strip.alerts if a.name == "sse.replacement_char"]
    # the truncated 4-byte sequence comes first, then the 0xFF byte
    assert bad in {m.offset for m in marks}
    assert all(data[m.offset] >= 0x80 for m in marks)


def test_stream_level_alert_sits_at_the_end() -> None:
    data = fixtures.faulty_stream("crlf", "openai")
    got = analyse([data])
    (mark,) = [a for a in got.strip.alerts if a.name == "sse.crlf_framing"]
    assert mark.offset == len(data)
    assert "counts" in mark.detail


class _Marks(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.marks: list[tuple[str, int]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        cls = (a.get("class") or "").split()
        for kind in ("read", "frame", "alert", "eol", "cut"):
            if kind in cls and a.get("data-off") is not None:
                self.marks.append((kind, int(a["data-off"] or 0)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_rendered_strip_puts_each_marker_at_its_offset() -> None:
    data = fixtures.faulty_stream("mixed_newlines", "text") + "é🦊".encode()
    cuts = [5, 17, len(data) - 3]  # the last one is inside 🦊
    reads = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    got = analyse(reads, dialect="text")
    html = render_strip(data, got.strip, show_text=True)
    parser = _Marks()
    parser.feed(html)
    marks = parser.marks
    assert sorted(o for k, o in marks if k == "read") == cuts
    assert sorted(o for k, o in marks if k == "frame") == list(got.strip.frame_ends)
    assert sorted(o for k, o in marks if k == "eol") == [e.offset for e in got.strip.line_endings]
    assert [o for k, o in marks if k == "cut"] == [len(data) - 4]
    assert sorted(o for k, o in marks if k == "alert") == [a.offset for a in got.strip.alerts]
    assert {e.kind for e in got.strip.line_endings} == {"LF", "CRLF", "CR"}


def test_strip_without_text_hides_message_text() -> None:
    data = fixtures.clean_stream("text", fixtures.SHORT_TOKENS)
    got = analyse([data[:60], data[60:]], dialect="text")
    shown = render_strip(data, got.strip, show_text=True)
    hidden = render_strip(data, got.strip, show_text=False)
    assert "quick" in shown
    parser = _Marks()
    parser.feed(hidden)
    text = "".join(parser.text)
    for word in ("quick", "brown", "caf", "says"):
        assert word not in text
    assert "data:" in text
    assert "🦊" not in hidden
    assert "f0 9f" not in hidden


def test_capped_strip_counts_the_whole_stream() -> None:
    data = fixtures.clean_stream("openai", fixtures.SHORT_TOKENS)
    got = analyse([data[:100]], complete=False, total=len(data))
    assert (got.strip.size, got.strip.total) == (100, len(data))
    # a prefix is not judged: no truncation verdict on a capped copy
    assert not [a for a in got.alerts if a.name == "sse.truncated"]
