"""Hand-run benchmark of the sans-IO core parser against real third-party SSE decoders.

Not a test: run it by hand and read the figures (``bench/README.md`` says how)::

    .venv/bin/python -m bench.bench_core [--size-mb 10] [--repeats 5] [--seed 1]
    .venv/bin/python -m bench.bench_core --profile        # cProfile of sse-proxy's full path

Every contender gets the SAME list of reads (random sizes, seeded) of the same corpus and
must produce exactly the expected text (full path) or the expected list of event payloads
(framing only); a contender that does not is marked in its table and left out of the
ratios, and if sse-proxy itself is wrong the run exits with status 1. Timings are the best
of ``--repeats`` passes with the garbage collector disabled; the contenders take turns
within each repeat so background load hits them alike.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import platform
import pstats
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol, TextIO, cast

import httpx
import orjson
import sseclient
from httpx._decoders import TextDecoder
from httpx_sse._api import _iter_sse_lines
from httpx_sse._decoders import SSEDecoder as HttpxSSEDecoder
from openai._streaming import SSEDecoder as OpenAISSEDecoder

from bench.corpus import CORPORA, Corpus, build, reads
from sse_proxy.core import StreamReassembler

TARGET_FULL = 2.5  # sse-proxy full path vs the fastest other contender, LF corpus
TARGET_FRAMING = 3.0  # framing only, LF corpus
TARGET_CRLF = 0.15  # sse-proxy's CRLF slowdown vs LF (same content), at most

Result = str | list[str]  # full path: the text; framing only: the event payloads
RunFn = Callable[[list[bytes], str], Result]


class _HasData(Protocol):
    @property
    def data(self) -> str: ...


# -- text extraction, as a user of each library would write it -----------------------------


def _extract_openai(obj: Any, parts: list[str]) -> None:
    choices = obj.get("choices")
    if choices:
        content = choices[0].get("delta", {}).get("content")
        if content:
            parts.append(content)


def _extract_anthropic(obj: Any, parts: list[str]) -> None:
    if obj.get("type") == "content_block_delta":
        delta = obj["delta"]
        if delta.get("type") == "text_delta":
            parts.append(delta["text"])


def _extract_mcp(obj: Any, parts: list[str]) -> None:
    result = obj.get("result")
    if result:
        parts.extend(c["text"] for c in result.get("content", ()) if c.get("type") == "text")


_EXTRACT: dict[str, Callable[[Any, list[str]], None]] = {
    "openai": _extract_openai,
    "anthropic": _extract_anthropic,
    "mcp": _extract_mcp,
}


# -- contenders ------------------------------------------------------------------------------


def proxy_full(reads: list[bytes], dialect: str) -> str:
    """sse-proxy's passthrough hot path: auto-detected dialect, full validation and
    reassembly, no event objects or frame offsets (nothing downstream asks for them)."""
    r = StreamReassembler(dialect=None, emit_events=False, frame_ends=False)
    feed = r.feed
    for chunk in reads:
        feed(chunk)
    r.close()
    return r.text


def proxy_full_events(reads: list[bytes], dialect: str) -> str:
    """As :func:`proxy_full`, but also building the SSEEvent objects (and looking at them)."""
    r = StreamReassembler(dialect=None, emit_events=True)
    feed = r.feed
    n = 0
    for chunk in reads:
        n += len(feed(chunk).events)
    n += len(r.close().events)
    return r.text


def proxy_framing(reads: list[bytes], dialect: str) -> list[str]:
    """sse-proxy as a bare SSE decoder: ``dialect="none"`` (no JSON), events and offsets on."""
    r = StreamReassembler(dialect="none", emit_events=True)
    feed = r.feed
    out: list[str] = []
    append = out.append
    for chunk in reads:
        for ev in feed(chunk).events:
            append(ev.data)
    for ev in r.close().events:
        append(ev.data)
    return out


def openai_events(reads: list[bytes]) -> Iterator[_HasData]:
    """The openai SDK's decoder, driven as ``Stream._iter_events`` drives it."""
    return OpenAISSEDecoder().iter_bytes(iter(reads))


