"""The start-up line's `set VAR=URL` is right: the vendors' SDKs, configured by nothing but
that variable, stream the exact text through the proxy on every route."""

from __future__ import annotations

import anthropic
import openai
import pytest
from google import genai
from google.genai import types

from sse_proxy.server.keys import ROUTES
from sse_proxy.server.routes import Route
from sse_proxy.server.run import app_env, start_proxy, stop_proxy
from sse_proxy.settings import Config, RouteSpec
from sse_proxy.tools import fixtures
from sse_proxy.tools.mock_upstream import mock_upstream


def _route(prefix: str, upstream: str, dialect: str = "auto") -> Route:
    return Route(prefix, prefix, upstream, dialect, (), False)


def test_the_variable_follows_the_dialect_then_the_upstream_host() -> None:
    """Dialect first, then the upstream's host; OpenAI-compatible otherwise; none for text."""
    url = "http://0.0.0.0:8787"  # listening everywhere: the app still uses loopback
    got = app_env(
        url,
        [
            _route("/", "https://api.openai.com"),
            _route("/a", "https://api.anthropic.com"),
            _route("/g", "https://generativelanguage.googleapis.com"),
            _route("/v", "https://us-central1-aiplatform.googleapis.com"),
            _route("/local", "http://127.0.0.1:11434/v1"),
            _route("/claude", "http://127.0.0.1:9", "anthropic"),
            _route("/raw", "http://127.0.0.1:9", "text"),
        ],
    )
    assert [e["set"] for e in got] == [
        "OPENAI_BASE_URL=http://127.0.0.1:8787/v1",
        "ANTHROPIC_BASE_URL=http://127.0.0.1:8787/a",
        "ANTHROPIC_BASE_URL=http://127.0.0.1:8787/claude",
        "GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:8787/g",
        "OPENAI_BASE_URL=http://127.0.0.1:8787/local/v1",
        "your client's base URL to http://127.0.0.1:8787/raw",
        "GOOGLE_VERTEX_BASE_URL=http://127.0.0.1:8787/v",
    ]


@pytest.mark.asyncio
# google-genai's async client subclasses aiohttp.ClientSession, which aiohttp discourages
@pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession:DeprecationWarning")
async def test_each_sdk_streams_through_with_only_the_variable_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "GOOGLE_GEMINI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    async with mock_upstream(seed=3) as upstream:
        cfg = Config(
            upstream=upstream,
            port=0,
            routes=(
                RouteSpec(prefix="/anthropic", upstream=upstream, dialect="anthropic"),
                RouteSpec(prefix="/gemini", upstream=upstream + "/", dialect="gemini"),
            ),
        )
        runner, url = await start_proxy(cfg)
        try:
            hints = {e["route"]: e for e in app_env(url, runner.app[ROUTES].routes)}
            assert set(hints) == {"default", "/anthropic", "/gemini"}
            for entry in hints.values():
                monkeypatch.setenv(entry["variable"], entry["url"])
            oai = openai.AsyncOpenAI(api_key="k", max_retries=0)
            async with oai:
                stream = await oai.chat.completions.create(
                    model="gpt-4o-mini",
                    messages=[{"role": "user", "content": "Say hello"}],
                    stream=True,
                )
                text = "".join(
                    [c.choices[0].delta.content or "" async for c in stream if c.choices]
                )
            assert text == fixtures.MESSAGE
            ant = anthropic.AsyncAnthropic(api_key="k", max_retries=0)
            async with (
                ant,
                ant.messages.stream(
                    model="claude-3-5-sonnet-20241022",
                    max_tokens=64,
                    messages=[{"role": "user", "content": "Say hello"}],
                ) as messages,
            ):
                text = "".join([t async for t in messages.text_stream])
            assert text == fixtures.MESSAGE
            gem = genai.Client(api_key="k", http_options=types.HttpOptions(retry_options=None))
            parts = [
                chunk.text or ""
                async for chunk in await gem.aio.models.generate_content_stream(
                    model="gemini-2.0-flash", contents="Say hello"
                )
            ]
            assert "".join(parts) == fixtures.MESSAGE
        finally:
            await stop_proxy(runner)
