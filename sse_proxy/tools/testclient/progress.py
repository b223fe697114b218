"""Progress on stderr while cases run in parallel, group lines in plan order.

On a terminal: one line, rewritten in place. Otherwise: one plain line per finished group,
printed only once every earlier group has been printed, so a log reads in plan order even
though the cases finish in any order.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import IO

from sse_proxy.tools.testclient.plan import CUT, Case

__all__ = ["Progress"]


class Progress:
    """Counts finished cases; prints group lines in the order the groups were planned."""

    def __init__(self, cases: Sequence[Case], stream: IO[str] | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.total = len(cases)
        self.done = 0
        self.failed = 0
        self.order: list[str] = list(dict.fromkeys(c.group for c in cases))
        self.left: dict[str, int] = {}
        for case in cases:
            self.left[case.group] = self.left.get(case.group, 0) + 1
        self.group_failed: dict[str, int] = {}
        self.group_skipped: dict[str, int] = {}
        self.printed = 0

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def note(self, text: str) -> None:
        """A line of its own (e.g. "the baseline failed, stopping")."""
        if self.tty:
            self._write("\r\x1b[K")
        self._write(f"test-client: {text}\n")

    def finished(self, case: Case, outcome: str, passed: bool) -> None:
        self.done += 1
        group = case.group
        self.left[group] -= 1
        if not passed:
            self.failed += 1
            self.group_failed[group] = self.group_failed.get(group, 0) + 1
        elif outcome == "not_applicable":
            self.group_skipped[group] = self.group_skipped.get(group, 0) + 1
        if self.tty:
            line = (
                f"\r\x1b[K[{self.done:>{len(str(self.total))}}/{self.total}] "
                f"{case.name}: {outcome}"
                f"{f'  ({self.failed} failed so far)' if self.failed else ''}"
            )
            self._write(line + ("\r\x1b[K" if self.done == self.total else ""))
            return
        self._flush_groups()
        if group == CUT and self.left[group] and self.done % 50 == 0 and self._is_current(group):
            self._write(f"test-client: cut: {self.done}/{self.total} cases done\n")

    def _is_current(self, group: str) -> bool:
        return self.printed < len(self.order) and self.order[self.printed] == group

    def _flush_groups(self) -> None:
        while self.printed < len(self.order) and self.left[self.order[self.printed]] == 0:
            group = self.order[self.printed]
            failed = self.group_failed.get(group, 0)
            skipped = self.group_skipped.get(group, 0)
            verdict = "all passed" if not failed else f"{failed} failed"
            if skipped:
                verdict += f" ({skipped} not applicable to the request)"
            self._write(f"test-client: {group}: {verdict}\n")
            self.printed += 1
