"""Bounded decompression: the observer reads every byte of gzip/deflate/br SSE, in bounded
slices, whatever the cuts; a decompression bomb stops observation, never forwarding.

Regressions: gzip/deflate output past 4 MiB per upstream chunk was dropped
(the leftover input was never fed back), and brotli output had no bound at all.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable, MutableMapping
from typing import Any

import aiohttp
import brotli
import pytest
from aiohttp import web

from sse_proxy.core import StreamReassembler
from sse_proxy.server.decompress import (
    DEFAULT_SLICE,
    RATIO_FLOOR,
    DecodeFailed,
    ObserverDecoder,
    make_observer_decoder,
)
from tests.support.logs import ALERT_EVENTS, LogEntries, named, wait_for
from tests.support.net import STREAM_ID
from tests.support.stack import StartApp, StartProxy

MIB = 1 << 20
Compress = Callable[[bytes], bytes]


def _raw_deflate(data: bytes) -> bytes:
    obj = zlib.compressobj(wbits=-15)
    return obj.compress(data) + obj.flush()


def _br(data: bytes) -> bytes:
    out: bytes = brotli.compress(data, quality=5)
    return out


def _gzip_members(data: bytes) -> bytes:
    """Two gzip members with zero padding between them (gzip(1) reads this as one file)."""
    half = len(data) // 2
    return gzip.compress(data[:half]) + b"\0\0\0" + gzip.compress(data[half:])


CODECS: list[tuple[str, Compress]] = [
    ("gzip", gzip.compress),
    ("deflate", zlib.compress),
    ("deflate", _raw_deflate),
    ("br", _br),
]
CODEC_IDS = ["gzip", "deflate-zlib", "deflate-raw", "br"]


def _event(content: str | bytes) -> bytes:
    raw = content.encode() if isinstance(content, str) else content
    return b'data: {"choices":[{"index":0,"delta":{"content":"' + raw + b'"}}]}\n\n'


# A small OpenAI stream with 2-, 3- and 4-byte characters, a byte lost on the wire (0xFF:
# sse.replacement_char at an exact offset) and CRLF framing in one frame.
SMALL = (
    _event("Grüße")
    + _event(" aus")
    + _event(" 東京 🦊")
    + _event(b" bro\xffken")
    + b'data: {"choices":[{"index":0,"delta":{"content":" crlf"}}]}\r\n\r\n'
    + _event(" €.")
    + b"data: [DONE]\n\n"
)


def _observe_plain(data: bytes) -> tuple[Any, ...]:
    """What the reassembler makes of ``data`` read in one piece."""
    r = StreamReassembler("openai", keep_text=True)
    out = r.feed(data)
    end = r.close()
    return r.text, out.events + end.events, out.alerts + end.alerts, r.summary()


def _decode(dec: ObserverDecoder, reads: list[bytes]) -> list[bytes]:
    return [piece for read in reads for piece in dec.feed(read)]


def _decoder(coding: str, **limits: Any) -> ObserverDecoder:
    dec = make_observer_decoder(coding, **limits)
    assert dec is not None
    return dec


# --------------------------------------------------------------------------- the decoder


@pytest.mark.parametrize(("coding", "compress"), [*CODECS, ("gzip", _gzip_members)])
@pytest.mark.parametrize("slice_bytes", [5, 64, DEFAULT_SLICE])
def test_every_cut_decodes_every_byte_in_bounded_slices(
    coding: str, compress: Compress, slice_bytes: int
) -> None:
    """At every two-way cut of the compressed body, with a budget far below the output
    (so leftover input must be fed back), the observer gets exactly the plain bytes, in
    slices no larger than the budget, and observes exactly what one plain read gives."""
    packed = compress(SMALL)
    expected = _observe_plain(SMALL)
    for cut in range(len(packed) + 1):
        dec = _decoder(coding, slice_bytes=slice_bytes)
        pieces = _decode(dec, [packed[:cut], packed[cut:]])
        assert b"".join(pieces) == SMALL, (coding, slice_bytes, cut)
        assert max(map(len, pieces)) <= slice_bytes
        assert (dec.bytes_in, dec.bytes_out) == (len(packed), len(SMALL))
        r = StreamReassembler("openai", keep_text=True)
        outs = [r.feed(p) for p in pieces]
        end = r.close()
        events = tuple(e for o in outs for e in o.events) + end.events
        alerts = tuple(a for o in outs for a in o.alerts) + end.alerts
        assert (r.text, events, alerts, r.summary()) == expected, (coding, slice_bytes, cut)


@pytest.mark.parametrize(("coding", "compress"), CODECS, ids=CODEC_IDS)
def test_one_read_expanding_far_past_the_budget_loses_nothing(
    coding: str, compress: Compress
) -> None:
    """One small compressed read that expands to 6 MiB comes out whole, slice by slice."""
    plain = _event("x" * 1000) * (6 * MIB // 1050)
    packed = compress(plain)
    dec = _decoder(coding)
    pieces = _decode(dec, [packed])
    assert b"".join(pieces) == plain
    assert max(map(len, pieces)) <= DEFAULT_SLICE
    assert len(pieces) >= len(plain) // DEFAULT_SLICE


@pytest.mark.parametrize(("coding", "compress"), CODECS, ids=CODEC_IDS)
def test_a_bomb_is_refused_past_its_bound_without_holding_it(
    coding: str, compress: Compress
) -> None:
    """Past the ratio (once RATIO_FLOOR is out) or the size bound, decoding stops with
    reason decompression_bomb; no slice past the bound reaches the observer."""
    packed = compress(b"\0" * (RATIO_FLOOR + 4 * MIB))
    sizes, failed = _until_failure(_decoder(coding, max_ratio=50.0), packed)
    assert failed is not None
    assert failed.reason == "decompression_bomb"
    assert failed.details["limit"] == "ratio"
    assert failed.details["ratio"] > 50
    assert max(sizes) <= DEFAULT_SLICE
    assert RATIO_FLOOR - DEFAULT_SLICE < sum(sizes) <= RATIO_FLOOR + DEFAULT_SLICE
    assert failed.details["decompressed_bytes"] > sum(sizes)  # the offending slice: held back

    sizes, failed = _until_failure(_decoder(coding, max_bytes=MIB), packed)
    assert failed is not None
    assert failed.reason == "decompression_bomb"
    assert failed.details["limit"] == "size"
    assert MIB - DEFAULT_SLICE < sum(sizes) <= MIB


def _until_failure(dec: ObserverDecoder, data: bytes) -> tuple[list[int], DecodeFailed | None]:
    """The sizes of the slices ``feed(data)`` yields before it fails, and the failure."""
    sizes: list[int] = []
    try:
        for piece in dec.feed(data):
            sizes.append(len(piece))
    except DecodeFailed as exc:
        return sizes, exc
    return sizes, None


def test_a_repetitive_answer_under_the_ratio_floor_is_read_whole() -> None:
    """A very repetitive (over 300x) but modest answer is not a bomb: below RATIO_FLOOR the
    ratio is not judged."""
    plain = _event("ab") * ((RATIO_FLOOR - MIB) // len(_event("ab")))
    packed = gzip.compress(plain)
    assert len(plain) > 300 * len(packed)
    dec = _decoder("gzip", max_ratio=2.0)
    assert sum(map(len, dec.feed(packed))) == len(plain)


@pytest.mark.parametrize(
    ("coding", "body", "reason"),
    [
        ("zstd", b"x", "unsupported_encoding"),
        ("gzip", b"\x1f\x8b\x08\x00garbage" * 4, "decode_error"),
        ("deflate", b"\xff\xff\xff\xff" * 4, "decode_error"),
        ("br", b"\xff\xff\xff\xff" * 4, "decode_error"),
    ],
)
def test_undecodable_bodies_fail_with_a_reason(coding: str, body: bytes, reason: str) -> None:
    """A coding we cannot read, or a corrupt body, is one DecodeFailed with a reason code."""
    with pytest.raises(DecodeFailed) as info:
        _decode(_decoder(coding), [body])
    assert info.value.reason == reason
    assert info.value.details["coding"] == coding


def test_identity_needs_no_decoder() -> None:
    """No Content-Encoding (or identity) is observed as is."""
    assert make_observer_decoder(None) is None
    assert make_observer_decoder(" Identity ") is None


# --------------------------------------------------------------------------- the proxy

# what differs from run to run (ids, clocks, rates), not with what was observed
VOLATILE = {"stream_id", "timestamp", "bytes", "upstream_request_id", "output_tokens_per_s"}


def _volatile(key: str) -> bool:
    return key in VOLATILE or key.endswith("_ms")


def _upstream(bodies: dict[str, tuple[str, list[bytes]]]) -> web.Application:
    """Serves ``bodies[name] = (coding, reads)`` at ``/v1/chat/completions?b=name``."""

    async def handler(request: web.Request) -> web.StreamResponse:
        coding, reads = bodies[request.query["b"]]
        headers = {"Content-Type": "text/event-stream"}
        if coding:
            headers["Content-Encoding"] = coding
        resp = web.StreamResponse(headers=headers)
        await resp.prepare(request)
        for read in reads:
            await resp.write(read)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    return app


async def _fetch(session: aiohttp.ClientSession, url: str, name: str) -> tuple[bytes, str]:
    async with session.post(f"{url}/v1/chat/completions?b={name}", json={"stream": True}) as r:
        assert r.status == 200
        return await r.read(), r.headers[STREAM_ID]


async def _observation(logs: LogEntries, sid: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The stream's alert lines and summary, without what differs between two runs."""
    line = await wait_for(logs, "stream.summary", sid)

    def clean(entry: MutableMapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in entry.items() if not _volatile(k)}

    alerts = [clean(e) for e in logs if e["event"] in ALERT_EVENTS and e.get("stream_id") == sid]
    return alerts, clean(line)


