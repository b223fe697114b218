"""Gemini on every surface: the mock upstream's endpoints, `sse-proxy check`, and `serve`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

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


def _summary(proc: subprocess.CompletedProcess[bytes]) -> dict[str, Any]:
    line: dict[str, Any] = json.loads(proc.stderr.decode().strip().splitlines()[-1])
    assert line["event"] == "stream.summary"
    return line


def test_check_summary_carries_model_response_id_finish_reason_and_usage() -> None:
    """The fixture's last chunk has ``finishReason: STOP`` and ``usageMetadata``: the
    summary says so, with the model (``modelVersion``) and id (``responseId``)."""
    proc = _check("--dialect", "gemini", "--text", "-", stdin=fixtures.gemini_stream())
    assert proc.returncode == 0, proc.stderr
    line = _summary(proc)
    assert line["finish_reasons"] == ["STOP"]
    assert line["response_model"] == "gemini-2.0-flash"
    assert line["response_id"] == "mockGeminiResponse0001"
    assert line["input_tokens"] == 12
    assert line["output_tokens"] == len(fixtures.TOKENS)


def test_check_reads_thoughts_and_cached_tokens_from_the_last_usage() -> None:
    """Gemini 2.5's counts: thoughts are reasoning tokens, the cached prompt is cached
    tokens; each chunk's usage is cumulative, the last one is what counts."""
    chunks = [
        {
            "candidates": [{"content": {"parts": [{"text": t}], "role": "model"}, "index": 0}],
            "usageMetadata": {"promptTokenCount": 30, "candidatesTokenCount": n},
            "modelVersion": "gemini-2.5-pro",
            "responseId": "r-25",
        }
        for n, t in enumerate(("Bonjour", " à", " tous"), 1)
    ]
    chunks[-1]["candidates"][0]["finishReason"] = "MAX_TOKENS"  # type: ignore[index]
    chunks[-1]["usageMetadata"] = {
        "promptTokenCount": 30,
        "candidatesTokenCount": 3,
        "cachedContentTokenCount": 24,
        "thoughtsTokenCount": 112,
        "totalTokenCount": 145,
    }
    data = b"".join(b"data: " + json.dumps(c).encode() + b"\r\n\r\n" for c in chunks)
    proc = _check("--text", "-", stdin=data)
    assert proc.stdout.decode() == "Bonjour à tous"
    line = _summary(proc)
    assert line["dialect"] == "gemini"
    assert line["finish_reasons"] == ["MAX_TOKENS"]
    assert (line["response_model"], line["response_id"]) == ("gemini-2.5-pro", "r-25")
    assert (line["input_tokens"], line["output_tokens"]) == (30, 3)
    assert (line["cached_tokens"], line["reasoning_tokens"]) == (24, 112)


async def _read_log(proc: asyncio.subprocess.Process, lines: list[dict[str, Any]]) -> None:
    assert proc.stderr is not None
    async for raw in proc.stderr:
        with contextlib.suppress(ValueError):
            lines.append(json.loads(raw))


async def _logged(lines: list[dict[str, Any]], event: str, **match: Any) -> dict[str, Any]:
    async with asyncio.timeout(20):
        while True:
            for line in lines:
                if line.get("event") == event and all(line.get(k) == v for k, v in match.items()):
                    return line
            await asyncio.sleep(0.02)


@pytest.mark.asyncio
async def test_serve_summary_and_metrics_carry_gemini_usage() -> None:
    """A real ``sse-proxy serve`` in front of the mock's Gemini endpoint: the stream's
    summary has model, id, finish reason and usage, and the token metrics count it."""
    async with mock_upstream(seed=5) as upstream:
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "sse_proxy", "serve", "--upstream", upstream),
            *("--port", "0", "--log-level", "info"),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        lines: list[dict[str, Any]] = []
        reader = asyncio.create_task(_read_log(proc, lines))
        try:
            started = await _logged(lines, "proxy.started")
            url = started["listen"]
            async with aiohttp.ClientSession() as session:
                async with session.post(url + GEMINI, params={"alt": "sse"}, json=BODY) as resp:
                    assert await resp.read() == fixtures.clean_stream("gemini")
                    sid = resp.headers["X-SSE-Proxy-Stream-Id"]
                line = await _logged(lines, "stream.summary", stream_id=sid)
                async with session.get(started["metrics"]) as resp:
                    metrics = await resp.text()
        finally:
            proc.terminate()
            await proc.wait()
            await reader
    assert line["dialect"] == "gemini"
    assert line["verdict"] == "ok"
    assert line["finish_reasons"] == ["STOP"]
    assert line["response_model"] == "gemini-2.0-flash"
    assert line["response_id"] == "mockGeminiResponse0001"
    assert (line["input_tokens"], line["output_tokens"]) == (12, len(fixtures.TOKENS))
    samples = {
        (s.name, s.labels.get("dialect")): s.value
        for family in text_string_to_metric_families(metrics)
        for s in family.samples
    }
    assert samples[("sse_proxy_output_tokens_total", "gemini")] == len(fixtures.TOKENS)
    assert samples[("sse_proxy_input_tokens_total", "gemini")] == 12