class _TextResponse:
    """The one part of ``httpx.Response`` that httpx-sse uses: ``iter_text()``.

    Same as httpx's ``Response.iter_text()`` with its default ``chunk_size=None``: httpx's
    own ``TextDecoder`` (a codecs incremental UTF-8 decoder, ``errors="replace"``) per read,
    empty strings dropped, then the decoder's flush.
    """

    def __init__(self, reads: list[bytes]) -> None:
        self._reads = reads

    def iter_text(self) -> Iterator[str]:
        decoder = TextDecoder("utf-8")
        for chunk in self._reads:
            text = decoder.decode(chunk)
            if text:
                yield text
        text = decoder.flush()
        if text:
            yield text


def httpx_sse_events(reads: list[bytes]) -> Iterator[_HasData]:
    """httpx-sse's ``EventSource.iter_sse`` (less the content-type check) over the reads."""
    decoder = HttpxSSEDecoder()
    for line in _iter_sse_lines(cast(httpx.Response, _TextResponse(reads))):
        sse = decoder.decode(line.rstrip("\n"))
        if sse is not None:
            yield sse


def sseclient_events(reads: list[bytes]) -> Iterator[_HasData]:
    """sseclient-py: ``SSEClient(event_source).events()``, the source being the reads."""
    return cast(Iterator[_HasData], sseclient.SSEClient(iter(reads)).events())


def make_full(events: Callable[[list[bytes]], Iterable[_HasData]], loads: Any) -> RunFn:
    """Reassemble text from a third-party decoder's events: ``loads`` each payload."""

    def run(reads: list[bytes], dialect: str) -> str:
        extract = _EXTRACT[dialect]
        parts: list[str] = []
        for ev in events(reads):
            data = ev.data
            if data == "[DONE]":
                break
            extract(loads(data), parts)
        return "".join(parts)

    return run


def make_framing(events: Callable[[list[bytes]], Iterable[_HasData]]) -> RunFn:
    """A third-party decoder as a bare SSE decoder: the payloads, no JSON."""

    def run(reads: list[bytes], dialect: str) -> list[str]:
        return [ev.data for ev in events(reads)]

    return run


@dataclass(frozen=True, slots=True)
class Contender:
    name: str
    path: str  # "full" or "framing"
    run: RunFn
    ours: bool = False
    reference: bool = False  # shown, but not counted as "the fastest other"


def contenders() -> list[Contender]:
    return [
        Contender("sse-proxy (emit_events=False)", "full", proxy_full, ours=True),
        Contender("sse-proxy (emit_events=True)", "full", proxy_full_events, ours=True),
        Contender("openai SDK SSEDecoder + json", "full", make_full(openai_events, json.loads)),
        Contender("httpx-sse + json", "full", make_full(httpx_sse_events, json.loads)),
        Contender("sseclient-py + json", "full", make_full(sseclient_events, json.loads)),
        Contender(
            "[ref] openai SSEDecoder + orjson",
            "full",
            make_full(openai_events, orjson.loads),
            reference=True,
        ),
        Contender(
            "[ref] httpx-sse + orjson",
            "full",
            make_full(httpx_sse_events, orjson.loads),
            reference=True,
        ),
        Contender('sse-proxy (dialect="none")', "framing", proxy_framing, ours=True),
        Contender("openai SDK SSEDecoder", "framing", make_framing(openai_events)),
        Contender("httpx-sse", "framing", make_framing(httpx_sse_events)),
        Contender("sseclient-py", "framing", make_framing(sseclient_events)),
    ]


# -- measuring -------------------------------------------------------------------------------


@dataclass(slots=True)
class Row:
    contender: Contender
    best: float = float("inf")
    error: str | None = None  # why this contender's output is not usable

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(slots=True)
class CorpusResult:
    corpus: Corpus
    n_reads: int
    rows: list[Row] = field(default_factory=list)
    proxy_dialect: str = ""
    proxy_alerts: dict[str, int] = field(default_factory=dict)

    def row(self, name: str) -> Row:
        return next(r for r in self.rows if r.contender.name == name)

    def ours(self, path: str) -> Row:
        return next(r for r in self.rows if r.contender.ours and r.contender.path == path)

    def fastest_other(self, path: str, *, with_reference: bool = False) -> Row | None:
        others = [
            r
            for r in self.rows
            if r.ok
            and not r.contender.ours
            and r.contender.path == path
            and (with_reference or not r.contender.reference)
        ]
        return min(others, key=lambda r: r.best, default=None)


