"""A sidecar for every major LLM API: the openai, anthropic and google-genai SDKs stream
exactly through ONE `sse-proxy serve` process with three routes, behind a real forward
proxy, with every API key held by the sidecar (the apps hold none).

Everything is real and on loopback: three mock upstreams that refuse a request without
their own key (401), pproxy as the corporate proxy (it must report every upstream
connection), the sidecar as a subprocess configured by a TOML file, the vendors' SDKs as
the apps.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import anthropic
import openai
import pytest
from google import genai
from google.genai import types

from sse_proxy.tools import fixtures
from sse_proxy.tools.mock_upstream import mock_upstream
from tests.support.cli import ServeProcess
from tests.support.peers import forward_proxy

OPENAI_KEY = "sk-openai-held-by-the-sidecar-0001"
ANTHROPIC_KEY = "sk-ant-held-by-the-sidecar-0002"
GEMINI_KEY = "gm-held-by-the-sidecar-in-a-file-0003"
APP_KEY = "the-app-has-no-real-key"
PROMPT = "Say hello"


def _config(tmp_path: Path, oai: str, ant: str, gem: str) -> Path:
    key_file = tmp_path / "gemini.key"
    key_file.write_text(GEMINI_KEY + "\n")
    path = tmp_path / "sidecar.toml"
    path.write_text(
        f"""
[sse-proxy]
port = 0
log_level = "info"

[routes."/openai"]
upstream = "{oai}/v1"
drop_client_auth = true
headers = {{ Authorization = "Bearer ${{E2E_OPENAI_KEY}}" }}

[routes."/anthropic"]
upstream = "{ant}"
dialect = "anthropic"
drop_client_auth = true
headers = {{ "x-api-key" = "${{E2E_ANTHROPIC_KEY}}" }}

[routes."/gemini"]
upstream = "{gem}"
drop_client_auth = true
headers = {{ "x-goog-api-key" = "${{file:{key_file}}}" }}
""",
        encoding="utf-8",
    )
    return path


async def _openai_text(base: str) -> str:
    client = openai.AsyncOpenAI(base_url=f"{base}/openai/v1", api_key=APP_KEY, max_retries=0)
    parts: list[str] = []
    async with client:
        stream = await client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": PROMPT}], stream=True
        )
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                parts.append(chunk.choices[0].delta.content)
    return "".join(parts)


async def _anthropic_text(base: str) -> str:
    client = anthropic.AsyncAnthropic(base_url=f"{base}/anthropic", api_key=APP_KEY, max_retries=0)
    async with (
        client,
        client.messages.stream(
            model="claude-3-5-sonnet-20241022",
            max_tokens=1024,
            messages=[{"role": "user", "content": PROMPT}],
        ) as stream,
    ):
        return "".join([text async for text in stream.text_stream])


async def _gemini_text(base: str) -> str:
    client = genai.Client(
        api_key=APP_KEY,
        http_options=types.HttpOptions(base_url=f"{base}/gemini", retry_options=None),
    )
    parts: list[str] = []
    async for chunk in await client.aio.models.generate_content_stream(
        model="gemini-2.0-flash", contents=PROMPT
    ):
        parts.append(chunk.text or "")
    return "".join(parts)


@pytest.mark.asyncio
# google-genai's async client subclasses aiohttp.ClientSession, which aiohttp discourages
@pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession:DeprecationWarning")
async def test_three_sdks_through_one_sidecar_behind_a_forward_proxy_with_held_keys(
    tmp_path: Path,
) -> None:
    async with (
        mock_upstream(seed=11, api_key=OPENAI_KEY) as oai,
        mock_upstream(seed=12, api_key=ANTHROPIC_KEY) as ant,
        mock_upstream(seed=13, api_key=GEMINI_KEY) as gem,
    ):
        # the upstreams really refuse a request without their key
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"{oai}/v1/chat/completions",
                json={"stream": True},
                headers={"Authorization": f"Bearer {APP_KEY}"},
            ) as resp,
        ):
            assert resp.status == 401
        with forward_proxy() as fp:
            env = {
                "HTTP_PROXY": fp.url,
                "NO_PROXY": "",
                "no_proxy": "",
                "E2E_OPENAI_KEY": OPENAI_KEY,
                "E2E_ANTHROPIC_KEY": ANTHROPIC_KEY,
            }
            with ServeProcess("--config", str(_config(tmp_path, oai, ant, gem)), env=env) as sc:
                (started,) = await asyncio.to_thread(sc.wait_for, "proxy.started")
                base = started["listen"]
                assert {r["route"] for r in started["routes"]} == {
                    "/openai",
                    "/anthropic",
                    "/gemini",
                }
                assert started["network"]["http_proxy"] == fp.url
                got = await asyncio.gather(
                    _openai_text(base), _anthropic_text(base), _gemini_text(base)
                )
                assert list(got) == [fixtures.MESSAGE] * 3
                summaries = await asyncio.to_thread(sc.wait_for, "stream.summary", 3)
            log = sc.stop()
            for upstream in (oai, ant, gem):
                assert fp.wait_tunnelled(upstream.removeprefix("http://")) >= 1, fp.lines
    by_route = {s["route"]: s for s in summaries}
    assert {r: (s["dialect"], s["text_length"]) for r, s in by_route.items()} == {
        "/openai": ("openai", len(fixtures.MESSAGE)),
        "/anthropic": ("anthropic", len(fixtures.MESSAGE)),
        "/gemini": ("gemini", len(fixtures.MESSAGE)),
    }
    assert all(s["upstream_status"] == 200 and s["ended_by"] == "upstream_eof" for s in summaries)
    lines = [json.loads(x) for x in log.splitlines() if x.strip()]
    assert not [e for e in lines if e.get("level") in ("warning", "error")], lines
    for key in (OPENAI_KEY, ANTHROPIC_KEY, GEMINI_KEY):
        assert key not in log
