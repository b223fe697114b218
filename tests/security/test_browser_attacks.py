"""The front door against a real attacker's browser (headless Chromium via Selenium): a web
page of another site (``attacker.invalid``, resolved to 127.0.0.1 by the browser's own
host-resolver rules, as a rebinding DNS server would) tries the sidecar every way a page can
(a no-cors form-like POST, a CORS fetch, a WebSocket, and, rebound, same-origin requests);
the recording upstream behind it must never see the held key. A local web app whose origin
is allowed (``--allow-origin``) calls it and reads the answer.

A missing browser fails these tests (``scripts/system-deps.sh`` installs it); they never skip.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TypeVar

import pytest
from aiohttp import web
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from sse_proxy.server.run import start_proxy, stop_proxy
from sse_proxy.settings import Config
from tests.support.browser import ThreadLoop, chromium
from tests.support.cli import ServeProcess, http_get
from tests.support.net import free_port
from tests.support.upstreams import Seen, recording_app

T = TypeVar("T")
WAIT = 30.0
KEY = "sk-browser-held-0123456789"

_ATTACK_PAGE = """<!doctype html><meta charset="utf-8"><title>cute cats</title>
<pre id="out"></pre><script>
const proxy = new URLSearchParams(location.search).get("proxy");
const out = {};
async function run() {
  try {  // a form-like POST: no preflight, the page cannot read the answer but it is sent
    await fetch(proxy + "/v1/chat/completions", {method: "POST", mode: "no-cors",
      headers: {"Content-Type": "text/plain"}, body: '{"model":"gpt-4o","messages":[]}'});
    out.noCors = "sent";
  } catch (e) { out.noCors = "error"; }
  try {  // a JSON fetch: preflighted
    const r = await fetch(proxy + "/v1/chat/completions", {method: "POST",
      headers: {"Content-Type": "application/json"}, body: "{}"});
    out.cors = r.status + " " + await r.text();
  } catch (e) { out.cors = "error"; }
  out.ws = await new Promise((done) => {
    const ws = new WebSocket(proxy.replace("http", "ws") + "/v1/realtime");
    ws.onopen = () => { done("open"); ws.close(); };
    ws.onerror = () => done("error");
    setTimeout(() => done("timeout"), 5000);
  });
  document.getElementById("out").textContent = JSON.stringify(out);
}
run();
</script>"""

_REBOUND_PAGE_JS = """
const done = arguments[arguments.length - 1];
fetch("/v1/chat/completions", {method: "POST", headers: {"Content-Type": "application/json"},
  body: "{}"}).then(async (r) => done(r.status + " " + await r.text()),
                    (e) => done("error " + e));
