"""The watchdog: every stream's deadlines on one loop timer, met on time, none early.

Run on both loops the proxy supports; each test waits on an event the checks set, with
generous bounds (the machine is shared), never on a sleep it hopes is long enough.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from sse_proxy.server import watchdog
from sse_proxy.server.watchdog import Watchdog

LATE = 1.0  # how late a deadline may be met on a loaded machine (the design: 10 ms)


def _on_each_loop(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[str], None]:
    @pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
    def run(loop: str) -> None:
        if loop == "uvloop":
            uvloop.run(test())
        else:
            asyncio.run(test())

    run.__name__ = test.__name__
    run.__doc__ = test.__doc__
    return run


class _Deadline:
    """A check like the idle watch's: the time left to a deadline, None once it is met."""

    def __init__(self, loop: asyncio.AbstractEventLoop, delay: float) -> None:
        self.loop = loop
        self.at = loop.time() + delay
        self.calls: list[float] = []
        self.met = asyncio.Event()
        self.met_at: float | None = None

    def check(self) -> float | None:
        now = self.loop.time()
        self.calls.append(now)
        if now < self.at:
            return self.at - now
        self.met_at = now
        self.met.set()
        return None


async def _many_deadlines() -> None:
    loop = asyncio.get_running_loop()
    dog = Watchdog.of()
    assert Watchdog.of() is dog  # one per loop
    deadlines = [_Deadline(loop, 0.02 * i) for i in range(1, 16)]
    for d in deadlines:
        dog.watch(d.at - loop.time(), d.check)
    async with asyncio.timeout(30):
        await asyncio.gather(*(d.met.wait() for d in deadlines))
    for d in deadlines:
        assert d.met_at is not None
        # never early (the loop's clock is in milliseconds), never much late
        assert d.at - 0.002 <= d.met_at <= d.at + LATE, (d.at, d.met_at, d.calls)
    assert dog.pending() == 0  # nothing left behind


test_deadlines_are_met_in_order_not_early = _on_each_loop(_many_deadlines)


async def _moved_deadline() -> None:
    """A deadline that moves (a read came) is looked at again, not reported."""
    loop = asyncio.get_running_loop()
    d = _Deadline(loop, 0.05)
    Watchdog.of().watch(0.01, d.check)  # looked at first long before it is due
    async with asyncio.timeout(30):
        await d.met.wait()
    assert d.met_at is not None
    assert d.met_at >= d.at - 0.002
    assert len(d.calls) >= 2  # it said how long was left and was called again


test_a_check_that_is_not_due_is_called_again_when_it_says = _on_each_loop(_moved_deadline)


async def _cancelled() -> None:
    loop = asyncio.get_running_loop()
    dog = Watchdog.of()
    gone = _Deadline(loop, 0.03)
    kept = _Deadline(loop, 0.06)
    watch = dog.watch(0.03, gone.check)
    dog.watch(0.06, kept.check)
    watch.cancel()
    watch.cancel()  # twice is harmless
    assert dog.pending() == 1  # gone at once, not when its time comes
    async with asyncio.timeout(30):
        await kept.met.wait()
    assert gone.calls == []
    assert dog.pending() == 0


test_a_cancelled_watch_is_never_called = _on_each_loop(_cancelled)


async def _one_shots() -> None:
    """A one-shot check (the head deadline's: it cancels the request) is never called
    before its time: the watchdog, not the check, keeps the deadline."""
    loop = asyncio.get_running_loop()
    dog = Watchdog.of()
    called: dict[float, float] = {}
    done = asyncio.Event()
    delays = [0.005, 0.013, 0.03, 0.07, 0.15]

    def one_shot(due: float) -> Callable[[], float | None]:
        def check() -> float | None:
            called[due] = loop.time()
            if len(called) == len(delays):
                done.set()
            return None

        return check

    for delay in delays:
        due = loop.time() + delay
        dog.watch(delay, one_shot(due))
    async with asyncio.timeout(30):
        await done.wait()
    for due, at in called.items():
        assert due - 0.002 <= at <= due + LATE, (due, at)


test_a_one_shot_deadline_is_never_met_early = _on_each_loop(_one_shots)


async def _far_deadline_is_refined() -> None:
    """A far deadline sits in a coarse bin looked at early: it must come out at its time."""
    loop = asyncio.get_running_loop()
    d = _Deadline(loop, 0.3)
    Watchdog.of().watch(0.3, d.check)
    async with asyncio.timeout(30):
        await d.met.wait()
    assert d.met_at is not None
    assert d.at - 0.002 <= d.met_at <= d.at + LATE


async def _far_one_shot() -> None:
    """A one-shot check in a far bin (the head deadline's, 300 s by default) is not called
    when its bin is looked at early: the watchdog holds it until its own time."""
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    calls: list[float] = []
    due = loop.time() + 0.3

    def one_shot() -> None:
        calls.append(loop.time())
        done.set()

    Watchdog.of().watch(0.3, one_shot)
    async with asyncio.timeout(30):
        await done.wait()
    assert len(calls) == 1
    assert due - 0.002 <= calls[0] <= due + LATE, (due, calls)


def test_a_far_one_shot_deadline_is_never_met_early(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watchdog, "_FAR", 0.1)  # 0.3 s counts as far: a whole-second bin
    asyncio.run(_far_one_shot())


def test_a_far_deadline_is_looked_at_early_and_met_on_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(watchdog, "_FAR", 0.1)  # 0.3 s counts as far: a whole-second bin
    asyncio.run(_far_deadline_is_refined())


async def _failing_check() -> None:
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx))

    def broken() -> float | None:
        raise RuntimeError("a bug in one stream's check")

    dog = Watchdog.of()
    dog.watch(0.01, broken)
    later = _Deadline(loop, 0.05)
    dog.watch(0.05, later.check)
    async with asyncio.timeout(30):
        await later.met.wait()
    assert [type(e["exception"]) for e in errors] == [RuntimeError]


test_a_failing_check_costs_no_other_deadline = _on_each_loop(_failing_check)


@_on_each_loop
async def test_a_stream_start_does_not_count_the_watches_already_set() -> None:
    """A stream's stall watch goes on the app's watchdog, and starting one more watch never
    walks the others (a watchdog's truth was a count of every bin, taken at each stream
    start by ``watchdog or ...``: it grew with the streams open)."""
    import structlog

    from sse_proxy.core import StreamReassembler
    from sse_proxy.obs.sink import AlertSink
    from sse_proxy.server.context import RequestContext
    from sse_proxy.server.timing import StreamObserver

    loop = asyncio.get_running_loop()
    dog = Watchdog(loop)
    watches = [dog.watch(i * 0.013 + 5.0, lambda: None) for i in range(300)]

    class Counted(dict[int, set[Any]]):
        walks = 0

        def values(self) -> Any:
            Counted.walks += 1
            return super().values()

    dog._bins = Counted(dog._bins)
    r = StreamReassembler("openai", emit_events=False, frame_ends=False, keep_text=False)
    obs = StreamObserver(
        r, AlertSink(structlog.get_logger()), RequestContext(route="t"), stall_threshold=30.0,
        now=loop.time,
    )  # fmt: skip
    obs.start(dog)
    assert Counted.walks == 0
    assert dog.pending() == len(watches) + 1  # its watch is on this watchdog
    obs.stop()
    for w in watches:
        w.cancel()
    assert dog.pending() == 0