@pytest.mark.asyncio
@pytest.mark.parametrize(("coding", "compress"), CODECS, ids=CODEC_IDS)
async def test_a_read_expanding_past_4mib_is_fully_observed(
    start_app: StartApp,
    start: StartProxy,
    session: aiohttp.ClientSession,
    logs: LogEntries,
    coding: str,
    compress: Compress,
) -> None:
    """One upstream write that expands to ~6 MiB (default limits): every event is counted,
    the alerts in its tail fire at their exact offsets, the client gets the bytes as sent."""
    filler = _event("Hello, world! ") * (6 * MIB // len(_event("Hello, world! ")))
    plain = filler + _event(b"tail \xff") + b"data: {not json\n\n" + b"data: [DONE]\n\n"
    packed = compress(plain)
    assert len(packed) < 256 << 10  # so one read of the proxy expands past 4 MiB
    url = await start(await start_app(_upstream({"big": (coding, [packed])})))
    body, sid = await _fetch(session, url, "big")
    assert body == packed
    line = await wait_for(logs, "stream.summary", sid)
    assert named(logs, "stream.not_observed") == []
    assert line["observed"] is True
    assert line["bytes_observed"] == len(plain)
    assert line["events"] == filler.count(b"\n\n") + 3
    assert line["terminal_seen"] is True
    assert line["alerts"] == {"sse.replacement_char": 1, "sse.invalid_json": 1}
    (fffd,) = named(logs, "sse.replacement_char", sid)
    assert fffd["cause"] == "invalid_utf8"
    assert fffd["byte_offset"] == plain.index(b"\xff")
    assert len(named(logs, "sse.invalid_json", sid)) == 1


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("coding", "compress", "settings", "limit"),
    [
        ("gzip", gzip.compress, {}, "ratio"),
        ("br", _br, {}, "ratio"),
        ("deflate", zlib.compress, {"max_decompressed_bytes": 2 * MIB}, "size"),
        ("br", _br, {"max_decompressed_bytes": 2 * MIB}, "size"),
    ],
)
async def test_a_bomb_stops_observation_but_is_forwarded_byte_exact(
    start_app: StartApp,
    start: StartProxy,
    session: aiohttp.ClientSession,
    logs: LogEntries,
    coding: str,
    compress: Compress,
    settings: dict[str, Any],
    limit: str,
) -> None:
    """A body of 64 MiB of zeros behind a valid first event: logged once as
    stream.not_observed (decompression_bomb, with ratio and sizes), not observed any
    further (no verdicts about an end it never read), and forwarded exactly as sent."""
    plain = _event("hi") + b"\0" * (64 * MIB)
    packed = compress(plain)
    reads = [packed[i : i + 16384] for i in range(0, len(packed), 16384)]
    url = await start(await start_app(_upstream({"bomb": (coding, reads)})), **settings)
    body, sid = await _fetch(session, url, "bomb")
    assert body == packed
    line = await wait_for(logs, "stream.summary", sid)
    (notice,) = named(logs, "stream.not_observed", sid)
    assert notice["reason"] == "decompression_bomb"
    assert notice["limit"] == limit
    assert notice["coding"] == coding
    assert notice["compressed_bytes"] <= len(packed)
    if limit == "ratio":
        assert notice["ratio"] > 100
        assert notice["decompressed_bytes"] > RATIO_FLOOR
    else:
        assert notice["decompressed_bytes"] > 2 * MIB
    assert notice["decompressed_bytes"] < len(plain)
    assert line["observed"] is False
    assert line["bytes"] == len(packed)
    assert line["bytes_observed"] < notice["decompressed_bytes"]
    assert line["events"] == 1
    assert "sse.truncated" not in line["alerts"]
    assert "sse.unterminated_frame" not in line["alerts"]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("coding", "compress"), [*CODECS, ("gzip", _gzip_members)], ids=[*CODEC_IDS, "gzip-members"]
)
async def test_every_cut_of_a_small_compressed_stream_observes_the_same(
    start_app: StartApp,
    start: StartProxy,
    session: aiohttp.ClientSession,
    logs: LogEntries,
    coding: str,
    compress: Compress,
) -> None:
    """Upstream writes the compressed body in two pieces, cut at every byte: the proxy logs
    the same alerts (same offsets) and the same summary as for the plain body, and the
    client gets the compressed bytes as sent."""
    packed = compress(SMALL)
    bodies = {"plain": ("", [SMALL])}
    for cut in range(len(packed) + 1):
        bodies[str(cut)] = (coding, [packed[:cut], packed[cut:]])
    url = await start(await start_app(_upstream(bodies)), log_text=True)
    body, sid = await _fetch(session, url, "plain")
    assert body == SMALL
    expected_alerts, expected_summary = await _observation(logs, sid)
    assert [a["event"] for a in expected_alerts] == ["sse.replacement_char", "sse.crlf_framing"]
    for cut in range(len(packed) + 1):
        body, sid = await _fetch(session, url, str(cut))
        assert body == packed, cut
        alerts, line = await _observation(logs, sid)
        assert alerts == expected_alerts, cut
        assert line == expected_summary, cut
