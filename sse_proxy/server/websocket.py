"""WebSocket pass-through: ``Upgrade: websocket`` requests proxied both ways, unvalidated.

Realtime APIs (OpenAI Realtime, Gemini Live) speak WebSocket. The proxy opens the same
WebSocket to the upstream (route, URL joining, held headers and forward proxy as for any
request), then accepts the client's with the subprotocol the upstream chose, and relays
messages: text as text and binary as binary, byte for byte. A close from either side is
passed on with its code and reason; a side that vanishes without a close gets 1014 (bad
gateway) toward the client, or 1001 (going away) toward the upstream. One ``ws.summary``
line per session says what passed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import WSCloseCode, WSMsgType, web
from multidict import CIMultiDict

from sse_proxy.server.exchange import Exchange
from sse_proxy.server.headers import request_headers_for_upstream
from sse_proxy.server.replies import json_error
from sse_proxy.server.routes import carries_credential

__all__ = ["WS_HANDSHAKE_HEADERS", "is_websocket_upgrade", "relay_websocket"]

# Set by each end's own handshake; the client's must not reach the upstream.
WS_HANDSHAKE_HEADERS = (
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-extensions",
    "sec-websocket-protocol",
    "sec-websocket-accept",
)
# Codes a close frame may not carry (RFC 6455 7.4.1): pass 1000 instead.
_UNSENDABLE = frozenset({0, 1004, 1005, 1006, 1015})


def is_websocket_upgrade(request: web.Request) -> bool:
    """A GET asking to upgrade to WebSocket (RFC 6455 4.1)."""
    if request.method != "GET":
        return False
    upgrade = request.headers.get("Upgrade", "")
    tokens = {t.strip().lower() for t in request.headers.get("Connection", "").split(",")}
    return "websocket" in upgrade.lower() and "upgrade" in tokens


@dataclass
class _Tally:
    messages: int = 0
    bytes: int = 0
    text: int = 0
    binary: int = 0


@dataclass
class _Outcome:
    closed_by: str = "proxy"
    close_code: int | None = None


def _sendable(code: int | None) -> int:
    if code is None or code in _UNSENDABLE or not 1000 <= code <= 4999:
        return int(WSCloseCode.OK)
    return code


async def _pump(
    src: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
    dst: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
    tally: _Tally,
    name: str,
    vanished_code: int,
    outcome: _Outcome,
    tasks: list[asyncio.Task[None]],
) -> None:
    """Relay ``src`` to ``dst`` until ``src`` closes; then close ``dst`` the same way.

    The other direction's pump is stopped first: it is blocked reading ``dst``, and
    aiohttp's ``close()`` would otherwise wait for that read before sending the close.
    """

    async def stop_the_other() -> None:
        me = asyncio.current_task()
        others = [t for t in tasks if t is not me and not t.done()]
        for task in others:
            task.cancel()
        if others:
            await asyncio.wait(others)

    while True:
        msg = await src.receive()
        if msg.type is WSMsgType.TEXT:
            data: str = msg.data
            await dst.send_str(data)
            tally.text += 1
            tally.bytes += len(data.encode("utf-8", "surrogatepass"))
        elif msg.type is WSMsgType.BINARY:
            payload: bytes = msg.data
            await dst.send_bytes(payload)
            tally.binary += 1
            tally.bytes += len(payload)
        elif msg.type is WSMsgType.CLOSE:
            if outcome.close_code is None:
                outcome.closed_by, outcome.close_code = name, int(msg.data or 1005)
            reason = (msg.extra or "").encode("utf-8")[:123]
            await stop_the_other()
            await dst.close(code=_sendable(msg.data), message=reason)
            return
        elif msg.type in (WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
            if not dst.closed:
                if outcome.close_code is None:
                    outcome.closed_by, outcome.close_code = name, 1006
                await stop_the_other()
                await dst.close(code=vanished_code, message=b"peer went away")
            return
        else:  # PING/PONG are answered by each end itself
            continue
        tally.messages += 1


async def relay_websocket(
    ex: Exchange,
    headers: CIMultiDict[str],
    on_done: Callable[[dict[str, Any]], None],
) -> web.StreamResponse:
    """Open the upstream WebSocket, accept the client's, relay until one side closes;
    ``on_done`` gets the ``ws.summary`` fields.

    ``headers`` are the upstream request headers already routed (held keys applied).
    Handshake failures raise aiohttp's exceptions for the caller to map, except an
    upstream that answers without upgrading: its status is returned to the client.
    """
    request = ex.request
    log = ex.upstream_log
    max_msg_size = ex.cfg.max_request_body_bytes
    hop = ex.parts.network.proxy_for(ex.url)
    headers = request_headers_for_upstream(headers)
    for name in WS_HANDSHAKE_HEADERS:
        headers.popall(name, None)
    if hop.request_headers:
        headers.update(hop.request_headers)
    offered = ",".join(request.headers.getall("Sec-WebSocket-Protocol", []))
    protocols = ex.route.client_protocols(tuple(p.strip() for p in offered.split(",") if p.strip()))
    started = time.monotonic()
    try:
        session = ex.parts.session
        assert session is not None  # (set while the app runs)
        upstream = await session.ws_connect(
            ex.url,
            headers=headers,
            protocols=protocols,
            autoclose=True,
            autoping=True,
            max_msg_size=max_msg_size,
            proxy=hop.proxy,
            proxy_headers=hop.proxy_headers,
            timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=10.0),
            compress=0,
        )
    except aiohttp.WSServerHandshakeError as exc:
        status = exc.status if 400 <= exc.status <= 599 else 502
        log.warning("upstream.error", kind="websocket_refused", status=exc.status)
        message = f"upstream answered {exc.status} instead of switching protocols"
        return json_error(status, "websocket_refused", message, None)
    to_upstream, to_client = _Tally(), _Tally()
    outcome = _Outcome()
    client = web.WebSocketResponse(
        protocols=(upstream.protocol,) if upstream.protocol else (),
        autoclose=True,
        autoping=True,
        max_msg_size=max_msg_size,
        compress=False,
    )
    pumps: list[asyncio.Task[None]] = []
    away = int(WSCloseCode.GOING_AWAY)
    try:
        await client.prepare(request)
        pumps.append(
            asyncio.create_task(
                _pump(client, upstream, to_upstream, "client", away, outcome, pumps)
            )
        )
        pumps.append(
            asyncio.create_task(
                _pump(upstream, client, to_client, "upstream", 1014, outcome, pumps)
            )
        )
        await asyncio.wait(pumps)
        for task in pumps:
            error = None if task.cancelled() else task.exception()
            if error is not None:
                raise error
    except asyncio.CancelledError:
        if outcome.close_code is not None:
            # A close is being passed on (aiohttp cancels the handler as soon as the
            # client's connection ends): let it reach the other side.
            await asyncio.wait(pumps, timeout=5.0)
        else:
            # shutdown, or the client's connection dropped: tell both ends, then go
            outcome.closed_by, outcome.close_code = "proxy", away
            for task in pumps:
                task.cancel()
            with contextlib.suppress(Exception):
                await upstream.close(code=WSCloseCode.GOING_AWAY)
            with contextlib.suppress(Exception):
                await client.close(code=WSCloseCode.GOING_AWAY)
        raise
    except (aiohttp.ClientError, ConnectionError, RuntimeError) as exc:
        outcome.closed_by = "error"
        log.warning("ws.error", error=str(exc) or type(exc).__name__)
    finally:
        for task in pumps:
            task.cancel()
        if not upstream.closed:
            with contextlib.suppress(Exception):
                await upstream.close(code=WSCloseCode.GOING_AWAY)
        protocol = upstream.protocol
        summary = {
            # a subprotocol may carry a key (openai-insecure-api-key.sk-...): its name only
            "protocol": protocol.split(".", 1)[0] + ".[redacted]"
            if protocol and "." in protocol and carries_credential(protocol)
            else protocol,
            "messages_to_upstream": to_upstream.messages,
            "messages_to_client": to_client.messages,
            "bytes_to_upstream": to_upstream.bytes,
            "bytes_to_client": to_client.bytes,
            "text_messages": to_upstream.text + to_client.text,
            "binary_messages": to_upstream.binary + to_client.binary,
            "close_code": outcome.close_code,
            "closed_by": outcome.closed_by,
            "duration_ms": round((time.monotonic() - started) * 1000, 3),
        }
        log.info("ws.summary", **summary)
        on_done(summary)
    return client