def _first_difference(got: Result, want: Result) -> str:
    if isinstance(got, str) and isinstance(want, str):
        i = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), None)
        if i is None:
            return f"text length {len(got)} != {len(want)}"
        return f"text differs at char {i}: {got[i : i + 20]!r} != {want[i : i + 20]!r}"
    if isinstance(got, list) and isinstance(want, list):
        i = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), None)
        if i is None:
            return f"{len(got)} events != {len(want)}"
        return f"event {i} differs: {got[i][:40]!r} != {want[i][:40]!r}"
    return "wrong result type"


def verify(row: Row, corpus: Corpus, chunks: list[bytes]) -> None:
    """One untimed pass (also the warm-up); sets ``row.error`` unless the output is exact."""
    c = row.contender
    want: Result = corpus.text if c.path == "full" else list(corpus.payloads)
    try:
        got = c.run(chunks, corpus.dialect)
    except Exception as exc:  # a third-party decoder that chokes on this corpus
        row.error = f"raised {type(exc).__name__}: {str(exc)[:60]}"
        return
    if got != want:
        row.error = "WRONG OUTPUT: " + _first_difference(got, want)


def time_once(run: RunFn, chunks: list[bytes], dialect: str) -> float:
    gc.collect()
    gc.disable()
    try:
        t0 = time.process_time()  # this process's CPU time: other load on the box stays out
        result = run(chunks, dialect)
        elapsed = time.process_time() - t0
    finally:
        gc.enable()
    del result
    return elapsed


def proxy_check(chunks: list[bytes]) -> tuple[str, dict[str, int]]:
    """The dialect sse-proxy detected and the alerts it raised on this corpus."""
    r = StreamReassembler(dialect=None, emit_events=False)
    for chunk in chunks:
        r.feed(chunk)
    r.close()
    return r.dialect, dict(r.alert_counts)


def bench_corpus(
    corpus: Corpus, chunks: list[bytes], repeats: int, only: list[Contender]
) -> CorpusResult:
    res = CorpusResult(corpus, len(chunks), [Row(c) for c in only])
    res.proxy_dialect, res.proxy_alerts = proxy_check(chunks)
    for row in res.rows:
        verify(row, corpus, chunks)
    live = [r for r in res.rows if r.ok]
    for _ in range(repeats):
        for row in live:
            row.best = min(row.best, time_once(row.contender.run, chunks, corpus.dialect))
    return res


# -- reporting -------------------------------------------------------------------------------

_TITLES = {
    "lf": "OpenAI Chat Completions, LF",
    "crlf": "OpenAI Chat Completions, CRLF",
    "anthropic": "Anthropic Messages, LF",
    "mcp": "MCP tool call (progress and log notifications, then the result), LF",
}


def _mbps(res: CorpusResult, row: Row) -> float:
    return len(res.corpus.data) / 1e6 / row.best


def _evps(res: CorpusResult, row: Row) -> float:
    return res.corpus.events / row.best


def print_table(res: CorpusResult, out: TextIO = sys.stdout) -> None:
    c = res.corpus

    def p(s: str = "") -> None:
        print(s, file=out)

    p(
        f"== {c.name}: {_TITLES.get(c.name, c.name)} -- {len(c.data) / 1e6:.2f} MB, "
        f"{c.events:,} events, {len(c.text):,} chars of text, {res.n_reads:,} reads =="
    )
    p(f"{'path':<8} {'contender':<34} {'MB/s':>8} {'events/s':>11} {'sse-proxy is':>13}")
    for path in ("full", "framing"):
        ours = res.ours(path)
        for row in (r for r in res.rows if r.contender.path == path):
            name = row.contender.name
            if not row.ok:
                p(f"{path:<8} {name:<34} {'--':>8} {'--':>11}  {row.error}")
                continue
            ratio = "--"
            if ours.ok:
                ratio = f"{row.best / ours.best:.2f}x"
            p(f"{path:<8} {name:<34} {_mbps(res, row):8.1f} {_evps(res, row):11,.0f} {ratio:>13}")
    alerts = ", ".join(f"{k}={v}" for k, v in sorted(res.proxy_alerts.items())) or "none"
    p(f"   sse-proxy detected dialect={res.proxy_dialect}; alerts: {alerts}")
    p()


def _verdict(ok: bool) -> str:
    return "OK" if ok else "MISSED"


