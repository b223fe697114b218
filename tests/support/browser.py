"""Headless Chromium for the browser tests (Debian's chromium and chromium-driver, driven
by Selenium), and an event loop in a thread for the servers while Selenium blocks.

A missing browser fails the tests that use it (``scripts/system-deps.sh`` installs it);
they never skip.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from sse_proxy.tools.testclient.browser.bidi import CHROMIUM_ARGS

__all__ = ["ThreadLoop", "chromium", "find_executable"]

T = TypeVar("T")


def find_executable(*names: str) -> str:
    """The first of ``names`` on PATH, or a failure that says how to install it."""
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    raise AssertionError(
        f"no {' or '.join(names)} on PATH: run scripts/system-deps.sh (Debian's chromium "
        "and chromium-driver)"
    )


def chromium(*flags: str, capabilities: dict[str, Any] | None = None) -> webdriver.Chrome:
    """A headless Chromium with the flags ``sse-proxy test-client --browser`` starts it with
    (they work in a container), plus ``flags``."""
    options = webdriver.ChromeOptions()
    options.binary_location = find_executable("chromium", "chromium-browser")
    for arg in (*CHROMIUM_ARGS, *flags):
        options.add_argument(arg)
    for name, value in (capabilities or {}).items():
        options.set_capability(name, value)
    service = Service(executable_path=find_executable("chromedriver"))
    return webdriver.Chrome(options=options, service=service)


class ThreadLoop:
    """An event loop in a thread: the servers run there while Selenium blocks here."""

    def __init__(self, wait: float) -> None:
        self.wait = wait
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(self.wait)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(self.wait)
        self.loop.close()
