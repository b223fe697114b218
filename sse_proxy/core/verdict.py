"""A stream's verdict, shared by the server's summaries and ``check``."""

from __future__ import annotations

from collections.abc import Mapping

from sse_proxy.core.alerts import Truncated

__all__ = ["verdict"]


def verdict(
    ended_by: str, counts: Mapping[str, int], first_warning: str | None
) -> tuple[str, str | None]:
    """``ok``, ``degraded`` (warnings, but complete) or ``broken``, and the main reason.

    The reason of a degraded stream is its first warning alert.
    """
    if ended_by in ("upstream_error", "shutdown"):
        return "broken", ended_by
    if ended_by == "timeout":
        return "broken", "timeout"
    if counts.get(Truncated.name):
        return "broken", "truncated"
    if counts.get("sse.error_event"):
        return "broken", "error_event"
    if first_warning is not None:
        return "degraded", first_warning
    return "ok", None
