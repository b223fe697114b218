"""Gemini on every surface: the mock upstream's endpoints, and `sse-proxy check`."""

from __future__ import annotations

import json
import subprocess
import sys

import aiohttp
import pytest

from sse_proxy.tools import fixtures
from sse_proxy.tools.mock_upstream import mock_upstream

GEMINI = "/v1beta/models/gemini-2.0-flash:streamGenerateContent"
VERTEX = (
    "/v1/projects/p/locations/us-central1/publishers/google/models/"
    "gemini-2.0-flash:streamGenerateContent"
)
BODY = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


@pytest.mark.asyncio
async def test_mock_upstream_gemini_endpoints() -> None:
    async with mock_upstream(seed=3) as url, aiohttp.ClientSession() as session:
        for path in (GEMINI, VERTEX, GEMINI.replace("v1beta", "v1")):
            async with session.post(url + path, params={"alt": "sse"}, json=BODY) as resp:
                assert resp.headers["Content-Type"].startswith("text/event-stream")
                reads = [c async for c in resp.content.iter_any()]
            assert b"".join(reads) == fixtures.clean_stream("gemini"), path
        async with session.post(url + GEMINI, json=BODY) as resp:  # no alt=sse: an array
            chunks = await resp.json()
        text = "".join(
            p.get("text", "") for c in chunks for p in c["candidates"][0]["content"]["parts"]
        )
        assert text == fixtures.MESSAGE
        async with session.post(
            url + GEMINI.replace("streamGenerateContent", "generateContent"), json=BODY
        ) as resp:
            whole = await resp.json()
        assert whole["candidates"][0]["content"]["parts"][0]["text"] == fixtures.MESSAGE
        async with session.post(url + "/v1beta/models/x:explode", json=BODY) as resp:
            assert resp.status == 404
        async with session.post(
            url + GEMINI, params={"alt": "sse"}, json=BODY, headers={"X-Mock-Fault": "truncated"}
        ) as resp:
            assert await resp.read() == fixtures.faulty_stream("truncated", "gemini")


@pytest.mark.asyncio
async def test_mock_upstream_api_key_is_required_when_set() -> None:
    async with mock_upstream(api_key="k-123") as url, aiohttp.ClientSession() as session:
        async with session.post(url + GEMINI, params={"alt": "sse"}, json=BODY) as resp:
            assert resp.status == 401
        for headers, params in (
            ({"x-goog-api-key": "k-123"}, {"alt": "sse"}),
            ({}, {"alt": "sse", "key": "k-123"}),
            ({"Authorization": "Bearer k-123"}, {"alt": "sse"}),
        ):
            async with session.post(url + GEMINI, params=params, json=BODY, headers=headers) as r:
                assert r.status == 200, (headers, params)
                await r.read()
        async with session.get(url + "/healthz") as resp:
            assert resp.status == 200


def _check(*args: str, stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "sse_proxy", "check", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_check_gemini_text_and_alerts() -> None:
    clean = fixtures.gemini_stream(newline="\r\n")
    proc = _check("--text", "-", stdin=clean)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode() == fixtures.MESSAGE
    summary = json.loads(proc.stderr.decode().strip().splitlines()[-1])
    assert summary["dialect"] == "gemini"
    proc = _check(
        "--dialect", "gemini", "--text", "-", stdin=fixtures.faulty_stream("truncated", "gemini")
    )
    assert proc.returncode == 1
    assert "sse.truncated" in proc.stderr.decode()


def test_check_summary_counts_reasoning_apart() -> None:
    data = fixtures.gemini_stream(fixtures.SHORT_TOKENS, thinking=("Hmm, ", "ça."))
    proc = _check("--text", "-", stdin=data)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode() == fixtures.SHORT_MESSAGE
    summary = json.loads(proc.stderr.decode().strip().splitlines()[-1])
    assert summary["reasoning_length"] == len("Hmm, ça.")
    assert summary["text_length"] == len(fixtures.SHORT_MESSAGE)
