"""Alerts as log lines: floods rate-limited per stream and kind, counts exact, secrets redacted.

Most tests capture structlog events with ``structlog.testing.capture_logs``; one renders a
real JSON line through ``configure_logging``, and one floods the real ``sse-proxy check``.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from sse_proxy.core import Alert, CrlfFraming, InvalidJson, OversizedFrame, ReplacementChar
from sse_proxy.obs.logs import get_logger, new_stream_id
from sse_proxy.obs.redact import REDACTED, redact_headers, redact_url
from sse_proxy.obs.sink import AlertSink
from tests.support.logs import configured_logging

FFFD_NAME = "sse.replacement_char"


def fffd(offset: int) -> ReplacementChar:
    return ReplacementChar(cause=ReplacementChar.INVALID_UTF8, byte_offset=offset, event_index=0)


def invalid_json(offset: int) -> InvalidJson:
    return InvalidJson(byte_offset=offset, event_index=1, error="eof", preview="{")


def oversized(offset: int) -> OversizedFrame:
    return OversizedFrame(kind="line", limit=10, byte_offset=offset)


def crlf(mixed: bool) -> CrlfFraming:
    return CrlfFraming(counts={"lf": 1, "crlf": 2, "cr": 0}, mixed=mixed)


def sink(max_per_kind: int = 10, **bind: Any) -> AlertSink:
    return AlertSink(structlog.get_logger().bind(**bind), max_per_kind=max_per_kind)


def of(logs: Sequence[Mapping[str, Any]], event: str) -> list[Mapping[str, Any]]:
    return [entry for entry in logs if entry["event"] == event]


# -- rate limiting ------------------------------------------------------------------------


def test_flood_logs_the_first_n_in_full_then_only_counts() -> None:
    s = sink(stream_id="s1")
    with capture_logs() as logs:
        for i in range(1000):
            s.emit(fffd(i))
        s.summary(ended_by="eof")
    lines = of(logs, FFFD_NAME)
    assert len(lines) == 10
    assert [e["byte_offset"] for e in lines] == list(range(10))
    assert all(e["cause"] == "invalid_utf8" and e["event_index"] == 0 for e in lines)
    assert all(e["stream_id"] == "s1" for e in lines)
    assert [e.get("further_suppressed", False) for e in lines] == [False] * 9 + [True]
    (summary,) = of(logs, "stream.summary")
    assert summary["alerts"] == {FFFD_NAME: 1000}
    assert summary["alerts_suppressed"] == {FFFD_NAME: 990}
    assert summary["ended_by"] == "eof"
    assert s.counts == {FFFD_NAME: 1000}
    assert s.suppressed == {FFFD_NAME: 990}
    assert len(logs) == 11


def test_kinds_are_limited_independently_and_counted_exactly() -> None:
    s = sink()
    alerts: list[Alert] = []
    for i in range(60):
        alerts.append(fffd(i))
        if i % 20 == 0:
            alerts.append(invalid_json(i))
        if i % 2 == 0:
            alerts.append(oversized(i))
    with capture_logs() as logs:
        s.emit_all(tuple(alerts))
        s.summary()
    assert len(of(logs, FFFD_NAME)) == 10
    assert len(of(logs, "sse.invalid_json")) == 3
    assert len(of(logs, "sse.oversized_frame")) == 10
    (summary,) = of(logs, "stream.summary")
    assert summary["alerts"] == {FFFD_NAME: 60, "sse.invalid_json": 3, "sse.oversized_frame": 30}
    assert summary["alerts_suppressed"] == {FFFD_NAME: 50, "sse.oversized_frame": 20}
    # A kind under its limit never gets the suppression marker.
    assert not any("further_suppressed" in e for e in of(logs, "sse.invalid_json"))


def test_each_stream_has_its_own_budget() -> None:
    first, second = sink(stream_id="a"), sink(stream_id="b")
    with capture_logs() as logs:
        for i in range(25):
            first.emit(fffd(i))
            second.emit(fffd(i))
    assert len([e for e in logs if e["stream_id"] == "a"]) == 10
    assert len([e for e in logs if e["stream_id"] == "b"]) == 10
    assert first.suppressed == second.suppressed == {FFFD_NAME: 15}


@pytest.mark.parametrize("limit", [0, 1, 3])
def test_max_per_kind_is_honoured(limit: int) -> None:
    s = sink(max_per_kind=limit)
    with capture_logs() as logs:
        for i in range(7):
            s.emit(fffd(i))
        s.summary()
    assert len(of(logs, FFFD_NAME)) == limit
    assert of(logs, "stream.summary")[0]["alerts"] == {FFFD_NAME: 7}
    assert of(logs, "stream.summary")[0]["alerts_suppressed"] == {FFFD_NAME: 7 - limit}


def test_summary_without_suppression_has_no_suppressed_field() -> None:
    s = sink()
    with capture_logs() as logs:
        s.emit(fffd(0))
        s.summary(bytes=12)
    (summary,) = of(logs, "stream.summary")
    assert summary["alerts"] == {FFFD_NAME: 1}
    assert "alerts_suppressed" not in summary
    assert summary["bytes"] == 12
    assert summary["log_level"] == "info"


# -- levels -------------------------------------------------------------------------------


def test_levels_follow_the_alert_and_warned_tracks_the_worst() -> None:
    s = sink()
    with capture_logs() as logs:
        s.emit(crlf(mixed=False))
        assert not s.warned
        s.emit(fffd(0))
        assert s.warned
        s.emit(crlf(mixed=True))
    assert [(e["event"], e["log_level"]) for e in logs] == [
        ("sse.crlf_framing", "info"),
        (FFFD_NAME, "warning"),
        ("sse.crlf_framing", "warning"),
    ]
    assert s.warned  # an info alert after a warning does not lower it


def test_a_suppressed_warning_still_sets_warned() -> None:
    """The exit status of `check` must not depend on the log budget."""
    s = sink(max_per_kind=2)
    with capture_logs() as logs:
        s.emit(crlf(mixed=False))
        s.emit(crlf(mixed=False))
        s.emit(crlf(mixed=True))  # over the budget: not logged, but a warning all the same
    assert [e["log_level"] for e in logs] == ["info", "info"]
    assert s.warned


def test_no_alerts_is_not_warned() -> None:
    s = sink()
    with capture_logs() as logs:
        s.emit_all(())
        s.summary()
    assert not s.warned
    assert of(logs, "stream.summary")[0]["alerts"] == {}


def _lazy_sink(binds: list[str]) -> AlertSink:
    def make() -> Any:
        binds.append("bound")
        return get_logger(stream_id="0123456789abcdef")

    return AlertSink(make_logger=make)


def test_a_summary_the_level_filters_out_binds_no_logger() -> None:
    """At ``--log-level warning`` a clean stream logs nothing: its logger is never bound
    (a stream's start and end are the proxy's per-request cost); a broken one's
    warning summary binds it and is written, with the stream's fields."""
    binds: list[str] = []
    with configured_logging("json", level="warning") as stream:
        clean = _lazy_sink(binds)
        clean.summary(level="info", verdict="ok")
        assert binds == []
        assert stream.getvalue() == ""
        broken = _lazy_sink(binds)
        broken.emit(invalid_json(3))
        broken.summary(level="warning", verdict="broken")
    assert binds == ["bound"]
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["event"] for line in lines] == ["sse.invalid_json", "stream.summary"]
    assert {line["stream_id"] for line in lines} == {"0123456789abcdef"}
    assert lines[1]["alerts"] == {"sse.invalid_json": 1}