def summary(results: dict[str, CorpusResult], out: TextIO = sys.stdout) -> list[str]:
    """Print the headline ratios; return the names of failed targets."""

    def p(s: str = "") -> None:
        print(s, file=out)

    missed: list[str] = []
    p("== summary ==")
    for name, res in results.items():
        for path, label, target in (
            ("full", "full validation+reassembly", TARGET_FULL),
            ("framing", "framing only", TARGET_FRAMING),
        ):
            ours, other = res.ours(path), res.fastest_other(path)
            if not ours.ok or other is None:
                p(f"{label}, {name}: n/a")
                continue
            ratio = other.best / ours.best
            line = (
                f"{label}, {name}: sse-proxy is {ratio:.1f}x the fastest other "
                f"({other.contender.name})"
            )
            if name == "lf":
                line += f"   [target >= {target:g}x: {_verdict(ratio >= target)}]"
                if ratio < target:
                    missed.append(f"{path} LF")
            p(line)
            if path == "full":
                ref = res.fastest_other(path, with_reference=True)
                if ref is not None and ref is not other:
                    p(
                        f"    (counting the orjson reference rows: {ref.best / ours.best:.1f}x "
                        f"{ref.contender.name})"
                    )
    lf, crlf = results.get("lf"), results.get("crlf")
    if lf is not None and crlf is not None:
        for path in ("full", "framing"):
            a, b = lf.ours(path), crlf.ours(path)
            if not (a.ok and b.ok):
                continue
            slow = b.best / a.best - 1
            line = f"CRLF vs LF slowdown for sse-proxy ({path}, same content): {slow:+.0%}"
            if path == "full":
                line += f"   [target <= +{TARGET_CRLF:.0%}: {_verdict(slow <= TARGET_CRLF)}]"
                if slow > TARGET_CRLF:
                    missed.append("CRLF slowdown")
            p(line)
    return missed


def core_revision() -> str:
    """The commit the core was measured at, and whether ``sse_proxy/core`` had local edits."""
    root = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "sse_proxy/core"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return rev + (" + uncommitted changes in sse_proxy/core" if dirty else "")


