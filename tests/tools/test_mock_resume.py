"""The mock upstream's resumable streams and drops, over real loopback sockets.

Raw SSE resumes by ``Last-Event-ID`` (ids on events, ``retry``, the events after the id, a
204 after the end), OpenAI Responses in background mode by ``starting_after`` (sequence
numbers from 0, no ``response.created`` with a cursor, the API's errors); a drop cuts the
stream once (``drop``) or twice (``drop_twice``) at a seeded event, and every answer to
bad input is a one-line JSON 4xx. The oracle for what a stream carries is the core's
parser, for where the cut fell the fixtures' events.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from sse_proxy.core import StreamReassembler
from sse_proxy.tools import fixtures
from sse_proxy.tools.fixtures.resume import after, resumable
from sse_proxy.tools.mock_resume import SERVED, Served
from sse_proxy.tools.mock_upstream import start_mock_upstream
from tests.support.cli import run_cli

TEXT = resumable("text")
LAST = TEXT[-1].cursor


@pytest_asyncio.fixture
async def mock() -> AsyncIterator[tuple[str, list[Served]]]:
    runner, url = await start_mock_upstream(seed=3)
    try:
        yield url, runner.app[SERVED]
    finally:
        await runner.cleanup()


async def _get(
    url: str, headers: dict[str, str] | None = None, method: str = "GET", **kw: Any
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


def _read(body: bytes, dialect: str) -> StreamReassembler:
    r = StreamReassembler(dialect)
    r.feed(body)
    return r


def _text_through(cursor: int) -> str:
    return "".join(fixtures.TOKENS[:cursor])


@pytest.mark.asyncio
async def test_raw_sse_resumes_after_its_last_event_id_and_ends_with_204(
    mock: tuple[str, list[Served]],
) -> None:
    url, served = mock
    status, body, clean = await _get(url + "/v1/text?resumable=1")
    assert status == 200
    assert clean
    assert body.startswith(b"retry: 500\n\nid: 1\ndata: The\n\n")
    r = _read(body, "text")
    assert r.text == fixtures.MESSAGE
    assert r.last_event_id == str(LAST)
    status, body, clean = await _get(url + "/v1/text", {"Last-Event-ID": "40"}, method="POST")
    assert status == 200
    assert clean
    r = _read(body, "text")
    assert r.text == fixtures.MESSAGE[len(_text_through(40)) :]  # strictly after 40
    assert body.count(b"\nid: ") + body.startswith(b"id: ") == LAST - 40
    status, body, _ = await _get(url + "/v1/text", {"Last-Event-ID": str(LAST)})
    assert (status, body) == (204, b"")  # the end: a spec client stops
    assert [s.status for s in served] == [200, 200, 204]
    assert served[1].cursor == "40"
    assert served[1].first == 41
    assert served[1].delivered == LAST


@pytest.mark.asyncio
async def test_a_drop_cuts_once_inside_the_event_after_a_seeded_one(
    mock: tuple[str, list[Served]],
) -> None:
    url, served = mock
    status, body, clean = await _get(url + "/v1/text?fault=drop&retry=0.7")
    assert status == 200
    assert not clean
    assert body.startswith(b"retry: 700\n\n")
    origin = served[0]
    assert origin.cut_at is not None
    assert origin.delivered is not None
    k = origin.delivered
    assert fixtures.KINDS["drop"].drop
    assert 8 <= k <= 24
    assert body.endswith(b"id: %d\n" % (k + 1))  # the next event's id arrived, not its data
    r = _read(body, "text")
    assert r.text == _text_through(k)
    assert r.last_event_id == str(k)
    assert r.pending_event_id == str(k + 1)
    # the reconnect from the right cursor gets the rest, uncut (the drop fell once)
    status, body, clean = await _get(url + "/v1/text?fault=drop", {"Last-Event-ID": str(k)})
    assert status == 200
    assert clean
    assert _read(body, "text").text == fixtures.MESSAGE[len(_text_through(k)) :]
    # the same seed cuts at the same event again, in a new conversation
    status, body, clean = await _get(url + "/v1/text?fault=drop", {"Last-Event-ID": str(LAST)})
    assert status == 204
    await _get(url + "/v1/text?fault=drop")
    assert served[-1].delivered == k
    assert served[-1].cut_at is not None
    assert [s.attempt for s in served] == [0, 1, 2, 0]


@pytest.mark.asyncio
async def test_drop_twice_cuts_the_first_resume_too_and_a_restart_is_the_next_attempt(
    mock: tuple[str, list[Served]],
) -> None:
    url, served = mock
    _, _, clean = await _get(url + "/v1/text?fault=drop_twice")
    assert not clean
    first = served[0].delivered
    assert first is not None
    _, body, clean = await _get(url + "/v1/text?fault=drop_twice", {"Last-Event-ID": str(first)})
    assert not clean
    assert served[1].cut_at is not None
    second = served[1].delivered
    assert second is not None
    assert second > first
    _, body, clean = await _get(url + "/v1/text?fault=drop_twice")  # no cursor: a restart
    assert clean
    assert _read(body, "text").text == fixtures.MESSAGE
    assert served[2].attempt == 2


@pytest.mark.asyncio
async def test_the_variants_write_their_block_then_cut_and_answer_the_reconnect(
    mock: tuple[str, list[Served]],
) -> None:
    url, served = mock
    for fault, block in (
        ("drop_retry_invalid", b"retry: 10ms\n\n"),
        ("drop_retry_large", b"retry: 2500\n\n"),
        ("drop_id_nul", b"id: x\x00y\n\n"),
        ("drop_idless", b"data:\n\ndata:\n\n"),
    ):
        _, body, clean = await _get(url + f"/v1/text?fault={fault}&retry_large=2.5")
        assert not clean
        assert body.endswith(block), fault  # the cut follows the block, between events
        assert body[: -len(block)].endswith(b"\n\n"), fault
    _, body, _ = await _get(url + "/v1/text?fault=drop_primed")
    assert body.startswith(b"retry: 500\n\nid: 0\ndata:\n\nid: 1\n")  # priming, then the cut
    assert served[-1].delivered == 0
    _, body, clean = await _get(url + "/v1/text?fault=drop_start")
    assert body == b"retry: 500\n\nid: 1\n"
    assert not clean
    assert served[-1].delivered is None
    _, _, _ = await _get(url + "/v1/text?fault=drop_204")
    status, body, _ = await _get(url + "/v1/text?fault=drop_204", {"Last-Event-ID": "3"})
    assert (status, body) == (204, b"")


@pytest.mark.asyncio
async def test_a_background_response_is_stored_numbered_and_resumed_after_its_cursor(
    mock: tuple[str, list[Served]],
) -> None:
    url, served = mock
    request = {"model": "m", "input": "hi", "stream": True, "background": True}
    status, body, clean = await _get(url + "/v1/responses", method="POST", json=request)
    assert status == 200
    assert clean
    r = _read(body, "responses")
    assert r.text == fixtures.MESSAGE
    assert r.terminal_seen
    assert r.cursors == (0, len(resumable("responses")) - 1)
    lines = [json.loads(x[6:]) for x in body.decode().splitlines() if x.startswith("data: ")]
    assert [e["type"] for e in lines[:3]] == [
        "response.created",
        "response.queued",
        "response.in_progress",
    ]
    assert lines[0]["response"]["status"] == "queued"
    assert lines[0]["response"]["background"]
    assert [e["sequence_number"] for e in lines] == list(range(len(lines)))
    rid = lines[0]["response"]["id"]
    status, body, clean = await _get(url + f"/v1/responses/{rid}?stream=true&starting_after=20")
    assert status == 200
    assert clean
    resumed = [json.loads(x[6:]) for x in body.decode().splitlines() if x.startswith("data: ")]
    assert resumed[0]["sequence_number"] == 21  # strictly after the cursor: no response.created
    assert "response.created" not in {e["type"] for e in resumed}
    expected = after(resumable("responses", response_id=rid), 20)
    assert body == b"".join(e.frame for e in expected)
    status, body, _ = await _get(url + f"/v1/responses/{rid}?stream=true")  # all of it again
    assert body.startswith(b"event: response.created\n")
    last = len(lines) - 1
    status, body, _ = await _get(url + f"/v1/responses/{rid}?stream=true&starting_after={last}")
    assert (status, body) == (200, b"")  # nothing after the last event
    status, body, _ = await _get(url + f"/v1/responses/{rid}")
    assert json.loads(body)["status"] == "completed"
    assert [s.attempt for s in served] == [0, 1, 2, 3]


@pytest.mark.asyncio
async def test_a_background_response_drops_and_resumes_and_a_cancel_is_final() -> None:
    runner, url = await start_mock_upstream(seed=5, fault="drop")
    try:
        request = {"model": "m", "input": "hi", "stream": True, "background": True}
        _, body, clean = await _get(url + "/v1/responses", method="POST", json=request)
        assert not clean
        r = _read(body, "responses")
        assert r.cursors is not None
        seq = r.cursors[1]
        assert runner.app[SERVED][0].delivered == seq
        rid = r.stream_meta().response_id
        _, body, clean = await _get(url + f"/v1/responses/{rid}?stream=true&starting_after={seq}")
        assert clean
        assert rid is not None
        head = b"".join(e.frame for e in resumable("responses", response_id=rid)[: seq + 1])
        whole = _read(head + body, "responses")
        assert whole.text == fixtures.MESSAGE
        request["stream"] = False
        status, body, _ = await _get(url + "/v1/responses", method="POST", json=request)
        queued = json.loads(body)
        assert queued["status"] == "queued"
        assert queued["background"] is True
        status, body, _ = await _get(url + f"/v1/responses/{queued['id']}/cancel", method="POST")
        assert status == 200
        assert json.loads(body)["status"] == "completed"
    finally:
        await runner.cleanup()


@pytest.mark.asyncio
async def test_the_api_errors_of_a_resume_in_its_shape() -> None:
    runner, url = await start_mock_upstream(seed=1)
    try:
        status, body, _ = await _get(url + "/v1/responses/resp_nope?stream=true")
        assert status == 404
        assert json.loads(body)["error"]["message"] == "Response with id 'resp_nope' not found."
        _, plain, _ = await _get(
            url + "/v1/responses", method="POST", json={"model": "m", "stream": True}
        )
        rid = _read(plain, "responses").stream_meta().response_id
        status, body, _ = await _get(url + f"/v1/responses/{rid}?stream=true")
        assert status == 400
        assert json.loads(body)["error"]["message"] == (
            "This response cannot be streamed because it was not created with background=true."
        )
        request = {"model": "m", "stream": False, "background": True}
        _, body, _ = await _get(url + "/v1/responses", method="POST", json=request)
        rid = json.loads(body)["id"]
        status, body, _ = await _get(
            url + f"/v1/responses/{rid}?stream=true", {"X-Mock-Resume-Window": "0"}
        )
        assert status == 400
        assert "more than 5 minutes old" in json.loads(body)["error"]["message"]
    finally:
        await runner.cleanup()


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("target", "headers", "status", "says"),
    [
        ("/v1/text", {"Last-Event-ID": "abc"}, 400, "expected an integer"),
        ("/v1/text", {"Last-Event-ID": "9999"}, 400, "beyond the last event"),
        ("/v1/text", {"Last-Event-ID": "-3"}, 400, "0 or more"),
        ("/v1/text", {"Last-Event-ID": "7" * 100_000}, 400, "(100000 bytes)"),
        ("/v1/text?retry=-1", {"Last-Event-ID": "3"}, 400, "retry must be"),
        ("/v1/responses/{rid}?stream=true&starting_after=x1", {}, 400, "expected an integer"),
        ("/v1/responses/{rid}?stream=true&starting_after=99999", {}, 400, "beyond the last"),
        ("/v1/responses/{rid}?stream=true&starting_after=-2", {}, 400, "-1 or more"),
        ("/v1/responses/" + "r" * 5000 + "?stream=true", {}, 404, "not found"),
        ("/v1/responses/resp_nope/cancel", {}, 404, "not found"),
    ],
)
async def test_bad_input_gets_a_clear_json_4xx(
    mock: tuple[str, list[Served]], target: str, headers: dict[str, str], status: int, says: str
) -> None:
    url, _ = mock
    request = {"model": "m", "stream": False, "background": True}
    _, body, _ = await _get(url + "/v1/responses", method="POST", json=request)
    rid = json.loads(body)["id"]
    method = "POST" if target.endswith("/cancel") else "GET"
    got, body, _ = await _get(url + target.format(rid=rid), headers, method=method)
    assert got == status
    error = json.loads(body)["error"]
    assert says in error["message"]
    assert len(error["message"]) < 300
    assert error["type"] == "invalid_request_error"
    # and the mock goes on serving
    ok, _, clean = await _get(url + "/v1/text")
    assert ok == 200
    assert clean


@pytest.mark.parametrize(("flag", "value"), [("--retry", "nan"), ("--resume-window", "-1")])
def test_a_bad_resume_setting_is_a_one_line_usage_error(flag: str, value: str) -> None:
    proc = run_cli("mock-upstream", "--port", "0", flag, value)
    assert proc.returncode == 2
    lines = proc.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert flag.strip("-").replace("-", "_") in lines[0], lines
