"""The only clock checks the suite makes: timeouts, and things that must not wait one out.

A timeout can only be tested with time, so it is tested here, in one place, with bounds
that hold on a loaded 2-core CI machine. Nothing else in the suite compares a duration with
a number: speed and latency goals are benchmarks (bench/), and ordering is checked by
waiting on events.

- :func:`assert_fired_on_time`: it fired, and not before its setting (the test starts its
  clock before the proxy starts its timer, so only clock granularity can make it early);
  the upper bound is generous (twice the setting plus 5 s) unless a test must tell the
  setting from a known wrong behaviour (e.g. twice the grace), and then the bound is never
  tighter than twice the setting.
- :func:`assert_did_not_wait`: a step that must not wait out a timeout ended before the
  setting; tests choose settings far above the step's real cost.
"""

from __future__ import annotations

TIMER_SLACK = 0.02
"""How early a timer may look on the test's clock (granularity, not scheduling)."""

LATE = 5.0
"""Seconds a loaded machine may add on top of twice the setting."""


def assert_fired_on_time(
    waited: float, setting: float, what: str, *, before: float | None = None
) -> None:
    """``what``, bound to a timeout of ``setting`` s, ended ``waited`` s after the test
    started it: no earlier than the setting, and no later than ``before`` (default
    ``2 * setting + LATE``; never tighter than ``2 * setting``)."""
    high = 2 * setting + LATE if before is None else before
    if high < 2 * setting:
        raise ValueError(f"a bound of {high}s races a {setting}s timeout: use >= twice it")
    low = setting - TIMER_SLACK
    if not low <= waited <= high:
        raise AssertionError(
            f"{what}: ended after {waited:.3f}s; a {setting}s timeout must end it "
            f"between {low:.2f}s and {high:.2f}s"
        )


def assert_did_not_wait(waited: float, setting: float, what: str) -> None:
    """``what`` ended ``waited`` s after the test started it, without waiting out the
    timeout of ``setting`` s it must skip."""
    if not waited < setting:
        raise AssertionError(f"{what}: took {waited:.3f}s, as if it waited out {setting}s")
