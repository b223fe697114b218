"""Bug: buffers correctly across reads but knows only LF line endings; a CR stays in the
line, so under CRLF the blank line is "\\r" and no event is ever dispatched."""

from __future__ import annotations

from tests.tools.clients._sse import LineParser, run


class NoCr(LineParser):
    def feed(self, text: str) -> None:
        if self.first and text:
            self.first = False
            text = text.removeprefix("\ufeff")
        self.buf += text
        while (cut := self.buf.find("\n")) >= 0:
            line, self.buf = self.buf[:cut], self.buf[cut + 1 :]
            self.line(line)


if __name__ == "__main__":
    run(NoCr)