def header(args: argparse.Namespace) -> str:
    def ver(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "?"

    libs = ", ".join(
        f"{d} {ver(d)}" for d in ("openai", "httpx", "httpx-sse", "sseclient-py", "orjson")
    )
    return (
        f"sse-proxy core benchmark: Python {platform.python_version()} "
        f"({platform.python_implementation()}), {platform.machine()}; {libs}\n"
        f"sse-proxy at {core_revision()}\n"
        f"size {args.size_mb:g} MB/corpus, seed {args.seed}, reads {args.min_read}.."
        f"{args.max_read} B, best of {args.repeats}, gc off, CPU time of this process; "
        "MB = 10**6 B\n"
        f"'sse-proxy is' = this row's time / sse-proxy's time on the same path "
        f'(full rows vs emit_events=False, framing rows vs dialect="none")\n'
    )


# -- profiling -------------------------------------------------------------------------------


def _reassemble(dialect: str | None, emit_events: bool) -> RunFn:
    def run(reads: list[bytes], _: str) -> str:
        r = StreamReassembler(dialect=dialect, emit_events=emit_events)
        feed = r.feed
        for chunk in reads:
            feed(chunk)
        r.close()
        return r.text

    return run


def _loads_all(loads: Any, payloads: list[str]) -> RunFn:
    """Decode every payload with ``loads`` (the reads passed in are ignored)."""

    def run(reads: list[bytes], _: str) -> str:
        for p in payloads:
            loads(p)
        return ""

    return run


def breakdown(corpus: Corpus, chunks: list[bytes], repeats: int) -> None:
    """Where sse-proxy's time goes, by switching its stages on one at a time (no profiler).

    cProfile charges every Python call, which inflates a parser made of small calls; these
    wall times are the real costs. The JSON rows time the decoder alone on every payload.
    """
    payloads = [p for p in corpus.payloads if p != "[DONE]"]  # str, as the core loads them
    stages: list[tuple[str, RunFn, list[bytes]]] = [
        ('dialect="none", emit_events=False', _reassemble("none", False), chunks),
        ('dialect="none", emit_events=True', _reassemble("none", True), chunks),
        (
            f'dialect="{corpus.dialect}", emit_events=False',
            _reassemble(corpus.dialect, False),
            chunks,
        ),
        ("dialect=None (auto), emit_events=False", _reassemble(None, False), chunks),
        ("dialect=None (auto), emit_events=True", _reassemble(None, True), chunks),
        ("orjson.loads of every payload, alone", _loads_all(orjson.loads, payloads), chunks),
        ("json.loads of every payload, alone", _loads_all(json.loads, payloads), chunks),
    ]
    best = [float("inf")] * len(stages)
    for _ in range(repeats):
        for i, (_name, run, arg) in enumerate(stages):
            best[i] = min(best[i], time_once(run, arg, corpus.dialect))
    mb = len(corpus.data) / 1e6
    print(f"== stage costs, corpus {corpus.name} (best of {repeats}, gc off, no profiler) ==")
    print(f"{'stage':<42} {'ms':>8} {'MB/s':>8} {'us/event':>9}")
    for (name, _run, _arg), t in zip(stages, best, strict=True):
        print(f"{name:<42} {t * 1e3:8.1f} {mb / t:8.1f} {t * 1e6 / corpus.events:9.2f}")
    print()


def profile(corpus: Corpus, chunks: list[bytes], top: int, sort: str) -> None:
    """cProfile of one pass of sse-proxy's full path; top functions by ``sort``."""
    proxy_full(chunks, corpus.dialect)  # warm-up
    prof = cProfile.Profile()
    gc.collect()
    gc.disable()
    try:
        prof.enable()
        text = proxy_full(chunks, corpus.dialect)
        prof.disable()
    finally:
        gc.enable()
    if text != corpus.text:
        raise SystemExit("sse-proxy produced the wrong text under the profiler")
    print(
        f"== cProfile: sse-proxy full path (emit_events=False), corpus {corpus.name}, "
        f"{len(corpus.data) / 1e6:.2f} MB, {corpus.events:,} events, {len(chunks):,} reads =="
    )
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    stats.strip_dirs().sort_stats(sort).print_stats(top)
    print(buf.getvalue().strip())


# -- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.bench_core", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--size-mb", type=float, default=10.0, help="size of each corpus (MB)")
    ap.add_argument("--repeats", type=int, default=5, help="timed passes; the best counts")
    ap.add_argument("--seed", type=int, default=1, help="seed of the corpora and the read sizes")
    ap.add_argument(
        "--corpus",
        action="append",
        choices=CORPORA,
        help="corpus to run (repeatable; default: all; --profile: the first given, else lf)",
    )
    ap.add_argument("--min-read", type=int, default=1, help="smallest read (bytes)")
    ap.add_argument("--max-read", type=int, default=4096, help="largest read (bytes)")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="stage costs and a cProfile of sse-proxy's full path, instead of the comparison",
    )
    ap.add_argument("--top", type=int, default=25, help="--profile: functions to print")
    ap.add_argument(
        "--sort", default="tottime", help="--profile: pstats sort key (tottime, cumulative...)"
    )
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = tuple(args.corpus or (("lf",) if args.profile else CORPORA))
    if args.profile:
        names = names[:1]
    t_start = time.perf_counter()
    corpora = build(names, args.size_mb, args.seed)
    if args.profile:
        corpus = corpora[0]
        chunks = reads(corpus.data, args.seed, args.min_read, args.max_read)
        breakdown(corpus, chunks, args.repeats)
        profile(corpus, chunks, args.top, args.sort)
        return 0

    print(header(args))
    results: dict[str, CorpusResult] = {}
    for corpus in corpora:
        chunks = reads(corpus.data, args.seed, args.min_read, args.max_read)
        res = bench_corpus(corpus, chunks, args.repeats, contenders())
        results[corpus.name] = res
        print_table(res)
        sys.stdout.flush()
    missed = summary(results)
    print(f"\n(total wall time {time.perf_counter() - t_start:.0f} s)")

    broken = [
        f"{name}: {row.contender.name}: {row.error}"
        for name, res in results.items()
        for row in res.rows
        if row.contender.ours and not row.ok
    ]
    if broken:
        print("\n!!! sse-proxy VERIFICATION FAILED !!!", file=sys.stderr)
        for line in broken:
            print("  " + line, file=sys.stderr)
        return 1
    if missed:
        print(f"targets missed: {', '.join(missed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