def test_a_lazy_sink_logs_an_info_summary_where_info_is_written() -> None:
    binds: list[str] = []
    with configured_logging("json", level="info") as stream:
        _lazy_sink(binds).summary(level="info", verdict="ok")
    (line,) = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert binds == ["bound"]
    assert (line["event"], line["level"], line["verdict"]) == ("stream.summary", "info", "ok")
    assert line["stream_id"] == "0123456789abcdef"
    assert line["alerts"] == {}


# -- redaction helpers --------------------------------------------------------------------


def test_redact_headers_hides_every_secret_looking_header_in_any_case() -> None:
    headers = {
        "Authorization": "Bearer sk-1",
        "PROXY-AUTHORIZATION": "Basic x",
        "x-api-key": "k",
        "Api-Key": "k",
        "Cookie": "a=b",
        "Set-Cookie": "a=b",
        "X-Custom-Token": "t",
        "X-Client-Secret": "s",
        "X-Session-Id": "s",
        "Content-Type": "text/event-stream",
        "Accept": "*/*",
        "X-Request-Id": "r-1",
    }
    out = redact_headers(headers)
    assert list(out) == list(headers)
    kept = {"Content-Type", "Accept", "X-Request-Id"}
    for name, value in out.items():
        assert value == (headers[name] if name in kept else REDACTED), name


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "https://api.example.com/v1/chat?api_key=abc&model=gpt-4",
            f"https://api.example.com/v1/chat?api_key={REDACTED}&model=gpt-4",
        ),
        (
            "https://h/p?model=m&access_token=t1&KEY=t2&x-goog-api-key=t3#frag",
            f"https://h/p?model=m&access_token={REDACTED}&KEY={REDACTED}"
            f"&x-goog-api-key={REDACTED}#frag",
        ),
        ("https://h/p?sig=abc&se=2030", f"https://h/p?sig={REDACTED}&se=2030"),
        ("https://user:pass@h.example/v1", f"https://{REDACTED}@h.example/v1"),
        ("http://token@h:8080/a@b", f"http://{REDACTED}@h:8080/a@b"),
        (
            "https://u:p@h/v1?secret=s&q=1",
            f"https://{REDACTED}@h/v1?secret={REDACTED}&q=1",
        ),
        (
            "https://api.openai.com/v1/chat/completions",
            "https://api.openai.com/v1/chat/completions",
        ),
        ("https://h/p?monkey=1", f"https://h/p?monkey={REDACTED}"),  # 'key' inside: redacted
    ],
)
def test_redact_url_hides_userinfo_and_key_like_query_values(url: str, expected: str) -> None:
    assert redact_url(url) == expected
    assert redact_url(expected) == expected  # idempotent


