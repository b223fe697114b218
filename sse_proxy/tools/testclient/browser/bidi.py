"""One headless browser per run, driven over WebDriver BiDi; a fresh context per case.

WebDriver BiDi is the W3C protocol both browsers speak: Firefox natively (its Remote Agent,
``--remote-debugging-port``), Chromium through Debian's ``chromedriver`` (a classic
session asked for ``webSocketUrl``). The harness needs five of its commands (a session, a
user context and a window in it, a navigation, the context removed), each one JSON message
over a WebSocket that aiohttp already gives us, so no driver library sits in between
(geckodriver cannot be installed from Debian, and Marionette's Python client is blocking
and Firefox's alone). Everything the page says comes back over the harness's own
WebSocket (:mod:`.page`), not through the driver.

The browser runs in a session of its own, on loopback only, and is killed whole at the end
(the driver, the browser and every process they started), its profile removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import aiohttp

from sse_proxy.errors import BrowserError, UsageError
from sse_proxy.tools.testclient.process import free_port, kill_session

__all__ = ["BROWSERS", "Browser", "find_browser"]

BROWSERS: Final = ("chromium", "firefox")
_EXECUTABLES: Final = {
    "chromium": (("chromium", "chromium-browser"), ("chromedriver",)),
    "firefox": (("firefox-esr", "firefox"), ()),
}
_PACKAGES: Final = {"chromium": "chromium chromium-driver", "firefox": "firefox-esr"}
_START: Final = 60.0
"""Seconds a browser may take to start (a first Firefox profile takes several)."""
_COMMAND: Final = 30.0
"""Seconds one BiDi command may take before the browser is taken for dead."""
CHROMIUM_ARGS: Final = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--no-proxy-server",
    "--disable-renderer-backgrounding",
    "--disable-background-timer-throttling",
    "--disable-backgrounding-occluded-windows",
)
FIREFOX_PREFS: Final[dict[str, object]] = {
    # nothing leaves loopback: no updates, telemetry, remote settings, captive portal checks
    "app.update.disabledForTesting": True,
    "app.normandy.enabled": False,
    "browser.shell.checkDefaultBrowser": False,
    "browser.startup.homepage_override.mstone": "ignore",
    "browser.safebrowsing.malware.enabled": False,
    "browser.safebrowsing.phishing.enabled": False,
    "browser.region.network.url": "",
    "datareporting.policy.dataSubmissionEnabled": False,
    "toolkit.telemetry.reportingpolicy.firstRun": False,
    "extensions.update.enabled": False,
    "messaging-system.rsexperimentloader.enabled": False,
    "network.captive-portal-service.enabled": False,
    "network.connectivity-service.enabled": False,
    "network.proxy.type": 0,
    "services.settings.server": "http://127.0.0.1:9/",
    "dom.min_background_timeout_value": 4,
}


def find_browser(name: str) -> tuple[str, str | None]:
    """(browser executable, driver executable or None); a usage error when missing."""
    if name not in BROWSERS:
        raise UsageError(f"--browser must be one of {', '.join(BROWSERS)}, not {name!r}")
    names, drivers = _EXECUTABLES[name]
    binary = next((p for n in names if (p := shutil.which(n))), None)
    driver = next((p for n in drivers if (p := shutil.which(n))), None)
    if binary is None or (drivers and driver is None):
        missing = " or ".join(names) if binary is None else " or ".join(drivers)
        raise UsageError(
            f"--browser {name}: {missing} is not installed "
            f"(Debian: apt-get install {_PACKAGES[name]})"
        )
    return binary, driver


class Browser:
    """A running headless browser and its BiDi connection; :meth:`launch` starts one."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.version = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir = Path(tempfile.mkdtemp(prefix=f"sse-proxy-{name}-"))
        self._http: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task[None] | None = None
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        # Firefox discards a tab it is creating while another user context is being
        # removed: contexts are made and removed one at a time.
        self._contexts = asyncio.Lock()
        self._driver_session: str | None = None
        self._driver_url = ""

    @classmethod
    async def launch(cls, name: str) -> Browser:
        binary, driver = find_browser(name)
        browser = cls(name)
        try:
            if name == "chromium":
                assert driver is not None
                url = await browser._start_chromium(binary, driver)
            else:
                url = await browser._start_firefox(binary)
            browser._ws = await browser._session().ws_connect(url, max_msg_size=0)
            browser._reader = asyncio.ensure_future(browser._read())
            if name == "firefox":
                started = await browser.command("session.new", {"capabilities": {}})
                browser.version = str(started.get("capabilities", {}).get("browserVersion", ""))
        except BaseException:
            await browser.close()
            raise
        return browser

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = aiohttp.ClientSession(trust_env=False)
        return self._http

    def _spawn(self, argv: list[str], log: Path) -> None:
        with open(log, "wb") as out:
            self._proc = subprocess.Popen(  # noqa: S603 - the browser found on PATH
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "MOZ_CRASHREPORTER_DISABLE": "1"},
            )

    def _exited(self, log: Path) -> BrowserError:
        tail = log.read_text("utf-8", "replace").strip().splitlines()[-3:]
        return BrowserError(f"{self.name} exited at start: {' / '.join(tail) or 'no output'}")

    async def _start_chromium(self, binary: str, driver: str) -> str:
        port = free_port()
        log = self._dir / "chromedriver.log"
        self._spawn([driver, f"--port={port}", "--allowed-ips=127.0.0.1"], log)
        self._driver_url = f"http://127.0.0.1:{port}"
        caps = {
            "webSocketUrl": True,
            "goog:chromeOptions": {
                "binary": binary,
                "args": [*CHROMIUM_ARGS, f"--user-data-dir={self._dir / 'profile'}"],
            },
        }
        deadline = time.monotonic() + _START
        while True:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise self._exited(log)
            try:
                async with self._session().post(
                    f"{self._driver_url}/session", json={"capabilities": {"alwaysMatch": caps}}
                ) as resp:
                    answer = await resp.json(content_type=None)
                break
            except aiohttp.ClientConnectionError:
                if time.monotonic() > deadline:
                    raise BrowserError("chromedriver did not start listening") from None
                await asyncio.sleep(0.05)
        value = answer.get("value", {}) if isinstance(answer, dict) else {}
        if "sessionId" not in value:
            raise BrowserError(f"chromedriver refused a session: {value.get('message', value)}")
        self._driver_session = value["sessionId"]
        self.version = str(value.get("capabilities", {}).get("browserVersion", ""))
        return str(value["capabilities"]["webSocketUrl"])

    async def _start_firefox(self, binary: str) -> str:
        profile = self._dir / "profile"
        profile.mkdir()
        prefs = "".join(
            f"user_pref({json.dumps(k)}, {json.dumps(v)});\n" for k, v in FIREFOX_PREFS.items()
        )
        (profile / "user.js").write_text(prefs, encoding="utf-8")
        log = self._dir / "firefox.log"
        argv = [binary, "--headless", "--no-remote", "--profile", str(profile)]
        self._spawn([*argv, "--remote-debugging-port=0", "about:blank"], log)
        deadline = time.monotonic() + _START
        while time.monotonic() < deadline:
            assert self._proc is not None
            found = _BIDI_LINE.search(log.read_text("utf-8", "replace"))
            if found:
                return f"{found.group(1)}/session"
            if self._proc.poll() is not None:
                raise self._exited(log)
            await asyncio.sleep(0.05)
        raise BrowserError("firefox did not start its WebDriver BiDi server")

    async def _read(self) -> None:
        assert self._ws is not None
        async for msg in self._ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            with contextlib.suppress(ValueError, TypeError):
                data = json.loads(msg.data)
                waiter = self._waiting.pop(data.get("id"), None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(data)
        for waiter in self._waiting.values():  # the browser went away
            if not waiter.done():
                waiter.set_exception(BrowserError(f"{self.name} closed its connection"))
        self._waiting.clear()

    async def command(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """One BiDi command; its result, or :class:`BrowserError`."""
        if self._ws is None or self._ws.closed:
            raise BrowserError(f"{self.name} is not running")
        ident = next(self._ids)
        waiter = asyncio.get_running_loop().create_future()
        self._waiting[ident] = waiter
        await self._ws.send_str(json.dumps({"id": ident, "method": method, "params": params}))
        try:
            answer = await asyncio.wait_for(waiter, _COMMAND)
        except TimeoutError:
            raise BrowserError(f"{self.name} did not answer {method}") from None
        finally:
            self._waiting.pop(ident, None)
        if answer.get("type") == "error":
            raise BrowserError(f"{self.name}: {method}: {answer.get('message') or answer}")
        result = answer.get("result", {})
        return result if isinstance(result, dict) else {}

    async def open(self, url: str) -> str:
        """A new user context (no cookies, storage or cache shared) with a tab showing
        ``url`` (a tab: a headless Firefox opens a window in about a second, a tab in a
        tenth); its id, for :meth:`close_context`. Does not wait for the page to load.
        Firefox discards a tab it is creating while another context closes
        (``DiscardedBrowsingContextError``), so contexts are made and removed under one
        lock; a discard seen all the same is tried again, twice, a little later."""
        for attempt in range(3):
            async with self._contexts:
                context = (await self.command("browser.createUserContext", {}))["userContext"]
                try:
                    tab = await self.command(
                        "browsingContext.create", {"type": "tab", "userContext": context}
                    )
                    await self.command(
                        "browsingContext.navigate",
                        {"context": tab["context"], "url": url, "wait": "none"},
                    )
                except BaseException as exc:
                    await self._remove(context)
                    if (
                        not isinstance(exc, BrowserError)
                        or attempt == 2
                        or "Discarded" not in str(exc)
                    ):
                        raise
                else:
                    return str(context)
            await asyncio.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")  # pragma: no cover

    async def close_context(self, context: str) -> None:
        async with self._contexts:
            await self._remove(context)

    async def _remove(self, context: str) -> None:
        with contextlib.suppress(BrowserError):
            await self.command("browser.removeUserContext", {"userContext": context})

    async def close(self) -> None:
        """End the session, kill the browser and its driver whole, remove the profile."""
        if self._ws is not None and not self._ws.closed and self.name == "firefox":
            with contextlib.suppress(BrowserError, OSError, aiohttp.ClientError):
                await asyncio.wait_for(self.command("session.end", {}), 2.0)
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader
        if self._driver_session is not None and self._http is not None:
            with contextlib.suppress(OSError, aiohttp.ClientError, TimeoutError):
                async with (
                    asyncio.timeout(5.0),
                    self._http.delete(f"{self._driver_url}/session/{self._driver_session}"),
                ):
                    pass
        if self._http is not None:
            await self._http.close()
        if self._proc is not None:
            kill_session(self._proc.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(self._proc.wait, 5.0)
        shutil.rmtree(self._dir, ignore_errors=True)


_BIDI_LINE: Final = re.compile(r"WebDriver BiDi listening on (ws://\S+)")
