"""End to end in a real headless browser (Debian's Chromium and chromedriver, via Selenium).

The inspector: faulty streams from the mock upstream run through a proxy started with
``--ui`` while the page is open; their rows appear live, filter by alert, and a stream's
page has its alert marker at the byte the core reports. The report: ``test-client
--html`` on a client that decodes each read alone; the first difference is highlighted.

A missing browser fails these tests (``.ci/run`` installs it); they never skip. Set
``SSE_PROXY_SCREENSHOTS=DIR`` to save screenshots; ``docs/screenshots.sh`` makes the ones
docs/inspector.md shows (from a clean home, so no machine path appears in them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import aiohttp
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import Select, WebDriverWait

from sse_proxy.core import StreamReassembler
from sse_proxy.core.alerts import ReplacementChar
from sse_proxy.inspect.report import first_difference_at
from sse_proxy.server.run import start_proxy, stop_proxy
from sse_proxy.settings import Config
from sse_proxy.tools import fixtures
from sse_proxy.tools.mock_upstream import start_mock_upstream
from tests.support.browser import ThreadLoop, chromium
from tests.support.cli import ROOT, cli_env
from tests.support.recordings import CLIENTS

T = TypeVar("T")
WAIT = 20.0  # an upper bound on each wait; waits end as soon as the element is there
UI = "/_sse-proxy/ui"


@pytest.fixture(scope="module")
def driver() -> Iterator[webdriver.Chrome]:
    browser = chromium(
        "--window-size=1280,1400",
        capabilities={"goog:loggingPrefs": {"performance": "ALL"}},  # network events
    )
    try:
        yield browser
    finally:
        browser.quit()


@pytest.fixture
def loop() -> Iterator[ThreadLoop]:
    lp = ThreadLoop(WAIT)
    try:
        yield lp
    finally:
        lp.close()


def _shots() -> Path | None:
    where = os.environ.get("SSE_PROXY_SCREENSHOTS")
    return Path(where) if where else None


def _shoot(browser: webdriver.Chrome, name: str) -> None:
    where = _shots()
    if where is not None:
        where.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(where / name))


async def _stream(url: str, fault: str | None, path: str = "/v1/chat/completions") -> str:
    headers = {"X-Mock-Fault": fault} if fault else {}
    async with (
        aiohttp.ClientSession() as s,
        s.post(url + path, json={"stream": True}, headers=headers) as resp,
    ):
        await resp.read()
        return resp.headers["X-SSE-Proxy-Stream-Id"]


def _offsets(fault: str) -> list[int]:
    r = StreamReassembler()
    data = fixtures.faulty_stream(fault, "openai")
    alerts = r.feed(data).alerts + r.close().alerts
    return sorted(a.byte_offset for a in alerts if isinstance(a, ReplacementChar))


def test_inspector_live(driver: webdriver.Chrome, loop: ThreadLoop) -> None:
    upstream, up_url = loop.run(start_mock_upstream(seed=7))
    runner, url = loop.run(
        start_proxy(
            Config(
                upstream=up_url,
                port=0,
                ui=True,
                ui_text=True,
                shutdown_grace=0.5,
                log_level="error",
            )
        )
    )
    try:
        wait = WebDriverWait(driver, WAIT)
        driver.get(url + UI)
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, '#live[data-state="live"]')))
        ids = {f: loop.run(_stream(url, f)) for f in ("invalid_utf8", "crlf", "unterminated")}
        ids["clean"] = loop.run(_stream(url, None, "/v1/messages"))
        for fault, sid in ids.items():  # each row arrives over the feed, no reload
            row = wait.until(ec.presence_of_element_located((By.ID, f"row-{sid}")))
            if fault == "invalid_utf8":  # its alerts are in the row once it ends
                wait.until(
                    ec.text_to_be_present_in_element((By.ID, f"row-{sid}"), "replacement_char×2")
                )
            assert row.get_attribute("id") == f"row-{sid}"
        _shoot(driver, "inspector-list.png")
        Select(driver.find_element(By.ID, "f-alert")).select_by_value("sse.replacement_char")
        wait.until(ec.invisibility_of_element_located((By.ID, f"row-{ids['crlf']}")))
        assert driver.find_element(By.ID, f"row-{ids['invalid_utf8']}").is_displayed()
        assert not driver.find_element(By.ID, f"row-{ids['clean']}").is_displayed()
        # by verdict (the summary's, from production monitoring): the broken stream only
        Select(driver.find_element(By.ID, "f-alert")).select_by_value("")
        broken = driver.find_element(By.ID, f"row-{ids['unterminated']}")
        assert broken.get_attribute("data-verdict") == "broken"
        Select(driver.find_element(By.ID, "f-verdict")).select_by_value("broken")
        wait.until(ec.invisibility_of_element_located((By.ID, f"row-{ids['invalid_utf8']}")))
        assert broken.is_displayed()
        Select(driver.find_element(By.ID, "f-verdict")).select_by_value("")
        wait.until(ec.visibility_of_element_located((By.ID, f"row-{ids['invalid_utf8']}")))
        # keyboard: focus the stream's link and press Enter
        link = driver.find_element(By.CSS_SELECTOR, f"#row-{ids['invalid_utf8']} a")
        link.send_keys(Keys.ENTER)
        marks = wait.until(
            ec.presence_of_all_elements_located(
                (By.CSS_SELECTOR, 'a.m.alert[data-name="sse.replacement_char"]')
            )
        )
        expected = _offsets("invalid_utf8")
        assert sorted(int(m.get_attribute("data-off") or -1) for m in marks) == expected
        # the marker sits right before the byte it names
        after = driver.execute_script(
            "return arguments[0].nextElementSibling.dataset.off;", marks[0]
        )
        assert int(after) == int(marks[0].get_attribute("data-off") or -1)
        marks[0].send_keys(Keys.ENTER)
        assert driver.current_url.endswith("#alert-0")
        href = driver.find_element(By.ID, "download").get_attribute("href") or ""
        assert href.endswith(f"{ids['invalid_utf8']}.ssrec")
        driver.execute_script("window.scrollTo(0, 0)")
        _shoot(driver, "inspector-stream.png")
    finally:
        loop.run(stop_proxy(runner))
        loop.run(upstream.cleanup())


def _favicon_answered(browser: webdriver.Chrome) -> list[str]:
    """Wait until the browser got an answer for /favicon.ico; every URL it requested."""
    asked: list[str] = []
    answered = False

    def done(_: object) -> bool:
        nonlocal answered
        for entry in browser.get_log("performance"):  # type: ignore[no-untyped-call]
            message = json.loads(entry["message"])["message"]
            if message["method"] == "Network.requestWillBeSent":
                asked.append(message["params"]["request"]["url"])
            elif message["method"] == "Network.responseReceived":
                answered |= message["params"]["response"]["url"].endswith("/favicon.ico")
        return answered

    WebDriverWait(browser, WAIT).until(done)
    return asked


def test_opening_the_inspector_sends_no_favicon_request_upstream(
    driver: webdriver.Chrome, loop: ThreadLoop
) -> None:
    """The pages name no icon to fetch; a page without one (the JSON) gets /favicon.ico
    answered by the proxy: the upstream never sees it. The list shows the route name."""
    from aiohttp import web

    from tests.support.net import running_app

    seen: list[str] = []

    async def sse(request: web.Request) -> web.Response:  # records every path it is asked
        seen.append(request.path)
        return web.Response(body=b"data: hi\n\n", content_type="text/event-stream")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", sse)
    upstream = running_app(app)
    up_url = loop.run(upstream.__aenter__())
    runner, url = loop.run(
        start_proxy(Config(upstream=up_url, port=0, ui=True, shutdown_grace=0.5, log_level="error"))
    )
    try:
        driver.get_log("performance")  # type: ignore[no-untyped-call]  # earlier tests'
        loop.run(_stream(url, None, "/v1/text"))  # one stream, through the recording upstream
        driver.get(url + UI)
        WebDriverWait(driver, WAIT).until(ec.presence_of_element_located((By.CSS_SELECTOR, "td")))
        cells = [td.text for td in driver.find_elements(By.CSS_SELECTOR, "tbody tr td")]
        assert "default" in cells, cells  # the route as the logs name it, not "-"
        driver.get(url + UI + "/streams.json")
        asked = _favicon_answered(driver)
    finally:
        loop.run(stop_proxy(runner))
        loop.run(upstream.__aexit__(None, None, None))
    assert [u for u in asked if u.endswith("/favicon.ico")] == [url + "/favicon.ico"], asked
    assert seen == ["/v1/text"]


def test_report_first_difference(driver: webdriver.Chrome, tmp_path: Path) -> None:
    data = fixtures.clean_stream("text", fixtures.SHORT_TOKENS)
    cut = data.index("🦊".encode()) + 2
    report = tmp_path / "report.html"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sse_proxy",
            "test-client",
            "--dialect",
            "text",
            "--only",
            f"cut:{cut}",
            "--html",
            str(report),
            "--",
            sys.executable,
            "-m",
            f"{CLIENTS}.decode_each_read",
        ],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr.decode()
    driver.get(report.as_uri())
    wait = WebDriverWait(driver, WAIT)
    got = wait.until(ec.visibility_of_element_located((By.ID, "case-0-got")))
    received = driver.find_element(By.CSS_SELECTOR, "#case-0 .diff pre:nth-of-type(2)").text
    at = first_difference_at(fixtures.SHORT_MESSAGE, received)
    assert at is not None
    assert got.text == received[at]
    assert got.text == "\ufffd"
    assert f"character {at}" in (got.get_attribute("title") or "")
    cut_el = driver.find_element(By.CSS_SELECTOR, "#case-0 .strip .cut")
    assert cut_el.get_attribute("data-boundary") == str(cut)
    _shoot(driver, "report.png")
