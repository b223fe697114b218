"""The harness's page server: one page per case, the script under test, and what it reports.

A case's page (``/case/TOKEN/``) carries the case in a JSON block and loads ``harness.js``,
which opens a WebSocket back here (``/case/TOKEN/ws``), reports the sizes the page's code
takes from each of the proxy's streams (:class:`PageReads`: the proxy's cuts wait on them),
its console and uncaught errors, then imports the script (served from its own directory
under ``/script/``, so relative imports work) and reports what its default export resolved
to or the error it rejected with.

Only the browser the run started is served, and only the case's files: every path is
under a secret of the run (``/SECRET/...``, unguessable, in the URL the browser is given),
the Host must be a loopback name or address with this server's port (a page whose name
is rebound to 127.0.0.1 sends its own), and ``/script/`` serves module files (``.js``,
``.mjs``, ``.json``...) under the script's folder whose path has no component starting
with a dot (``.env``, ``.git/``, ``.npmrc`` stay unread). A case's token is unguessable
and lives as long as the case.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Final

from aiohttp import WSMsgType, web

from sse_proxy.hosts import is_loopback, parse_host
from sse_proxy.server.delivery import Reported
from sse_proxy.server.exchange import Exchange
from sse_proxy.server.tap_types import StreamEnd

__all__ = ["CasePage", "PageReads", "PageServer", "Verdict"]

CUT_CAP: Final = 0.4
"""Seconds a cut waits for a browser from its last progress (a command gets
:data:`~sse_proxy.server.delivery.CUT_CAP`: the network process, the page and its report
are hops of their own on a loaded machine)."""
_CONSOLE_KEEP: Final = 64 << 10
"""Characters of console output kept (the last ones), as a command's stderr tail."""
_TYPES: Final = {
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".cjs": "text/javascript",
    ".json": "application/json",
    ".wasm": "application/wasm",
    ".map": "application/json",
    ".css": "text/css",
}
"""What a script can import (and its source maps): the only files served, by suffix."""


class PageReads:
    """What the page's code has taken from each of the proxy's streams, by stream id.

    A stream the page fetched through the harness's ``fetch`` is reported; while a fetch
    has started and its response is not there yet, a new stream counts as not taken at
    all (its report is on its way). Any other stream (``EventSource``) reports nothing.
    """

    def __init__(self) -> None:
        self.pending = 0
        self.taken: dict[str, int] = {}

    def reported(self, stream_id: str) -> Reported:
        def taken() -> int | None:
            got = self.taken.get(stream_id)
            if got is not None:
                return got
            return 0 if self.pending > 0 else None

        return taken

    def tell(self, message: dict[str, Any]) -> None:
        fetch = message.get("fetch")
        if fetch == "start":
            self.pending += 1
        elif fetch in ("failed", "unwatched", "open"):
            self.pending = max(self.pending - 1, 0)
            if fetch == "open" and isinstance(message.get("id"), str):
                self.taken.setdefault(message["id"], 0)
        elif isinstance(message.get("id"), str) and isinstance(message.get("taken"), int):
            self.taken[message["id"]] = message["taken"]

    def tap(self, ex: Exchange) -> _NoEnd:
        """A stream tap for the case's proxy: its cuts wait on what the page took too."""
        if ex.delivery is not None:
            ex.delivery.reported = self.reported(ex.stream_id)
            ex.delivery.cut_cap = CUT_CAP
        return _NoEnd()


class _NoEnd:
    def finish(self, end: StreamEnd) -> None:
        return None


@dataclass(slots=True)
class Verdict:
    """What the page said: the string it resolved to, or the error it rejected with."""

    output: str | None = None
    error: str | None = None


@dataclass(slots=True)
class CasePage:
    """One case's page: its configuration, what it reports, and its answer."""

    token: str
    config: dict[str, Any]
    reads: PageReads = field(default_factory=PageReads)
    console: deque[str] = field(default_factory=deque)
    console_size: int = 0
    answer: asyncio.Future[Verdict] | None = None
    too_big: bool = False

    def log(self, line: str) -> None:
        self.console.append(line)
        self.console_size += len(line) + 1
        while self.console_size > _CONSOLE_KEEP and len(self.console) > 1:
            self.console_size -= len(self.console.popleft()) + 1

    def console_text(self) -> str:
        return "\n".join(self.console)