"""


# A page on another port of this machine: same-site with the proxy (a site is a scheme and a
# host; the port is not part of it). Its <img> and <script> send Sec-Fetch-Site: same-site
# and no Origin; its fetch() sends its Origin.
_LOCAL_PAGE = """<!doctype html><meta charset="utf-8"><title>a local dev server</title>
<pre id="out"></pre><script>
const proxy = new URLSearchParams(location.search).get("proxy");
const out = {};
function tag(name, attr, path) {
  return new Promise((done) => {
    const el = document.createElement(name);
    el.onload = () => done("load");
    el.onerror = () => done("error");
    el[attr] = proxy + path;
    document.body.appendChild(el);
  });
}
async function run() {
  out.img = await tag("img", "src", "/v1/models?by=img");
  out.script = await tag("script", "src", "/v1/models?by=script");
  try {
    const r = await fetch(proxy + "/v1/models?by=fetch");
    out.fetch = r.status + " " + await r.text();
  } catch (e) { out.fetch = "error"; }
  document.getElementById("out").textContent = JSON.stringify(out);
}
run();
</script>"""


@pytest.fixture(scope="module")
def driver() -> Iterator[webdriver.Chrome]:
    # the attacker's DNS, answering 127.0.0.1 for its own name
    browser = chromium("--host-resolver-rules=MAP attacker.invalid 127.0.0.1")
    browser.set_script_timeout(WAIT)
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


async def _serve(app: web.Application) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, int(runner.addresses[0][1])


def _page_app() -> web.Application:
    async def page(_request: web.Request) -> web.Response:
        return web.Response(text=_ATTACK_PAGE, content_type="text/html")

    app = web.Application()
    app.router.add_get("/", page)
    return app


def _upstream(seen: list[Seen], *, grants_cors: bool) -> web.Application:
    """The recording upstream, with a WebSocket endpoint; ``grants_cors``: it lets any page
    read its answers, as APIs that allow browsers do."""

    async def realtime(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for _ in ws:
            pass
        return ws

    async def grant(_request: web.Request, response: web.StreamResponse) -> None:
        for name in ("Origin", "Headers", "Methods"):
            response.headers[f"Access-Control-Allow-{name}"] = "*"

    app = web.Application()
    app.router.add_get("/v1/realtime", realtime)
    app.add_subapp("/v1/chat", recording_app(seen))
    if grants_cors:
        app.on_response_prepare.append(grant)
    return app


def _results(browser: webdriver.Chrome) -> dict[str, str]:
    text = WebDriverWait(browser, WAIT).until(lambda b: b.find_element(By.ID, "out").text or False)
    result: dict[str, str] = json.loads(str(text))
    return result


def test_an_attackers_page_cannot_spend_the_held_key(
    driver: webdriver.Chrome, loop: ThreadLoop
) -> None:
    seen: list[Seen] = []
    up_runner, up_port = loop.run(_serve(_upstream(seen, grants_cors=True)))
    page_runner, page_port = loop.run(_serve(_page_app()))
    runner, proxy = loop.run(
        start_proxy(
            Config(
                upstream=f"http://127.0.0.1:{up_port}",
                port=0,
                shutdown_grace=0.5,
                upstream_headers=(("Authorization", f"Bearer {KEY}"),),
            )
        )
    )
    proxy_port = proxy.rsplit(":", 1)[1]
    try:
        # 1 and 3: a page of another site, cross-site requests and a WebSocket
        driver.get(f"http://attacker.invalid:{page_port}/?proxy={proxy}")
        out = _results(driver)
        assert out["cors"] == "error", out  # refused (403, no CORS): the page reads nothing
        assert out["ws"] == "error", out  # no 101
        assert seen == [], [(s.method, s.raw_path) for s in seen]  # not even the no-cors one
        # 2: rebound, the attacker's name now points at the proxy: same-origin requests
        driver.get(f"http://attacker.invalid:{proxy_port}/v1/chat/models")
        assert "host_not_served" in driver.page_source
        rebound = driver.execute_async_script(_REBOUND_PAGE_JS)
        assert str(rebound).startswith("421 "), rebound
    finally:
        loop.run(stop_proxy(runner))
        loop.run(page_runner.cleanup())
        loop.run(up_runner.cleanup())
    assert seen == [], [(s.method, s.raw_path) for s in seen]


def test_an_allowed_local_web_app_calls_the_sidecar(
    driver: webdriver.Chrome, loop: ThreadLoop
) -> None:
    """``--allow-origin http://localhost:PORT``: the app's preflighted JSON fetch reaches
    the upstream with the held key and the app reads the answer; its WebSocket opens."""
    seen: list[Seen] = []
    up_runner, up_port = loop.run(_serve(_upstream(seen, grants_cors=False)))
    page_runner, page_port = loop.run(_serve(_page_app()))
    origin = f"http://localhost:{page_port}"
    runner, proxy = loop.run(
        start_proxy(
            Config(
                upstream=f"http://127.0.0.1:{up_port}",
                port=0,
                shutdown_grace=0.5,
                upstream_headers=(("Authorization", f"Bearer {KEY}"),),
                allow_origins=(origin,),
            )
        )
    )
    try:
        driver.get(f"{origin}/?proxy={proxy}")
        out = _results(driver)
    finally:
        loop.run(stop_proxy(runner))
        loop.run(page_runner.cleanup())
        loop.run(up_runner.cleanup())
    status, _, body = out["cors"].partition(" ")
    assert status == "200", out
    assert json.loads(body)["method"] == "POST"
    assert out["ws"] == "open", out
    with_key = [s for s in seen if ("Authorization", f"Bearer {KEY}") in s.headers]
    assert [s.method for s in with_key] == ["POST", "POST"]  # the no-cors one and the fetch


def test_a_page_on_another_loopback_port_cannot_spend_the_held_key(
    driver: webdriver.Chrome, loop: ThreadLoop
) -> None:
    """A local web app on another port (same-site): its <img> and <script> aimed at the
    real `sse-proxy serve` are refused before anything is forwarded, even with its origin
    allowed; its fetch(), which sends that Origin, gets through with the held key, and so
    does an SDK-shaped request (no Fetch Metadata)."""
    seen: list[Seen] = []
    up_runner, up_port = loop.run(_serve(recording_app(seen)))

    async def page(_request: web.Request) -> web.Response:
        return web.Response(text=_LOCAL_PAGE, content_type="text/html")

    page_app = web.Application()
    page_app.router.add_get("/", page)
    page_runner, page_port = loop.run(_serve(page_app))
    local_app = f"http://127.0.0.1:{page_port}"
    port = free_port()
    proxy = f"http://127.0.0.1:{port}"
    try:
        with ServeProcess(
            "--port",
            str(port),
            "--upstream",
            f"http://127.0.0.1:{up_port}",
            "--upstream-header",
            f"Authorization: Bearer {KEY}",
            "--allow-origin",
            local_app,
        ) as serve:
            serve.wait_for("proxy.started")
            driver.get(f"{local_app}/?proxy={proxy}")
            out = _results(driver)
            status, _ = http_get(f"{proxy}/v1/models?by=sdk")  # no Fetch Metadata
            refused = [e for e in serve.lines() if e.get("event") == "frontdoor.refused"]
    finally:
        loop.run(page_runner.cleanup())
        loop.run(up_runner.cleanup())
    assert (out["img"], out["script"]) == ("error", "error"), out
    fetched, _, body = out["fetch"].partition(" ")
    assert fetched == "200", out
    assert json.loads(body)["path"] == "/v1/models?by=fetch"
    assert status == 200
    with_key = [s.raw_path for s in seen if ("Authorization", f"Bearer {KEY}") in s.headers]
    assert with_key == ["/v1/models?by=fetch", "/v1/models?by=sdk"], with_key
    assert sorted(e["path"] for e in refused) == ["/v1/models", "/v1/models"], refused
    assert {e["fetch_site"] for e in refused} == {"same-site"}
