"""The frame boundary and the WHATWG event-stream rules, one behaviour per test.

Every rule test runs the input whole, byte by byte, and at every cut, and asserts the same
events each way: no rule may depend on where the reads land.
"""

from __future__ import annotations

import pytest

from sse_proxy.core import CrlfFraming, OversizedFrame, StreamReassembler, UnterminatedFrame
from tests.support.cuts import Result, bytewise, every_cut, names, run


def parse(data: bytes, **kw: object) -> Result:
    """Parse ``data`` three ways and insist they agree; return the whole-input result."""
    whole = run([data], "none", **kw)
    by_byte = run(bytewise(data), "none", **kw)
    assert by_byte.events == whole.events, "byte-at-a-time differs from whole"
    assert names(by_byte.alerts) == names(whole.alerts)
    for cut, pieces in every_cut(data):
        split = run(pieces, "none", **kw)
        assert split.events == whole.events, f"split at byte {cut}"
        assert split.alerts == whole.alerts, f"split at byte {cut}"
        assert split.frame_ends == whole.frame_ends or _same_frames(split, whole), (
            f"split at byte {cut}"
        )
    return whole


def _same_frames(a: Result, b: Result) -> bool:
    # A CR that ends a read is acted on at once; a following LF may add one later frame end.
    return set(b.frame_ends) <= set(a.frame_ends)


def datas(res: Result) -> list[str]:
    return [e.data for e in res.events]


SEED_WIRE = (
    'data: {"choices":[{"delta":{"content":"caf\u00e9 "}}]}\n\n'
    ": keepalive\n\n"
    'data: {"choices":[{"delta":{"content":"\U0001f642"}}]}\n\n'
    "data: [DONE]\n\n"
)


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"], ids=["lf", "crlf", "cr"])
def test_framing_is_independent_of_where_the_reads_land(newline: str) -> None:
    """The seed's frame test: a comment frame and the non-JSON [DONE], LF/CRLF/CR alike."""
    wire = SEED_WIRE.replace("\n", newline).encode()
    res = parse(wire)
    assert datas(res) == [
        '{"choices":[{"delta":{"content":"café "}}]}',
        '{"choices":[{"delta":{"content":"🙂"}}]}',
        "[DONE]",
    ]
    assert len(res.frame_ends) == 4  # the comment frame is a frame too, it just has no event


def test_crlf_and_cr_variants_give_the_same_events_as_lf() -> None:
    lf = parse(SEED_WIRE.encode())
    for newline in ("\r\n", "\r"):
        other = parse(SEED_WIRE.replace("\n", newline).encode())
        assert [(e.type, e.data, e.id) for e in other.events] == [
            (e.type, e.data, e.id) for e in lf.events
        ]


def test_one_leading_bom_is_stripped() -> None:
    res = parse(b"\xef\xbb\xbfdata: x\n\n")
    assert datas(res) == ["x"]
    assert res.alerts == ()


def test_only_the_first_bom_is_stripped() -> None:
    """A second BOM is part of the field name, so the line is an unknown field."""
    res = parse(b"\xef\xbb\xbf\xef\xbb\xbfdata: x\n\ndata: y\n\n")
    assert datas(res) == ["y"]


def test_bom_offsets_still_count_the_bom() -> None:
    res = parse(b"\xef\xbb\xbfdata: x\n\n")
    assert res.events[0].start == 3
    assert res.frame_ends == (len(b"\xef\xbb\xbfdata: x\n\n"),)


def test_a_bom_later_in_the_stream_is_data() -> None:
    res = parse("data: \ufeffx\n\n".encode())
    assert datas(res) == ["\ufeffx"]


@pytest.mark.parametrize(
    ("line", "value"),
    [(b"data:x", "x"), (b"data: x", "x"), (b"data:  x", " x"), (b"data:   x ", "  x ")],
    ids=["zero", "one", "two", "three-and-trailing"],
)
def test_exactly_one_leading_space_is_removed(line: bytes, value: str) -> None:
    assert datas(parse(line + b"\n\n")) == [value]


def test_leading_spaces_of_tokens_are_kept() -> None:
    """The whitespace bug: 'The', ' quick', ' brown' must not become 'Thequickbrown'."""
    res = run([b"data: The\n\ndata:  quick\n\ndata:  brown\n\n"], "text")
    assert res.text == "The quick brown"


def test_data_lines_are_joined_with_lf() -> None:
    assert datas(parse(b"data: a\ndata:\ndata: b\n\n")) == ["a\n\nb"]


