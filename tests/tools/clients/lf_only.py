"""Bug: buffers correctly across reads but ends lines only at LF (a CR before it is
dropped), so CRLF works and a bare CR never ends a line."""

from __future__ import annotations

from tests.tools.clients._sse import LineParser, run


class LfOnly(LineParser):
    def feed(self, text: str) -> None:
        if self.first and text:
            self.first = False
            text = text.removeprefix("\ufeff")
        self.buf += text
        while (cut := self.buf.find("\n")) >= 0:
            line, self.buf = self.buf[:cut].removesuffix("\r"), self.buf[cut + 1 :]
            self.line(line)


if __name__ == "__main__":
    run(LfOnly)
