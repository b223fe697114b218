"""A small gateway that is unfaithful on purpose, for test-gateway's tests: it relays
OpenAI Chat streams from $SSE_PROXY_UPSTREAM_URL on $SSE_PROXY_GATEWAY_PORT and breaks them
the ways real gateways do, each behind a flag:

``--invent-usage``   adds a usage chunk (with ``choices: [{"index":0,"delta":{}}]``, not
                     ``[]``) when the upstream sent none, with its own token count
``--append-done``    ends every stream with ``data: [DONE]``, whatever the upstream did
                     (a cut, an error, a reset)
``--hold``           holds every event until the upstream's stream ends, then sends all
``--drop-case``      drops the X-Gateway-Case header (the case then comes by the model)
``--fixed-model``    sends the upstream its own model name (no case in it either)
``--slow-start S``   waits S seconds before calling the upstream

It reads the upstream's stream as frames split at a blank line (the cases it is given
are LF-framed) and writes each frame as it goes, unless told to hold them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os

import aiohttp
from aiohttp import web

_HOP = {"host", "content-length", "transfer-encoding", "connection", "accept-encoding"}


def _usage_chunk(text_chars: int) -> bytes:
    chunk = {
        "id": "chatcmpl-unfaithful",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {}}],
        "usage": {
            "prompt_tokens": 9,
            "completion_tokens": text_chars // 3 + 1,
            "total_tokens": text_chars // 3 + 10,
        },
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


async def handle(request: web.Request) -> web.StreamResponse:
    opts: argparse.Namespace = request.app["opts"]
    session: aiohttp.ClientSession = request.app["session"]
    body = await request.json()
    if opts.fixed_model:
        body["model"] = "gpt-4o-mini"
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
    if opts.drop_case:
        headers = {k: v for k, v in headers.items() if k.lower() != "x-gateway-case"}
    if opts.slow_start:
        await asyncio.sleep(opts.slow_start)
    upstream = os.environ["SSE_PROXY_UPSTREAM_URL"] + request.path
    async with session.post(upstream, json=body, headers=headers) as up:
        resp = web.StreamResponse(
            status=up.status, headers={"Content-Type": up.headers.get("Content-Type", "")}
        )
        await resp.prepare(request)
        held: list[bytes] = []
        buf = b""
        usage = False
        done = False
        chars = 0
        try:
            async for piece in up.content.iter_any():
                buf += piece
                while b"\n\n" in buf:
                    frame, buf = buf.split(b"\n\n", 1)
                    frame += b"\n\n"
                    usage = usage or b'"usage": {' in frame or b'"usage":{' in frame
                    done = done or frame.strip() == b"data: [DONE]"
                    chars += len(frame)
                    if opts.invent_usage and frame.strip() == b"data: [DONE]" and not usage:
                        held.append(_usage_chunk(chars))
                        usage = True
                    held.append(frame)
                    if not opts.hold:
                        for f in held:
                            await resp.write(f)
                        held = []
        except aiohttp.ClientPayloadError:
            pass  # the upstream was cut off: carry on as if it ended
        if opts.invent_usage and not usage:
            held.append(_usage_chunk(chars))
        if opts.append_done and not done:
            held.append(b"data: [DONE]\n\n")
        for f in held:
            await resp.write(f)
        await resp.write_eof()
        return resp


async def serve(opts: argparse.Namespace) -> None:
    app = web.Application()
    app["opts"] = opts
    app["session"] = aiohttp.ClientSession(auto_decompress=False)
    app.router.add_post("/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", int(os.environ["SSE_PROXY_GATEWAY_PORT"])).start()
    try:
        await asyncio.Event().wait()
    finally:
        await app["session"].close()
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    for flag in ("--invent-usage", "--append-done", "--hold", "--drop-case", "--fixed-model"):
        parser.add_argument(flag, action="store_true")
    parser.add_argument("--slow-start", type=float, default=0.0)
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