def test_field_without_colon_is_a_name_with_empty_value() -> None:
    """`data` alone appends an empty line; the event dispatches with empty data."""
    res = parse(b"data\n\ndata\ndata\n\n")
    assert datas(res) == ["", "\n"]


def test_comment_lines_are_ignored() -> None:
    assert datas(parse(b": hello\ndata: x\n: bye\n\n")) == ["x"]


def test_unknown_fields_are_ignored() -> None:
    assert datas(parse(b"foo: bar\nDATA: no\ndata: x\n\n")) == ["x"]


def test_event_type_sets_type_and_resets_after_dispatch() -> None:
    res = parse(b"event: add\ndata: 1\n\ndata: 2\n\nevent:\ndata: 3\n\n")
    assert [(e.type, e.data) for e in res.events] == [
        ("add", "1"),
        ("message", "2"),
        ("message", "3"),
    ]


def test_event_type_of_a_dataless_block_does_not_leak_into_the_next() -> None:
    res = parse(b"event: ping\n\ndata: x\n\n")
    assert [(e.type, e.data) for e in res.events] == [("message", "x")]


def test_id_persists_as_last_event_id() -> None:
    res = parse(b"id: 7\ndata: a\n\ndata: b\n\nid:\ndata: c\n\n")
    assert [e.id for e in res.events] == ["7", "7", ""]


def test_id_is_none_until_one_is_set() -> None:
    assert [e.id for e in parse(b"data: a\n\n").events] == [None]


def test_id_containing_nul_is_ignored() -> None:
    res = parse(b"id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n")
    assert [e.id for e in res.events] == ["1", "1"]


def test_id_of_a_dataless_block_still_becomes_last_event_id() -> None:
    res = parse(b"id: 5\n\ndata: x\n\n")
    assert [e.id for e in res.events] == ["5"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (b"3000", 3000),
        (b"+3000", None),
        (b"-1", None),
        (b" 3000", None),  # one space is stripped by the grammar, the second stays
        (b"3000 ", None),
        (b"30.5", None),
        ("３０".encode(), None),  # fullwidth digits are not ASCII digits
        ("²".encode(), None),
        (b"", None),
    ],
)
def test_retry_is_accepted_only_when_all_ascii_digits(value: bytes, expected: int | None) -> None:
    res = parse(b"retry: " + value + b"\ndata: x\n\n")
    assert [e.retry for e in res.events] == [expected]


def test_retry_belongs_to_its_own_block() -> None:
    res = parse(b"retry: 10\ndata: a\n\ndata: b\n\n")
    assert [e.retry for e in res.events] == [10, None]


def test_huge_retry_never_raises() -> None:
    res = parse(b"retry: " + b"9" * 5000 + b"\ndata: x\n\n")
    assert datas(res) == ["x"]


def test_blank_line_with_empty_data_buffer_dispatches_nothing() -> None:
    res = parse(b"\n\nevent: x\n\nretry: 5\n\nid: 1\n\n: c\n\n")
    assert res.events == ()
    assert res.alerts == ()


def test_empty_data_field_dispatches_an_empty_event() -> None:
    assert datas(parse(b"data:\n\n")) == [""]


def test_only_cr_lf_and_crlf_end_lines() -> None:
    """U+2028, U+0085, VT and FF are data, not line ends (the str.splitlines trap)."""
    res = parse("data: a\u2028b\u0085c\x0bd\x0ce\x1cf\n\n".encode())
    assert datas(res) == ["a\u2028b\u0085c\x0bd\x0ce\x1cf"]


def test_cr_lf_pair_split_across_reads_is_one_line_end() -> None:
    """CR at the end of one read and LF at the start of the next: one line end, not two."""
    res = run([b"data: a\r", b"\ndata: b\r\n\r\n"], "none")
    assert datas(res) == ["a\nb"]


def test_cr_at_end_of_a_read_dispatches_without_waiting_for_the_next() -> None:
    """The trailing CR that completes a blank line dispatches at once."""
    r = StreamReassembler("none")
    assert r.feed(b"data: a\r\n").events == ()
    out = r.feed(b"\r")
    assert [e.data for e in out.events] == ["a"]
    assert r.feed(b"\n").events == ()
    assert r.close().alerts == (CrlfFraming(counts={"lf": 0, "crlf": 2, "cr": 0}, mixed=False),)


def test_cr_at_end_of_stream_ends_the_frame() -> None:
    res = parse(b"data: a\n\r")
    assert datas(res) == ["a"]
    assert "sse.unterminated_frame" not in names(res.alerts)


