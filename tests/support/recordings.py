"""Recordings for tests: one stream recorded through a real proxy, or a file written by hand
in the documented format; and the HTTP/1.1 chunks of a response, as sent."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from sse_proxy.recording import Recording, encode_end, encode_header, encode_read, load_recording
from sse_proxy.server.run import start_proxy, stop_proxy
from sse_proxy.settings import Config
from sse_proxy.tools.mock_upstream import start_mock_upstream

CLIENTS = "tests.tools.clients"
"""The package of the small client programs the harness tests run."""


async def record_stream(
    record_dir: Path, path: str = "/v1/chat/completions", seed: int = 5, **query: str
) -> tuple[Recording, bytes]:
    """Stream once through a recording proxy; return the recording and what the client got."""
    mock, upstream = await start_mock_upstream(seed=seed)
    runner, url = await start_proxy(Config(upstream=upstream, port=0, record_dir=str(record_dir)))
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(url + path, json={"stream": True}, params=query) as resp,
        ):
            body = await resp.read()
    finally:
        await stop_proxy(runner)
        await mock.cleanup()
    files = await asyncio.to_thread(lambda: sorted(record_dir.glob("*.ssrec")))
    assert len(files) == 1, files
    return load_recording(files[0]), body


def write_recording(
    path: Path,
    reads: list[tuple[float, bytes]],
    *,
    request_path: str = "/v1/chat/completions",
    status: int = 200,
    headers: dict[str, str] | None = None,
) -> Path:
    """A recording file written by hand, in the documented format."""
    head = {
        "stream_id": "test",
        "recorded_at": "20250101T000000Z",
        "request": {"method": "POST", "path": request_path, "query": "", "headers": {}},
        "response": {
            "status": status,
            "reason": "OK",
            "headers": headers
            or {
                "Content-Type": "text/event-stream; charset=utf-8",
                "Transfer-Encoding": "chunked",
                "Connection": "keep-alive",
                "Content-Length": "999",
                "X-Request-ID": "req_1",
            },
        },
    }
    lines = [encode_header(head)] + [encode_read(t, d) for t, d in reads]
    lines.append(
        encode_end("upstream_eof", reads[-1][0] if reads else 0.0, sum(len(d) for _, d in reads))
    )
    path.write_bytes(b"".join(lines))
    return path


async def raw_chunks(url: str, path: str = "/v1/chat/completions") -> tuple[bytes, list[bytes]]:
    """POST over a raw socket; return the response head and the HTTP/1.1 chunks, as sent."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        "Content-Length: 2\r\nConnection: close\r\n\r\n{}".encode()
    )
    await writer.drain()
    raw = await reader.read()
    writer.close()
    await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower(), head
    chunks: list[bytes] = []
    pos = 0
    while True:
        line_end = body.index(b"\r\n", pos)
        size = int(body[pos:line_end].split(b";")[0], 16)
        start = line_end + 2
        if size == 0:
            break
        chunks.append(body[start : start + size])
        pos = start + size + 2
    return head, chunks
