"""The mock upstream's Gemini Interactions, resumed by ``last_event_id``, over loopback.

A streamed interaction's events each carry an ``event_id``; ``GET
/{version}/interactions/{id}?stream=true&last_event_id=E`` sends the events after E; a drop
cuts the create stream (and, ``drop_twice``, the first resume) inside a seeded text delta;
bad cursors and unknown ids get Google's one-line JSON 4xx. The oracle for what a stream
carries is a plain parse of its frames here (JSON per ``data:`` line), and the real
google-genai SDK, which must read the same events and resume by hand to the exact text.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from sse_proxy.tools import fixtures
from sse_proxy.tools.fixtures.resume import event_id, interaction_events
from sse_proxy.tools.mock_interactions import TOO_OLD
from sse_proxy.tools.mock_resume import SERVED, Served
from sse_proxy.tools.mock_upstream import start_mock_upstream

EVENTS = interaction_events("v1_x")
LAST = EVENTS[-1].cursor
CREATE = {"model": "gemini-2.5-flash", "input": "hi", "stream": True}


@pytest_asyncio.fixture
async def mock() -> AsyncIterator[tuple[str, list[Served]]]:
    runner, url = await start_mock_upstream(seed=3)
    try:
        yield url, runner.app[SERVED]
    finally:
        await runner.cleanup()


async def _call(
    url: str, method: str = "GET", headers: dict[str, str] | None = None, **kw: Any
) -> tuple[int, bytes, bool]:
    """(status, body, whether the body ended cleanly)."""
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, headers=headers or {}, **kw) as resp,
    ):
        body = b""
        try:
            async for chunk in resp.content.iter_any():
                body += chunk
        except aiohttp.ClientPayloadError:
            return resp.status, body, False
        return resp.status, body, True


def _events(body: bytes) -> list[dict[str, Any]]:
    """The events whose frame arrived whole (a cut one has no blank line after it)."""
    frames = body.split(b"\n\n")[:-1]
    out = []
    for frame in frames:
        lines = frame.decode().split("\n")
        data = [x[6:] for x in lines if x.startswith("data: ")]
        event = json.loads("".join(data))
        assert lines[0] == f"event: {event['event_type']}"
        out.append(event)
    return out


def _text(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"]["text"] for e in events if e["event_type"] == "step.delta")


@pytest.mark.asyncio
async def test_a_streamed_interaction_carries_event_ids_and_resumes_after_one(
    mock: tuple[str, list[Served]],
) -> None:
    url, served = mock
    status, body, clean = await _call(url + "/v1beta/interactions", "POST", json=CREATE)
    assert (status, clean) == (200, True)
    events = _events(body)
    assert [e["event_type"] for e in events[:2]] == ["interaction.created", "step.start"]
    assert [e["event_type"] for e in events[-2:]] == ["step.stop", "interaction.completed"]
    assert [e["event_id"] for e in events] == [event_id(i) for i in range(1, LAST + 1)]
    assert _text(events) == fixtures.MESSAGE
    iid = events[0]["interaction"]["id"]
    assert events[-1]["interaction"] == {
        "id": iid,
        "object": "interaction",
        "model": "gemini-2.5-flash",
        "status": "completed",
        "usage": events[-1]["interaction"]["usage"],
    }
    # the resume: the events strictly after the cursor, the same ids
    status, body, clean = await _call(
        url + f"/v1/interactions/{iid}?stream=true&last_event_id={event_id(20)}"
    )
    assert (status, clean) == (200, True)
    rest = _events(body)
    assert [e["event_id"] for e in rest] == [event_id(i) for i in range(21, LAST + 1)]
    assert _text(events[:20]) + _text(rest) == fixtures.MESSAGE
    # without a cursor: all of it again; without stream: the interaction
    _, body, _ = await _call(url + f"/v1alpha/interactions/{iid}?stream=true")
    assert _events(body) == events
    status, body, _ = await _call(url + f"/v1beta/interactions/{iid}")
    assert status == 200
    assert json.loads(body)["outputs"] == [{"type": "text", "text": fixtures.MESSAGE}]
    assert [(s.attempt, s.cursor, s.first, s.delivered) for s in served] == [
        (0, None, 1, LAST),
        (1, event_id(20), 21, LAST),
        (2, None, 1, LAST),
    ]
    assert {s.dialect for s in served} == {"gemini"}


@pytest.mark.asyncio
async def test_drops_cut_inside_a_text_delta_and_the_resume_gets_the_rest(
    mock: tuple[str, list[Served]],
) -> None:
    url, served = mock
    for fault, cuts in (("drop", 1), ("drop_twice", 2), ("drop_start", 1)):
        served.clear()
        headers = {"X-Mock-Fault": fault}
        _, body, clean = await _call(url + "/v1beta/interactions", "POST", headers, json=CREATE)
        assert not clean, fault
        got = _events(body)
        iid = got[0]["interaction"]["id"]
        assert body.endswith(b"event: step.delta\n"), fault  # its type arrived, not its data
        if fault == "drop_start":
            assert [e["event_type"] for e in got] == ["interaction.created", "step.start"]
        else:
            assert 8 <= len(got) - 2 <= 24, fault  # the seeded text deltas before the cut
        text = _text(got)
        for attempt in range(1, cuts + 1):
            cursor = got[-1]["event_id"]
            target = f"/v1beta/interactions/{iid}?stream=true&last_event_id={cursor}"
            _, body, clean = await _call(url + target)
            got = _events(body)
            text += _text(got)
            assert clean == (attempt == cuts), (fault, attempt)
        assert text == fixtures.MESSAGE, fault
        assert [s.cut_at is not None for s in served] == [True] * cuts + [False], fault


@pytest.mark.asyncio
async def test_the_api_errors_in_google_s_shape(mock: tuple[str, list[Served]]) -> None:
    url, _ = mock
    headers = {"X-Mock-Fault": "drop_too_old"}
    _, body, _ = await _call(url + "/v1beta/interactions", "POST", headers, json=CREATE)
    iid = _events(body)[0]["interaction"]["id"]
    base = url + f"/v1beta/interactions/{iid}"
    cases = [
        (base + "?stream=true&last_event_id=" + event_id(3), 400, TOO_OLD),
        (base + "?stream=true&last_event_id=3", 400, "no event of this interaction"),
        (base + "?stream=true&last_event_id=" + event_id(LAST + 1), 400, "beyond"),
        (base + "?stream=true&last_event_id=" + "9" * 100_000, 400, "(100000 bytes)"),
        (base + "?last_event_id=" + event_id(3), 400, "only be used if stream is true"),
        (url + "/v1beta/interactions/v1_nope?stream=true", 404, "not found"),
    ]
    for target, status, message in cases:
        got, body, _ = await _call(target)
        error = json.loads(body)["error"]
        assert (got, error["code"]) == (status, status), target[-40:]
        assert message in error["message"], (message, error)
        assert "\n" not in error["message"]
        assert len(error["message"]) < 200
    for bad in (b"{", b"[]", b'{"input": "hi"}'):
        got, body, _ = await _call(url + "/v1beta/interactions", "POST", data=bad)
        assert got == 400, bad
        assert json.loads(body)["error"]["status"] == "INVALID_ARGUMENT"
    # not stored: nothing to resume
    _, body, _ = await _call(url + "/v1beta/interactions", "POST", json={**CREATE, "store": False})
    iid = _events(body)[0]["interaction"]["id"]
    got, _, _ = await _call(url + f"/v1beta/interactions/{iid}?stream=true")
    assert got == 404


_SDK_RESUMER = """\
import sys
from google import genai
client = genai.Client(api_key="sse-proxy-test-not-a-real-key")
text, last, iid, errors = "", None, None, []
stream = client.interactions.create(model="gemini-2.5-flash", input="hi", stream=True)
while True:
    try:
        for event in stream:
            last = event.event_id or last
            if event.event_type == "interaction.created":
                iid = event.interaction.id
            if event.event_type == "step.delta" and event.delta.type == "text":
                text += event.delta.text
        break
    except Exception as error:
        errors.append(type(error).__name__)
        stream = client.interactions.get(iid, stream=True, last_event_id=last)
