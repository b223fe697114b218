"""Bug: trims every data value instead of stripping the one optional space."""

from __future__ import annotations

from tests.tools.clients._sse import LineParser, run


class TrimValues(LineParser):
    def value(self, raw: str) -> str:
        return raw.strip()


if __name__ == "__main__":
    run(TrimValues)