def test_partial_block_at_end_of_stream_is_discarded_and_reported() -> None:
    res = parse(b'data: a\n\ndata: {"choi')
    assert datas(res) == ["a"]
    (alert,) = [a for a in res.alerts if isinstance(a, UnterminatedFrame)]
    assert alert.pending_bytes == len(b'data: {"choi')
    assert alert.byte_offset == len(b"data: a\n\n")
    assert "choi" in alert.preview


def test_complete_lines_without_final_blank_line_are_unterminated() -> None:
    res = parse(b"data: a\n")
    assert res.events == ()
    assert names(res.alerts) == ["sse.unterminated_frame"]


def test_frame_end_offsets_point_after_each_blank_line() -> None:
    data = b"data: a\n\n: c\n\ndata: b\n\n"
    assert parse(data).frame_ends == (9, 14, 23)


def test_event_offsets_cover_their_block() -> None:
    data = b"data: a\n\nevent: e\ndata: b\n\n"
    res = parse(data)
    assert [e.start for e in res.events] == [0, 9]
    assert res.frame_ends == (9, len(data))


@pytest.mark.parametrize(
    ("wire", "counts", "mixed"),
    [
        (b"data: a\r\n\r\n", {"lf": 0, "crlf": 2, "cr": 0}, False),
        (b"data: a\r\r", {"lf": 0, "crlf": 0, "cr": 2}, False),
        (b"data: a\r\n\n", {"lf": 1, "crlf": 1, "cr": 0}, True),
        (b"data: a\r\n\r", {"lf": 0, "crlf": 1, "cr": 1}, True),
    ],
)
def test_crlf_framing_is_reported_once_with_counts(
    wire: bytes, counts: dict[str, int], mixed: bool
) -> None:
    res = parse(wire)
    crlf = [a for a in res.alerts if isinstance(a, CrlfFraming)]
    assert crlf == [CrlfFraming(counts=counts, mixed=mixed)]
    assert crlf[0].level == ("warning" if mixed else "info")


def test_lf_only_stream_has_no_crlf_alert() -> None:
    assert parse(b"data: a\n\n").alerts == ()


def test_oversized_line_is_dropped_with_an_alert_and_parsing_resumes() -> None:
    big = b"data: " + b"x" * 5000 + b"\n\ndata: ok\n\n"
    for pieces in ([big], bytewise(big)[:0] or [big[i : i + 97] for i in range(0, len(big), 97)]):
        res = run(pieces, "none", limits=_limits(1000, 1 << 20))
        assert datas(res) == ["ok"]
        assert names(res.alerts) == ["sse.oversized_frame"]
        assert isinstance(res.alerts[0], OversizedFrame)
        assert res.alerts[0].kind == "line"


def test_oversized_frame_is_dropped_with_an_alert() -> None:
    big = b"".join(b"data: " + b"y" * 90 + b"\n" for _ in range(50)) + b"\ndata: ok\n\n"
    res = parse(big, limits=_limits(1000, 2000))
    assert datas(res) == ["ok"]
    assert names(res.alerts) == ["sse.oversized_frame"]
    assert res.alerts[0].kind == "frame"  # type: ignore[attr-defined]


def test_oversized_line_at_cr_line_end_split_across_reads() -> None:
    data = b"data: " + b"z" * 300 + b"\r\n\r\ndata: ok\r\n\r\n"
    for cut, pieces in every_cut(data):
        res = run(pieces, "none", limits=_limits(100, 1 << 20))
        assert datas(res) == ["ok"], f"split at byte {cut}"


def test_feed_after_close_is_a_state_error() -> None:
    from sse_proxy.errors import ReassemblerStateError

    r = StreamReassembler()
    r.close()
    with pytest.raises(ReassemblerStateError):
        r.feed(b"data: x\n\n")


def _limits(line: int, frame: int) -> object:
    from sse_proxy.core import Limits

    return Limits(max_line=line, max_frame=frame)


def test_the_last_event_id_counts_once_its_block_ends() -> None:
    """The id a client resumes from (WHATWG's last event ID string): set when a block ends,
    kept over id-less events, an id holding NULL ignored; an id in a block cut at the end
    does not count (it is the pending one)."""
    reader = StreamReassembler("text")
    reader.feed(b"id: 1\ndata: a\n\ndata: b\n\nid: x\x00y\n\nid: 2\n")
    assert (reader.last_event_id, reader.pending_event_id) == ("1", "2")
    reader.feed(b"data: c\n")
    reader.close(abandoned=True)
    assert (reader.last_event_id, reader.pending_event_id) == ("1", "2")
    reader = StreamReassembler("text")
    reader.feed(b"id: 1\ndata: a\n\nid: 2\nid: 3\n\n")  # a data-less block: its id counts
    assert (reader.last_event_id, reader.pending_event_id) == ("3", None)