class PageServer:
    """The page server of one run: started once, a :class:`CasePage` per case."""

    def __init__(self, script: Path, *, max_message: int) -> None:
        self.script = script.resolve()
        self.root = self.script.parent
        self.max_message = max_message
        self.cases: dict[str, CasePage] = {}
        self.origin = ""
        self.port = 0
        self.secret = secrets.token_urlsafe(24)
        """The first segment of every path served: only the browser given the URLs has it."""
        self._runner: web.AppRunner | None = None
        self._harness = resources.files(__package__).joinpath("harness.js").read_bytes()

    async def start(self) -> None:
        app = web.Application(middlewares=[self._loopback_host])
        base = f"/{self.secret}"
        app.router.add_get(base + "/case/{token}/", self._page)
        app.router.add_get(base + "/case/{token}/harness.js", self._harness_js)
        app.router.add_get(base + "/case/{token}/ws", self._socket)
        app.router.add_get(base + "/script/{path:.*}", self._file)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        self.origin = f"http://127.0.0.1:{self.port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def open_case(self, *, proxy: str, case: dict[str, Any]) -> CasePage:
        token = secrets.token_urlsafe(16)
        config = {
            **case,
            "proxy": proxy,
            "ws": f"{self.origin.replace('http', 'ws', 1)}/{self.secret}/case/{token}/ws",
            "script": f"/{self.secret}/script/{self.script.name}",
            "scriptName": self.script.name,
        }
        page = CasePage(token, config, answer=asyncio.get_running_loop().create_future())
        self.cases[token] = page
        return page

    def close_case(self, page: CasePage) -> None:
        self.cases.pop(page.token, None)

    def url(self, page: CasePage) -> str:
        return f"{self.origin}/{self.secret}/case/{page.token}/"

    def local_stack(self, text: str) -> str:
        """A page's stack with the script's URLs as the files they are (so a crash inside
        ``node_modules`` is attributed as it is for Node), Firefox's frames as V8's."""
        text = text.replace(f"{self.origin}/{self.secret}/script/", f"{self.root}/")
        return _GECKO_FRAME.sub(r"    at \g<fn> (\g<loc>)", text)

    def _case(self, request: web.Request) -> CasePage:
        page = self.cases.get(request.match_info["token"])
        if page is None:
            raise web.HTTPNotFound()
        return page

    async def _page(self, request: web.Request) -> web.Response:
        page = self._case(request)
        data = json.dumps(page.config, ensure_ascii=False).replace("<", "\\u003c")
        html = (
            '<!doctype html><meta charset="utf-8"><title>sse-proxy test-client</title>'
            f'<script type="application/json" id="sse-proxy-case">{data}</script>'
            '<script type="module" src="harness.js"></script>'
        )
        return web.Response(text=html, content_type="text/html", headers=_NO_STORE)

    async def _harness_js(self, request: web.Request) -> web.Response:
        self._case(request)
        return web.Response(body=self._harness, content_type="text/javascript", headers=_NO_STORE)

    @web.middleware
    async def _loopback_host(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """The browser this run started asks for 127.0.0.1:PORT: a Host that is not a
        loopback name or address with this port is a page rebound here, or a guess."""
        hosts = request.headers.getall("Host", [])
        host = parse_host(hosts[0]) if len(hosts) == 1 else None
        if host is None or not is_loopback(host) or host.port != self.port:
            raise web.HTTPForbidden(text="the test-client page server serves its browser only\n")
        return await handler(request)

    async def _file(self, request: web.Request) -> web.StreamResponse:
        wanted = request.match_info["path"]
        parts = wanted.split("/")
        if any(p.startswith(".") for p in parts) or "\\" in wanted:
            raise web.HTTPNotFound()  # .env, .git/config, .npmrc: never the case's files
        path = (self.root / wanted).resolve()
        kind = _TYPES.get(path.suffix.lower())
        if (
            kind is None
            or path.name.startswith(".")
            or not path.is_relative_to(self.root)
            or not path.is_file()
        ):
            raise web.HTTPNotFound()
        return web.FileResponse(path, headers={"Content-Type": kind, **_NO_STORE})

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        page = self._case(request)
        ws = web.WebSocketResponse(max_msg_size=self.max_message)
        await ws.prepare(request)
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                continue
            with contextlib.suppress(ValueError):
                self._told(page, json.loads(msg.data))
        if ws.close_code == 1009:  # the page said more than any answer could be
            page.too_big = True
            _answer(page, Verdict())
        return ws

    def _told(self, page: CasePage, message: Any) -> None:
        if not isinstance(message, dict):
            return
        if "console" in message:
            page.log(f"console.{message['console']}: {self.local_stack(str(message['text']))}")
        elif "result" in message:
            result = message["result"]
            _answer(page, Verdict(output=result if isinstance(result, str) else str(result)))
        elif "error" in message:
            _answer(page, Verdict(error=self.local_stack(str(message["error"]))))
        else:
            page.reads.tell(message)


def _answer(page: CasePage, verdict: Verdict) -> None:
    if page.answer is not None and not page.answer.done():
        page.answer.set_result(verdict)


_NO_STORE: Final = {"Cache-Control": "no-store"}
_GECKO_FRAME: Final = re.compile(r"^(?P<fn>[^@\s]*)@(?P<loc>\S+:\d+:\d+)$", re.MULTILINE)
