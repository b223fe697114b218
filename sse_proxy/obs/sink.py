"""Where alerts become log lines.

The core returns alert values; :class:`AlertSink` is the only place that turns them into
``structlog`` calls, bound with ``stream_id`` and whatever the shell knows about the stream.
Alerts of one kind are rate-limited per stream (the first few in full, then only counted),
and the exact counts go into ``stream.summary``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from sse_proxy.core.alerts import Alert, Level
from sse_proxy.obs.logs import get_logger, write_line
from sse_proxy.obs.redact import mask_message_text

__all__ = ["AlertSink"]


class AlertSink:
    """Logs one stream's alerts, bound with its ``stream_id``; rate-limits floods."""

    def __init__(
        self,
        logger: Any = None,
        *,
        max_per_kind: int = 10,
        keep_text: bool = True,
        make_logger: Callable[[], Any] | None = None,
        log_fields: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self._log = logger
        self._make_log = make_logger if logger is None else None
        """Binds the logger when a line is first logged (``logger``: bound already): a
        clean stream at ``--log-level warning`` logs nothing, and binds nothing."""
        self._log_fields = log_fields if logger is None else None
        """The fields ``make_logger`` binds: a stream whose only line is its summary has
        them put in that line instead of binding a logger for it (the same line)."""
        self.max_per_kind = max_per_kind
        self.keep_text = keep_text
        """False: an alert's ``preview`` (raw stream bytes, which may be message text) is
        logged as its shape only (:func:`~sse_proxy.obs.redact.mask_message_text`)."""
        self.counts: Counter[str] = Counter()
        # plain dicts: a Counter costs three Python calls to build, and most streams
        # never raise an alert
        self.lines: dict[str, int] = {}
        self.suppressed: dict[str, int] = {}
        self.max_level = Level.INFO
        self.first_warning: str | None = None
        """The name of the stream's first warning-level alert (a degraded verdict's reason)."""

    @property
    def log(self) -> Any:
        log = self._log
        if log is None:
            make = self._make_log
            assert make is not None, "an AlertSink needs a logger or make_logger"
            log = self._log = make()
            self._make_log = None
        return log

    @log.setter
    def log(self, logger: Any) -> None:
        self._log = logger
        self._make_log = None

    @property
    def warned(self) -> bool:
        return self.max_level is Level.WARNING

    def emit(self, alert: Alert) -> None:
        name = alert.name
        level = alert.level
        if level is Level.WARNING:
            self.max_level = Level.WARNING
            if self.first_warning is None:
                self.first_warning = name
        # an alert may stand for several occurrences (a counted U+FFFD flood): the counts
        # are of occurrences, the rate limit is of log lines
        weight = getattr(alert, "count", 1)
        self.counts[name] += weight
        self.lines[name] = lines = self.lines.get(name, 0) + 1
        if lines > self.max_per_kind:
            self.suppressed[name] = self.suppressed.get(name, 0) + weight
            return
        fields = alert.fields()
        if not self.keep_text and isinstance(fields.get("preview"), str):
            fields["preview"] = mask_message_text(str(fields["preview"]))
        if lines == self.max_per_kind:
            fields["further_suppressed"] = True
        if level is Level.WARNING:
            self.log.warning(name, **fields)
        else:
            self.log.info(name, **fields)

    def emit_all(self, alerts: tuple[Alert, ...]) -> None:
        for alert in alerts:
            self.emit(alert)

    def summary(self, *, level: str = "info", **fields: Any) -> None:
        """The closing ``stream.summary`` line; exact alert counts, suppressed ones too.

        ``level`` is ``warning`` for a stream that went wrong, so that filtering on
        ``level >= warning`` finds every bad stream.
        """
        self.summary_of(fields, level=level)

    def summary_of(self, fields: Mapping[str, Any], *, level: str = "info") -> None:
        """:meth:`summary` of a mapping of fields (not changed), as a stream's end has them:
        forty fields are not copied into keywords for it."""
        level = "warning" if level == "warning" else "info"  # (the line has those two)
        if level != "warning" and not self._logs_info():
            return  # filtered out anyway: not worth binding a logger for
        counts = {"alerts": dict(self.counts)}
        if self.suppressed:
            counts["alerts_suppressed"] = dict(self.suppressed)
        if self._log is None and self._log_fields is not None:
            line = {**self._log_fields(), **fields, **counts}
            write_line(get_logger(), level, "stream.summary", line)
        else:
            write_line(self.log, level, "stream.summary", {**fields, **counts})

    def _logs_info(self) -> bool:
        """Whether an info line would be written (the bound logger if there is one, else
        the configured base: a logger bound later filters as it does)."""
        log = self._log
        if log is None:
            log = get_logger()
        enabled = getattr(log, "is_enabled_for", None)
        return enabled is None or enabled(logging.INFO) is not False
