"""`sse-proxy test-client --browser chromium|firefox --script FILE.js`: browser code as the client.

One headless browser per run (:mod:`.bidi`), a page per case served on loopback
(:mod:`.page`): it imports FILE.js and calls its default export with ``{url, body, headers,
dialect}``; the string it resolves to is the output, as CMD's stdout is, a rejection a
crash (the error and the page's console in place of stderr), no answer within the timeout
a hang (:mod:`.run`).
"""

from __future__ import annotations

from sse_proxy.tools.testclient.browser.bidi import BROWSERS, Browser, find_browser
from sse_proxy.tools.testclient.browser.page import PageServer
from sse_proxy.tools.testclient.browser.run import BrowserRun, request_headers

__all__ = ["BROWSERS", "Browser", "BrowserRun", "PageServer", "find_browser", "request_headers"]