print(",".join(errors), file=sys.stderr)
sys.stdout.write(text)
"""


@pytest.mark.asyncio
@pytest.mark.parametrize("fault", ["drop", "drop_twice"])
async def test_the_google_genai_sdk_reads_the_stream_and_resumes_by_hand(
    fault: str, tmp_path: Path
) -> None:
    """The real SDK: a drop is its ``APIConnectionError`` (it does not resume by itself);
    ``interactions.get(id, stream=True, last_event_id=...)`` gets the rest, exactly."""
    script = tmp_path / "resume.py"
    script.write_text(_SDK_RESUMER, encoding="utf-8")
    runner, url = await start_mock_upstream(fault=fault, seed=5)
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(script),
            env={**os.environ, "GOOGLE_GEMINI_BASE_URL": url},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        served = runner.app[SERVED]
    finally:
        await runner.cleanup()
    cuts = 2 if fault == "drop_twice" else 1
    assert proc.returncode == 0, err[-400:]
    assert out.decode() == fixtures.MESSAGE
    assert err.decode().strip() == ",".join(["APIConnectionError"] * cuts)
    assert [s.cursor is None for s in served] == [True] + [False] * cuts
    assert [s.cut_at is not None for s in served] == [True] * cuts + [False]
    for before, resumed in itertools.pairwise(served):
        assert resumed.cursor == event_id(before.delivered or 0)  # the last event it had whole