# -- the rendered JSON line -------------------------------------------------------------------


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """configure_logging(fmt="json") into a StringIO; the previous setup restored after."""
    with configured_logging("json") as stream:
        yield stream


def test_alert_renders_as_one_json_object_per_line(json_log: io.StringIO) -> None:
    from sse_proxy.obs.logs import get_logger

    s = AlertSink(get_logger(stream_id="0123456789abcdef", source="-"), max_per_kind=1)
    s.emit(fffd(42))
    s.emit(fffd(43))  # suppressed
    s.emit(crlf(mixed=True))
    s.summary(ended_by="eof", url="https://h/v1?api_key=SECRET")
    lines = json_log.getvalue().splitlines()
    assert len(lines) == 3
    first, second, summary = (json.loads(line) for line in lines)
    assert first["event"] == FFFD_NAME
    assert first["level"] == "warning"
    assert first["stream_id"] == "0123456789abcdef"
    assert first["byte_offset"] == 42
    assert first["further_suppressed"] is True
    assert datetime.fromisoformat(first["timestamp"]).tzinfo is not None
    assert second["counts"] == {"lf": 1, "crlf": 2, "cr": 0}  # a dict stays a JSON object
    assert summary["event"] == "stream.summary"
    assert summary["level"] == "info"
    assert summary["alerts"] == {FFFD_NAME: 2, "sse.crlf_framing": 1}
    assert summary["alerts_suppressed"] == {FFFD_NAME: 1}
    assert "SECRET" not in json_log.getvalue()  # the last line of defence redacts URLs


# -- a real flood through `sse-proxy check` -----------------------------------------------


