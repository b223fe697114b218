"""One case in the browser: a fresh context, the case's page, its answer as a :class:`Ran`.

The page's answer maps onto what a command does, so every group, diagnosis and report
works unchanged: the resolved string is stdout (exit 0), a rejection exit 1 with the error
and the console as stderr, no answer within the timeout a hang (the seconds the proxy held
writes back are not counted, as for a command), an answer past the output bound a flood.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path

from sse_proxy.tools.testclient.browser.bidi import Browser
from sse_proxy.tools.testclient.browser.page import CasePage, PageServer, Verdict
from sse_proxy.tools.testclient.fixture import DUMMY_KEYS, Fixture, request_body, stream_path
from sse_proxy.tools.testclient.process import Ran

__all__ = ["BrowserRun", "request_headers"]

_POLL = 0.25
_UNTIL_POLL = 0.05  # a deadline that may come sooner (a stall's patience) is looked at often


def request_headers(dialect: str) -> dict[str, str]:
    """The headers a browser client sends: the JSON content type and every provider's key
    header with a dummy key (OpenAI's bearer, Anthropic's, Gemini's), whatever ``dialect``
    (the mock reads none of them; nothing leaves loopback)."""
    del dialect  # the same for every dialect: a client sends its provider's, ignores others
    return {
        "content-type": "application/json",
        "authorization": f"Bearer {DUMMY_KEYS['OPENAI_API_KEY']}",
        "x-api-key": DUMMY_KEYS["ANTHROPIC_API_KEY"],
        "anthropic-version": "2023-06-01",
        "x-goog-api-key": "sse-proxy-test-not-a-real-key",
    }


class BrowserRun:
    """The browser and the page server of one run: started once, a page per case."""

    def __init__(self, browser: Browser, pages: PageServer) -> None:
        self.browser = browser
        self.pages = pages

    @classmethod
    async def start(cls, name: str, script: str, *, max_message: int) -> BrowserRun:
        pages = PageServer(Path(script), max_message=max_message)
        await pages.start()
        try:
            browser = await Browser.launch(name)
        except BaseException:
            await pages.stop()
            raise
        return cls(browser, pages)

    async def stop(self) -> None:
        try:
            await self.browser.close()
        finally:
            await self.pages.stop()

    @property
    def origin(self) -> str:
        """The pages' origin: the case's proxy must allow it (``allow_origins``)."""
        return self.pages.origin

    def open_case(
        self, proxy_url: str, fixture: Fixture, name: str, *, resume: bool = False
    ) -> CasePage:
        """The page of case ``name`` (also given to the script, as ``SSE_PROXY_CASE`` is
        to a command); ``resume``: a ``resume`` case (the body asks for a resumable stream,
        and the script is told ``resume: true``)."""
        return self.pages.open_case(
            proxy=proxy_url,
            case={
                "url": proxy_url + stream_path(fixture, resume=resume),
                "body": json.dumps(request_body(fixture, resume=resume), ensure_ascii=False),
                "headers": request_headers(fixture.dialect),
                "dialect": fixture.dialect,
                "case": name,
                "resume": resume,
            },
        )

    async def run_case(
        self,
        page: CasePage,
        *,
        timeout: float,  # noqa: ASYNC109 - the deadline moves (credit), as for a command
        out_limit: int,
        credit: Callable[[], float] = lambda: 0.0,
        until: Callable[[], float | None] | None = None,
    ) -> Ran:
        """Show ``page`` in a fresh context and wait for its answer; the context is gone
        when this returns (and with it the page's connections to the proxy). The clock
        starts once the browser has opened the tab: its own start-up is not the client's."""
        context = await self.browser.open(self.pages.url(page))
        started = time.monotonic()
        verdict: Verdict | None = None
        try:
            assert page.answer is not None
            while verdict is None:
                now = time.monotonic()
                limit = None if until is None else until()
                if limit is None:
                    limit = started + timeout + credit()
                left = limit - now
                if left <= 0:
                    break
                step = min(left, _POLL if until is None else _UNTIL_POLL)
                with contextlib.suppress(TimeoutError):
                    verdict = await asyncio.wait_for(asyncio.shield(page.answer), step)
        finally:
            await self.browser.close_context(context)
            self.pages.close_case(page)
        seconds = time.monotonic() - started
        console = page.console_text()
        if verdict is None:
            return Ran(None, b"", _utf8(console), hung=True, seconds=seconds, started=started)
        if page.too_big or (verdict.output is not None and len(verdict.output) > out_limit):
            out = _utf8(verdict.output or "")[:out_limit]
            return Ran(None, out, _utf8(console), flooded=True, seconds=seconds, started=started)
        if verdict.error is not None:
            err = verdict.error + ("\n" + console if console else "")
            return Ran(1, b"", _utf8(err), seconds=seconds, started=started)
        return Ran(0, _utf8(verdict.output or ""), _utf8(console), seconds=seconds, started=started)


def _utf8(text: str) -> bytes:
    """A page's string as bytes: a lone surrogate (JavaScript strings may hold one) becomes
    bytes that decode to U+FFFD, as invalid output from a command does."""
    return text.encode("utf-8", "surrogatepass")
