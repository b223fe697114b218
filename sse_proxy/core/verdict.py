"""A stream's verdict, shared by the server's summaries and ``check``, and what
``--strict-end`` makes of a stream's end."""

from __future__ import annotations

from collections.abc import Mapping

from sse_proxy.core.alerts import ErrorEvent, Truncated, UnterminatedFrame

__all__ = ["STRICT_END_CAUSES", "strict_end_cause", "verdict"]

STRICT_END_CAUSES: tuple[tuple[str, str], ...] = (
    (ErrorEvent.name, "error_event"),
    (UnterminatedFrame.name, "unterminated_frame"),
    (Truncated.name, "truncated"),
)
"""The alerts that make ``--strict-end`` end a stream's body as broken, by the cause the
summary names (the first that fired, in this order: the most specific first)."""


def verdict(
    ended_by: str, counts: Mapping[str, int], first_warning: str | None
) -> tuple[str, str | None]:
    """``ok``, ``degraded`` (warnings, but complete) or ``broken``, and the main reason.

    The reason of a degraded stream is its first warning alert.
    """
    if ended_by in ("upstream_error", "shutdown", "dropped"):
        return "broken", ended_by
    if ended_by == "timeout":
        return "broken", "timeout"
    if counts.get(Truncated.name):
        return "broken", "truncated"
    if counts.get("sse.error_event"):
        return "broken", "error_event"
    if counts.get("sse.resume_gap"):  # the answer across the connections lost events
        return "broken", "resume_gap"
    if first_warning is not None:
        return "degraded", first_warning
    return "ok", None


def strict_end_cause(ended_by: str, counts: Mapping[str, int]) -> str | None:
    """Why ``--strict-end`` ends this stream's body as broken, or None: it may end normally.

    Only a stream the upstream ended itself (``upstream_eof``) is in question: every other
    end (an upstream read error, a timeout, the shutdown) is already cut off toward the
    client, and a client that left has nobody to tell.
    """
    if ended_by != "upstream_eof":
        return None
    return next((cause for name, cause in STRICT_END_CAUSES if counts.get(name)), None)