def test_check_flood_of_100k_invalid_bytes_logs_a_few_lines_and_the_exact_count() -> None:
    """Each 0xFF is its own maximal invalid subpart: 100k U+FFFD, so 100k alerts."""
    n = 100_000
    proc = subprocess.run(
        [sys.executable, "-m", "sse_proxy", "check", "--text", "-"],
        input=b"data: " + b"\xff" * n + b"\n\n",
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stdout.decode() == "\ufffd" * n
    err = proc.stderr.decode()
    assert "Traceback" not in err
    logs = [json.loads(line) for line in err.splitlines()]
    fffd_lines = of(logs, FFFD_NAME)
    print(f"{n} invalid bytes through check: {len(fffd_lines)} alert lines, {len(logs)} in all")
    assert 1 <= len(fffd_lines) <= 10
    assert fffd_lines[-1]["further_suppressed"] is True
    (summary,) = of(logs, "stream.summary")
    assert summary["alerts"] == {FFFD_NAME: n}
    assert summary["alerts_suppressed"] == {FFFD_NAME: n - len(fffd_lines)}
    assert len(logs) == len(fffd_lines) + 1


def test_stream_ids_are_sixteen_hex_digits_and_never_repeat() -> None:
    # more than one batch of the pool the ids are drawn from
    ids = [new_stream_id() for _ in range(3000)]
    assert all(len(i) == 16 and int(i, 16) >= 0 for i in ids)
    assert len(set(ids)) == len(ids)


def test_a_forked_worker_never_draws_an_id_its_parent_will() -> None:
    new_stream_id()  # the parent holds a batch drawn before the fork
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker: its ids, to the parent, then out without cleanup
        try:
            os.write(write, ",".join(new_stream_id() for _ in range(100)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = set(pipe.read().split(","))
    os.waitpid(pid, 0)
    parent = {new_stream_id() for _ in range(300)}
    assert len(child) == 100
    assert not child & parent, "a worker drew the ids its parent's batch still held"


def _structlog_stamp(nanos: int) -> str:
    """What structlog's ``TimeStamper(fmt="iso", utc=True)`` writes at that instant: its
    datetime.now(utc).isoformat(), "+00:00" made "Z" (now() floors to the microsecond)."""
    second, rest = divmod(nanos, 1_000_000_000)
    at = datetime.fromtimestamp(second, tz=UTC).replace(microsecond=rest // 1000)
    return at.isoformat().replace("+00:00", "Z")


def test_utc_timestamp_writes_what_structlogs_timestamper_writes() -> None:
    """Instants in order and out of it, within one second and across seconds, days, a leap
    day and a year's end, on a whole second (no fraction, as isoformat()), one nanosecond
    either side of one, and random ones (seeded): the text the stamper's per-second cache
    gives is the reference's for each."""
    import random

    from sse_proxy.obs.logs import UtcTimestamp

    seed = random.randrange(1 << 32)
    rng = random.Random(seed)
    base = 1_796_306_724 * 1_000_000_000  # 2026-12-03
    instants = [base, base + 1, base - 1, base + 999, base + 1_000, base + 999_999_999]
    instants += [base + 1_000_000_000, base + 86_400 * 1_000_000_000, base]
    instants += [1_709_164_799_999_999_000, 1_709_164_800_000_000_000]  # into 29 Feb 2024
    instants += [1_767_225_599_999_999_999, 1_767_225_600_000_000_000]  # into 2026
    instants += [rng.randrange(base, base + 10**13) for _ in range(2000)]
    instants += sorted(rng.randrange(base, base + 3 * 10**9) for _ in range(2000))
    feed = iter(instants)
    stamp = UtcTimestamp(clock=lambda: next(feed))
    for nanos in instants:
        got = stamp(None, "info", {})["timestamp"]
        assert got == _structlog_stamp(nanos), f"seed {seed}: at {nanos} ns"


def test_utc_timestamp_agrees_with_structlog_now() -> None:
    """The live clock: the stamper's line and structlog's own, taken around it, bracket it."""
    from sse_proxy.obs.logs import UtcTimestamp

    before = structlog.processors.TimeStamper(fmt="iso", utc=True)(None, "info", {})
    ours = UtcTimestamp()(None, "info", {})
    after = structlog.processors.TimeStamper(fmt="iso", utc=True)(None, "info", {})
    stamps = [datetime.fromisoformat(d["timestamp"]) for d in (before, ours, after)]
    assert stamps == sorted(stamps)
    assert ours["timestamp"].endswith("Z")


def test_a_line_without_an_exception_has_no_exception_field(json_log: io.StringIO) -> None:
    """The exception renderer runs only for lines with exc_info: those still get the
    formatted traceback; the others come out as they went in."""
    from sse_proxy.obs.logs import get_logger

    log = get_logger(stream_id="0123456789abcdef")
    log.info("plain.line", n=1)
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed.line")
    plain, failed = (json.loads(line) for line in json_log.getvalue().splitlines())
    assert "exception" not in plain
    assert "exc_info" not in plain
    assert plain["n"] == 1
    assert "ValueError" in failed["exception"]
    assert "exc_info" not in failed


def _without_time(line: str) -> str:
    fields = json.loads(line)
    fields.pop("timestamp")
    return json.dumps(fields)  # (key order kept: it is part of what is compared)


@pytest.mark.parametrize("fmt", ["json", "console"])
@pytest.mark.parametrize("configured_level", ["info", "warning", "error"])
@pytest.mark.parametrize("level", ["info", "warning"])
def test_write_line_writes_what_structlogs_own_call_writes(
    fmt: str, configured_level: str, level: str
) -> None:
    """The summary's writer against structlog's own call, the same fields bound and logged,
    in JSON and in console lines, at every level filter: the same lines (timestamps
    aside), or none where the filter drops them; the fields handed in are left as they
    were."""
    from sse_proxy.obs.logs import get_logger, write_line

    fields = {
        "verdict": "ok",
        "n": 3,
        "text": "The quick",
        "nested": {"a": [1, None]},
        "url": "https://h/v1?api_key=SECRET",  # redacted by both
        "stream_id": "overrides-the-bound-one",
    }
    before = dict(fields)
    lines = []
    for use_writer in (False, True):
        with configured_logging(fmt, level=configured_level) as out:
            log = get_logger(stream_id="0123456789abcdef", method="POST")
            if use_writer:
                write_line(log, level, "stream.summary", fields)
            else:
                getattr(log, level)("stream.summary", **fields)
        lines.append(out.getvalue())
    assert fields == before
    ours, theirs = lines[1], lines[0]
    dropped = configured_level == "error" or (configured_level == "warning" and level == "info")
    assert (ours == "") is dropped
    if fmt == "json":
        assert [_without_time(x) for x in ours.splitlines()] == [
            _without_time(x) for x in theirs.splitlines()
        ]
        if not dropped:
            assert "SECRET" not in ours
    else:
        clock = re.compile(r"\d\d:\d\d:\d\d\.\d+")  # the console line's time
        assert clock.sub("T", ours) == clock.sub("T", theirs)


def test_write_line_is_captured_by_structlogs_testing_helpers() -> None:
    """capture_logs ends each line with DropEvent after recording it: the writer records
    it once, as structlog's own call does, and writes nothing."""
    from sse_proxy.obs.logs import get_logger, write_line

    with configured_logging("json") as out, capture_logs() as captured:
        write_line(get_logger(stream_id="s"), "warning", "stream.summary", {"verdict": "broken"})
    assert captured == [
        {"stream_id": "s", "verdict": "broken", "event": "stream.summary", "log_level": "warning"}
    ]
    assert out.getvalue() == ""


def test_a_summary_without_a_bound_logger_is_the_bound_ones_line(json_log: io.StringIO) -> None:
    """A stream that logged nothing before its summary has the fields its logger would be
    bound with put in the line (no logger bound for one line): the same line, key for key
    and in order, as a sink whose logger was bound."""
    from sse_proxy.obs.logs import get_logger

    bound = {"stream_id": "0123456789abcdef", "method": "POST", "route": "default"}
    made: list[int] = []

    def make() -> Any:
        made.append(1)
        return get_logger(**bound)

    AlertSink(get_logger(**bound)).summary(ended_by="eof", verdict="ok", route="r2")
    AlertSink(make_logger=make, log_fields=lambda: dict(bound)).summary(
        ended_by="eof", verdict="ok", route="r2"
    )
    first, second = json_log.getvalue().splitlines()
    assert _without_time(first) == _without_time(second)
    assert made == []  # no logger was bound for it
    assert json.loads(second)["route"] == "r2"


def test_a_summary_is_an_info_or_a_warning_line(json_log: io.StringIO) -> None:
    """Any level the caller names but warning gives an info line, as it always did."""
    from sse_proxy.obs.logs import get_logger

    for level in ("warning", "info", "error", "debug"):
        AlertSink(get_logger(stream_id="s")).summary(level=level, verdict="ok")
    levels = [json.loads(line)["level"] for line in json_log.getvalue().splitlines()]
    assert levels == ["warning", "info", "info", "info"]


def test_the_human_line_never_cuts_an_upstream_error_mid_word() -> None:
    """An upstream's error message is read whole (up to a wide bound), and anything cut is
    cut between words, with an ellipsis."""
    from sse_proxy.obs.console import ConsoleLines, console_value

    message = (
        "Cannot connect to host api.example.com:443 ssl:default [Name or service not known] "
        "while opening the upstream request for the stream, after 3 attempts of 10 s each"
    )
    line = ConsoleLines()(
        None,
        "warning",
        {
            "event": "upstream.error",
            "level": "warning",
            "stream_id": "0123456789abcdef",
            "kind": "upstream_unreachable",
            "error": message,
            "status": 502,
        },
    )
    assert f"error={json.dumps(message)}" in line
    long = " ".join(["word"] * 200)
    shown = console_value(long, 80)
    assert shown.endswith("word…")  # a whole word before the ellipsis
    assert len(shown) <= 80
    assert console_value("x" * 200, 80) == '"' + "x" * 78 + "…"  # one long word: cut inside
