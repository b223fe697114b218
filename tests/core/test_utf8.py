"""The character boundary: a UTF-8 character cut across reads must come out whole."""

from __future__ import annotations

import codecs

from sse_proxy.core.utf8 import decode_replacing, literal_offsets, make_stream_decoder
from tests.support.cuts import MESSAGE, TEXT, every_cut, raw_text_stream, run

BYTES = MESSAGE.encode()


def test_fixture_has_two_three_and_four_byte_characters() -> None:
    """The fixture must keep its multi-byte characters, or every test below is vacuous."""
    widths = {len(ch.encode()) for ch in MESSAGE}
    assert {1, 2, 3, 4} <= widths


def test_stateful_decoder_survives_a_split_at_every_byte_offset() -> None:
    """The incremental decoder holds back a cut character until the rest arrives."""
    for cut, (left, right) in every_cut(BYTES):
        decode = make_stream_decoder()
        out = decode(left, False) + decode(right, False) + decode(b"", True)
        assert out == MESSAGE, f"split at byte {cut}"


def test_stateless_decode_breaks_on_the_fixture_negative_control() -> None:
    """Decoding each read alone loses characters: proof that the fixture can catch the bug."""
    broken = [
        cut
        for cut, (left, right) in every_cut(BYTES)
        if left.decode("utf-8", "replace") + right.decode("utf-8", "replace") != MESSAGE
    ]
    assert len(broken) >= 10
    assert any("\ufffd" in left.decode("utf-8", "replace") for _, (left, _r) in every_cut(BYTES))


def test_decode_replacing_matches_python_replace_and_reports_offsets() -> None:
    """One U+FFFD per maximal invalid subpart, each with its offset."""
    raw = b"a\xffb\xe6\x97c\xf0\x9f\x99d\xed\xa0\x80e\xc0\xafz"
    text, bad = decode_replacing(raw)
    assert text == raw.decode("utf-8", "replace")
    assert len(bad) == text.count("\ufffd")
    assert bad[:3] == [1, 3, 6]


def test_literal_offsets_finds_every_encoded_replacement_character() -> None:
    raw = "x\ufffdy\ufffd".encode()
    assert literal_offsets(raw) == [1, 5]
    assert literal_offsets(b"plain") == []


def test_reader_never_reports_a_split_character() -> None:
    """A stream cut inside every character yields the text and no alert at all."""
    data = raw_text_stream(["caf\u00e9", " 🙂", " 日本語"])
    for cut, pieces in every_cut(data):
        res = run(pieces, "text")
        assert res.text == "café 🙂 日本語", f"split at byte {cut}"
        assert res.alerts == (), f"split at byte {cut}"


def test_every_cut_reader_output_has_no_replacement_character() -> None:
    data = raw_text_stream(list(TEXT))
    for cut, pieces in every_cut(data):
        assert "\ufffd" not in run(pieces, "text").text, f"split at byte {cut}"


def test_incremental_decoder_is_codecs_own() -> None:
    """We use the codec module's decoder rather than a hand-written one."""
    assert make_stream_decoder().__self__.__class__ is codecs.getincrementaldecoder("utf-8")  # type: ignore[attr-defined]
