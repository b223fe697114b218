"""Bug: buffers and splits lines correctly, but a data line must start with ``data: ``
(with the space); ``data:x`` is skipped."""

from __future__ import annotations

from tests.tools.clients._sse import LineParser, run


class SpaceRequired(LineParser):
    def line(self, line: str) -> None:
        if line.startswith("data:") and not line.startswith("data: "):
            return
        super().line(line)


if __name__ == "__main__":
    run(SpaceRequired)
