"""The read log: a prefix of a stream's reads within its bounds; the rest is refused."""

from __future__ import annotations

from sse_proxy.inspect.registry import Registry
from sse_proxy.obs.read_log import ReadLog
from tests.support.inspector import open_record


def _fed(log: ReadLog, reads: list[bytes]) -> list[tuple[bytes, float]]:
    past: list[tuple[bytes, float]] = []
    total = 0
    for i, chunk in enumerate(reads):
        total += len(chunk)
        if not log.add(chunk, float(i), total):
            past.append((chunk, float(i)))
    return past


def test_a_read_that_does_not_fit_whole_and_every_later_one_go_past() -> None:
    log = ReadLog(max_bytes=10, max_reads=100)
    past = _fed(log, [b"abcd", b"efgh", b"ijkl", b"m"])
    assert log.chunks == [b"abcd", b"efgh"]
    assert list(log.times) == [0.0, 1.0]
    assert past == [(b"ijkl", 2.0), (b"m", 3.0)]  # b"m" would fit: the log stays a prefix
    assert log.logged_bytes() == 8


def test_the_read_bound_holds_too() -> None:
    log = ReadLog(max_bytes=1 << 20, max_reads=2)
    past = _fed(log, [b"a", b"b", b"c"])
    assert log.chunks == [b"a", b"b"]
    assert past == [(b"c", 2.0)]


def test_logged_bytes_counts_reads_appended_by_hand_as_well() -> None:
    log = ReadLog(max_bytes=100, max_reads=100)
    log.add(b"xyz", 0.0, 3)
    assert log.logged_bytes() == 3
    log.times.append(1.0)  # as the relay appends, with no call
    log.chunks.append(b"12345")
    assert log.logged_bytes() == 8
    assert log.logged_bytes() == 8


def test_a_log_leads_back_to_none_of_its_observers() -> None:
    """The inspector's record holds the log; the log must not hold the record (a cycle
    would keep every finished stream's reads until a full collection)."""
    import gc

    registry = Registry(max_bytes=4, max_reads=10)
    log = ReadLog(4, 10)
    record = open_record(registry, log=log)
    record.read(b"abc")
    record.read(b"defgh")  # past the log: kept by the record, to its own bound
    assert record.body == b"abcd"
    assert record.received == 8
    seen: set[int] = set()
    todo: list[object] = [log]
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        assert obj is not record
        todo.extend(gc.get_referents(obj))


def test_a_record_over_a_larger_shared_log_ends_as_one_over_its_own() -> None:
    """Trimmed at the end, the inspector's view of a log the recorder shares (bounded
    higher) is what a log of the inspector's own bounds would have kept, at every cut."""
    import random

    rng = random.Random(7)
    for case in range(300):
        reads = [bytes([97 + i % 26]) * rng.randint(1, 9) for i in range(rng.randint(0, 12))]
        max_bytes, max_reads = rng.randint(0, 40), rng.randint(0, 10)
        registry = Registry(max_bytes=max_bytes, max_reads=max_reads)
        own = open_record(registry)
        shared_log = ReadLog(max(max_bytes, rng.randint(0, 80)), rng.choice([max_reads, 99]))
        shared = open_record(registry, log=shared_log)
        total = 0
        for i, chunk in enumerate(reads):
            own.read(chunk)
            total += len(chunk)
            if not shared_log.add(chunk, shared.started + i, total):  # as the relay does
                shared.past(chunk, shared.started + i)
        own_reads = [n for _, n in own.reads]
        for record in (own, shared):
            record.finish({"verdict": "ok"})
        assert shared.body == own.body == b"".join(reads)[:max_bytes], case
        assert shared.received == own.received == total, case
        assert shared.read_sizes() == [n for _, n in own.reads] == own_reads, case
        assert shared.reads_dropped == own.reads_dropped, case
