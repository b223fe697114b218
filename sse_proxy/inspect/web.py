"""The live inspector: ``<admin prefix>/ui`` pages, their JSON and their SSE feed.

Registered only with ``serve --ui``. Pages are rendered on the server (they read without
JavaScript); a few lines of script keep the stream list live over an SSE feed the proxy
serves itself. Clients beyond loopback are refused unless ``--ui-allow-remote``: the
pages can show message text. Secrets never reach them: headers are redacted the way the
log lines are, and previews of message text are left out of alert details.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from aiohttp import web

from sse_proxy.hosts import is_loopback, parse_host
from sse_proxy.inspect.html import esc, page, render_events, render_strip, render_timeline
from sse_proxy.inspect.registry import Registry, StreamRecord
from sse_proxy.inspect.strip import analyse
from sse_proxy.obs.console import console_value
from sse_proxy.obs.read_log import ReadLog
from sse_proxy.obs.redact import mask_chunks
from sse_proxy.recording import encode_end, encode_header, encode_read
from sse_proxy.settings import Config

__all__ = [
    "REGISTRY",
    "UI_CONFIG",
    "add_ui_routes",
    "close_feeds",
    "loopback_request",
    "not_framed",
    "open_stream",
    "registry_for",
    "unframeable",
]

REGISTRY = web.AppKey("inspector", Registry)
UI_CONFIG = web.AppKey("inspector_config", Config)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Guard = Callable[[Handler], Handler]
"""What a route's handler is put behind when it is added (the front door, on an app that
checks it in its handlers rather than a middleware)."""


def unguarded(handler: Handler) -> Handler:
    """The :data:`Guard` of an app whose front door is a middleware: the handler itself."""
    return handler


_CSP = "Content-Security-Policy"
_NO_FRAMES = "frame-ancestors 'none'"


def unframeable(headers: MutableMapping[str, str]) -> None:
    """The proxy's own pages are never shown in another page's frame (a page could make a
    person click in them unseen) nor sniffed as another type: ``X-Frame-Options: DENY``,
    ``frame-ancestors 'none'`` added to any Content-Security-Policy, ``nosniff``."""
    headers["X-Frame-Options"] = "DENY"
    headers["X-Content-Type-Options"] = "nosniff"
    policy = headers.get(_CSP, "").strip().rstrip(";").strip()
    if "frame-ancestors" not in policy.lower():
        headers[_CSP] = f"{policy}; {_NO_FRAMES}" if policy else _NO_FRAMES


def not_framed(handler: Handler) -> Handler:
    """``handler`` whose answers (errors raised as answers too) are :func:`unframeable`;
    one that starts its own response (a feed) says so itself."""

    async def framed(request: web.Request) -> web.StreamResponse:
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            unframeable(exc.headers)
            raise
        if not response.prepared:
            unframeable(response.headers)
        return response

    return framed


_CLOSE: dict[str, Any] = {"close": True}
_KEEPALIVE_S = 15.0


def registry_for(cfg: Config) -> Registry | None:
    """A registry when ``--ui`` is on, else None (the proxy then calls no hook at all)."""
    if not cfg.ui:
        return None
    return Registry(max_streams=cfg.ui_streams, max_bytes=cfg.ui_stream_bytes)


def add_ui_routes(
    app: web.Application,
    cfg: Config,
    registry: Registry,
    *,
    guard: Guard = unguarded,
) -> None:
    """The inspector's routes under the admin prefix (add them before its catch-all), each
    behind ``guard`` (the front door, where it is not a middleware)."""
    app[REGISTRY] = registry
    app[UI_CONFIG] = cfg
    base = f"{cfg.admin_prefix}/ui"

    def add(path: str, handler: Handler) -> None:
        app.router.add_get(path, guard(not_framed(handler)))

    add(base, _list_page)
    add(f"{base}/streams.json", _list_json)
    add(f"{base}/events", _feed)
    add(base + "/stream/{id:[0-9a-zA-Z_-]+}.ssrec", _download)
    add(base + "/stream/{id:[0-9a-zA-Z_-]+}", _stream_page)
    # A browser asks the origin for /favicon.ico; with the inspector open that is a
    # person's browser, not the app: answer here, never upstream.
    add("/favicon.ico", _favicon)


async def _favicon(_request: web.Request) -> web.Response:
    return web.Response(status=204, headers={"Cache-Control": "max-age=86400"})


def close_feeds(app: web.Application) -> None:
    """Shutdown: end every open SSE feed now, so none holds the shutdown grace."""
    registry = app.get(REGISTRY)
    if registry is None:
        return
    for queue in list(registry.subscribers):
        with contextlib.suppress(asyncio.QueueFull):
            queue.put_nowait(_CLOSE)


def _cfg(request: web.Request) -> Config:
    return request.app[UI_CONFIG]


def loopback_request(remote: str | None, host_header: str | None) -> bool:
    """A loopback client asking for a loopback host name or address, the Host parsed as
    strictly as the front door parses it (``127.0.0.1:P@x`` or ``127.0.0.1:P, x`` are no
    Host at all)."""
    host = parse_host(host_header)
    return host is not None and is_loopback(host) and is_loopback(remote or "")


def _allowed(request: web.Request) -> None:
    """Loopback clients only, asking for a loopback host name (no DNS rebinding), unless
    ``--ui-allow-remote``."""
    if _cfg(request).ui_allow_remote:
        return
    hosts = request.headers.getall("Host", [])
    if len(hosts) != 1 or not loopback_request(request.remote, hosts[0]):
        raise web.HTTPForbidden(
            text="the sse-proxy inspector answers loopback clients asking for a loopback "
            "host only (start it with --ui-allow-remote to change that)\n"
        )


def _show_text(cfg: Config) -> bool:
    return cfg.log_text or cfg.ui_text


def _fmt(value: Any) -> str:
    """A value as the logs show it (``false``, ``["stop"]``), never a Python repr."""
    if isinstance(value, float):
        return f"{value:.1f}"
    return esc("-" if value is None else console_value(value))


def _row_html(row: dict[str, Any], base: str) -> str:
    alerts = row["alerts"]
    names = " ".join(sorted(alerts))
    alert_text = ", ".join(f"{k.removeprefix('sse.')}×{v}" for k, v in sorted(alerts.items()))
    verdict = str(row["verdict"])
    return (
        f'<tr id="row-{esc(row["id"])}" data-verdict="{esc(verdict)}" data-alerts="{esc(names)}">'
        f'<td><a href="{base}/stream/{esc(row["id"])}">{esc(row["id"][:12])}</a></td>'
        f"<td>{esc(row['method'])}</td><td>{esc(row['path'])}</td><td>{_fmt(row['route'])}</td>"
        f"<td>{_fmt(row['model'])}</td><td>{_fmt(row['status'])}</td>"
        f'<td class="verdict-{esc(verdict)}">{esc(verdict)}</td>'
        f'<td class="alerts">{esc(alert_text) or "-"}</td>'
        f"<td>{_fmt(row['ttfb_ms'])}</td><td>{_fmt(row['ttft_ms'])}</td>"
        f"<td>{_fmt(row['duration_ms'])}</td><td>{_fmt(row['bytes'])}</td>"
        f"<td>{_fmt(row['events'])}</td><td>{_fmt(row['dialect'])}</td></tr>"
    )


_LIST_JS = """
(function () {
  var body = document.getElementById('rows');
  var fv = document.getElementById('f-verdict'), fa = document.getElementById('f-alert');
  var state = document.getElementById('live');
  function show(tr) {
    var v = fv.value, a = fa.value, alerts = (tr.dataset.alerts || '').split(' ');
    var ok = (!v || tr.dataset.verdict === v) &&
      (!a || (a === '*' ? tr.dataset.alerts !== '' : a === '-' ? tr.dataset.alerts === ''
        : alerts.indexOf(a) >= 0));
    tr.hidden = !ok;
  }
  function all() { Array.prototype.forEach.call(body.rows, show); }
  fv.addEventListener('change', all); fa.addEventListener('change', all);
  document.getElementById('filters').addEventListener('submit', function (e) {
    e.preventDefault(); all();
  });
  all();
  if (!window.EventSource) return;
  var es = new EventSource(document.body.dataset.feed);
  es.onopen = function () { state.textContent = 'live'; state.dataset.state = 'live'; };
  es.onerror = function () { state.textContent = 'reconnecting'; state.dataset.state = 'off'; };
  es.addEventListener('stream', function (e) {
    var msg = JSON.parse(e.data), tpl = document.createElement('tbody');
    tpl.innerHTML = msg.html;
    var tr = tpl.firstElementChild, old = document.getElementById(tr.id);
    if (old) { old.replaceWith(tr); } else { body.insertBefore(tr, body.firstChild); }
    var empty = document.getElementById('empty'); if (empty) { empty.remove(); }
    show(tr);
  });
})();
"""

_ALERT_NAMES = (
    "sse.replacement_char",
    "sse.unterminated_frame",
    "sse.crlf_framing",
    "sse.invalid_json",
    "sse.truncated",
    "sse.oversized_frame",
    "sse.error_event",
    "sse.tool_call_invalid",
)


def _options(values: list[tuple[str, str]], chosen: str) -> str:
    return "".join(
        f'<option value="{esc(v)}"{" selected" if v == chosen else ""}>{esc(label)}</option>'
        for v, label in values
    )


async def _list_page(request: web.Request) -> web.Response:
    _allowed(request)
    cfg = _cfg(request)
    base = f"{cfg.admin_prefix}/ui"
    verdict = request.query.get("verdict", "")
    alert = request.query.get("alert", "")
    rows = request.app[REGISTRY].rows()
    shown = "".join(_row_html(r, base) for r in rows)
    if not rows:
        shown = '<tr id="empty"><td colspan="14" class="mut">No streams yet.</td></tr>'
    verdicts = [("", "any")] + [(v, v) for v in ("active", "ok", "degraded", "broken", "-")]
    alerts = [("", "any"), ("*", "with alerts"), ("-", "without alerts")] + [
        (a, a) for a in _ALERT_NAMES
    ]
    text_note = (
        "Message text is shown."
        if _show_text(cfg)
        else "Message text is hidden (start with --ui-text or --log-text to show it)."
    )
    body = f"""
<header><h1>sse-proxy inspector</h1>
<p class="mut">The last {cfg.ui_streams} streams, newest first. {esc(text_note)}
Feed: <span id="live" data-state="off" role="status">static</span></p></header>
<form id="filters" method="get" action="{base}">
<label>verdict <select id="f-verdict" name="verdict">{_options(verdicts, verdict)}</select></label>
<label>alert <select id="f-alert" name="alert">{_options(alerts, alert)}</select></label>
<button type="submit">filter</button></form>
<table aria-label="streams"><thead><tr><th>stream</th><th>method</th><th>path</th><th>route</th>
<th>model</th><th>status</th><th>verdict</th><th>alerts</th><th>TTFB ms</th><th>TTFT ms</th>
<th>duration ms</th><th>bytes</th><th>events</th><th>dialect</th></tr></thead>
<tbody id="rows">{shown}</tbody></table>
"""
    html = page("sse-proxy inspector", body, script=_LIST_JS).replace(
        "<body>", f'<body data-feed="{base}/events">', 1
    )
    return web.Response(text=html, content_type="text/html", charset="utf-8")


async def _list_json(request: web.Request) -> web.Response:
    _allowed(request)
    return web.json_response({"streams": request.app[REGISTRY].rows()})


async def _feed(request: web.Request) -> web.StreamResponse:
    """Each stream's row as it changes: ``event: stream`` with its JSON and rendered HTML."""
    _allowed(request)
    cfg = _cfg(request)
    base = f"{cfg.admin_prefix}/ui"
    registry = request.app[REGISTRY]
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    unframeable(resp.headers)
    queue = registry.subscribe()
    try:
        await resp.prepare(request)
        await resp.write(b"retry: 1000\n: sse-proxy inspector feed\n\n")
        while True:
            try:
                row = await asyncio.wait_for(queue.get(), _KEEPALIVE_S)
            except TimeoutError:
                await resp.write(b": keepalive\n\n")
                continue
            if row is _CLOSE:
                break
            msg = json.dumps({"row": row, "html": _row_html(row, base)}, ensure_ascii=False)
            await resp.write(f"event: stream\ndata: {msg}\n\n".encode())
    except (ConnectionError, RuntimeError):
        pass  # the page went away
    finally:
        registry.unsubscribe(queue)
    return resp


def _record(request: web.Request) -> StreamRecord:
    record = request.app[REGISTRY].get(request.match_info["id"])
    if record is None:
        raise web.HTTPNotFound(text="no such stream (the inspector keeps only recent ones)\n")
    return record


def _commands(record: StreamRecord) -> str:
    name = f"{record.stream_id}.ssrec"
    cmds = [
        ("replay", f"sse-proxy replay {name}"),
        ("test-client", f"sse-proxy test-client --fixture {name} -- python stream.py"),
        ("check", f"sse-proxy check --text {name}"),
    ]
    return "".join(
        f'<div class="cmd"><code id="cmd-{k}">{esc(c)}</code>'
        f'<button type="button" class="copy" data-target="cmd-{k}">copy</button></div>'
        for k, c in cmds
    )


_STREAM_JS = """
document.querySelectorAll('button.copy').forEach(function (b) {
  b.addEventListener('click', function () {
    var text = document.getElementById(b.dataset.target).textContent;
    var done = function () { b.textContent = 'copied'; };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () {});
    } else {
      var r = document.createRange();
      r.selectNodeContents(document.getElementById(b.dataset.target));
      var s = window.getSelection(); s.removeAllRanges(); s.addRange(r);
      try { document.execCommand('copy'); done(); } catch (e) {}
    }
  });
});
"""


async def _stream_page(request: web.Request) -> web.Response:
    _allowed(request)
    cfg = _cfg(request)
    record = _record(request)
    show = _show_text(cfg)
    base = f"{cfg.admin_prefix}/ui"
    summary = record.summary
    complete = summary is not None and record.kept == record.received
    chunks = mask_chunks(record.chunks)  # what the proxy holds never reaches the page
    analysis = analyse(
        chunks,
        dialect=None if cfg.dialect == "auto" else cfg.dialect,
        hint=record.hint,
        complete=False,
        alerts=record.alerts,
        total=record.received,
        keep_text=show,
    )
    row = record.row()
    facts = " · ".join(
        f"{esc(k)} <strong>{_fmt(v)}</strong>"
        for k, v in row.items()
        if k not in ("alerts", "id", "started", "method", "path")
    )
    alerts = "".join(
        f'<li><a href="#alert-{i}">{esc(a.name)} at byte {a.offset}</a> '
        f'<span class="mut">{esc(a.detail)}</span></li>'
        for i, a in enumerate(analysis.strip.alerts)
    )
    counts = ", ".join(f"{k} × {v}" for k, v in sorted(record.alert_counts.items()))
    if show:
        text = f"<pre>{esc(analysis.text)}</pre>" + (
            "" if complete else f'<p class="mut">From the first {record.kept} bytes.</p>'
        )
        download = (
            f'<p><a id="download" href="{base}/stream/{esc(record.stream_id)}.ssrec" '
            f'download="{esc(record.stream_id)}.ssrec">Download as a recording (.ssrec)</a>'
            + ("" if complete else " (capped: the first bytes only)")
            + "</p>"
        )
    else:
        text = '<p class="mut">Hidden: start the proxy with --ui-text or --log-text.</p>'
        download = (
            '<p class="mut">Download as a recording: needs --ui-text or --log-text '
            "(a recording holds the message text).</p>"
        )
    dropped = (
        f'<p class="mut">{record.reads_dropped} later reads not timed.</p>'
        if record.reads_dropped
        else ""
    )
    state = "active (reload for more)" if record.active else f"ended: {row['ended_by']}"
    body = f"""
<p><a href="{base}">← all streams</a></p>
<h1>Stream <code>{esc(record.stream_id)}</code></h1>
<p>{esc(record.method)} <code>{esc(record.path)}</code> · {esc(state)}</p>
<p class="facts">{facts}</p>
<h2 id="alerts">Alerts</h2><p>{esc(counts) or "none"}</p><ul>{alerts}</ul>
<h2>Byte strip</h2>
<p class="mut">The observed upstream bytes, cut where the proxy's reads ended.</p>
{render_strip(b"".join(chunks), analysis.strip, show_text=show)}
<h2>Reproduce</h2>{download}{_commands(record)}
<h2>Text</h2>{text}
<h2>Arrivals</h2>{render_timeline(record.reads)}
{dropped}
<h2>Events</h2>{render_events(analysis.events, show_text=show)}
"""
    return web.Response(
        text=page(f"stream {record.stream_id}", body, script=_STREAM_JS),
        content_type="text/html",
        charset="utf-8",
    )


_DROP_HEADERS = {"content-encoding", "content-length", "transfer-encoding"}


async def _download(request: web.Request) -> web.Response:
    """The stream as a recording: its reads (the observed bytes) with their timing."""
    _allowed(request)
    cfg = _cfg(request)
    if not _show_text(cfg):
        raise web.HTTPForbidden(text="a recording holds message text: start with --ui-text\n")
    record = _record(request)
    response = dict(record.response)
    response["headers"] = {
        k: v for k, v in (response.get("headers") or {}).items() if k.lower() not in _DROP_HEADERS
    }
    parts = [
        encode_header(
            {
                "stream_id": record.stream_id,
                "recorded_at": time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(record.started_wall)),
                "source": "inspector",
                "request": record.request,
                "response": response,
            }
        )
    ]
    kept = 0
    last = 0.0
    for (t, _), chunk in zip(record.reads, mask_chunks(record.chunks), strict=False):
        parts.append(encode_read(t, chunk))
        kept += len(chunk)
        last = t
    capped = kept < record.received
    ended = (record.summary or {}).get("ended_by", "active")
    end = "inspector_cap" if capped else str(ended)
    parts.append(encode_end(end, last, kept))
    return web.Response(
        body=b"".join(parts),
        content_type="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="{record.stream_id}.ssrec"'},
    )


def open_stream(
    registry: Registry,
    request: web.Request,
    upstream: Any,
    stream_id: str,
    mode: str,
    started: float,
    log: ReadLog | None = None,
) -> StreamRecord:
    """The proxy's hook for a new SSE stream, with the inspector on: its record in
    ``registry`` (the relay asks only when there is one), over ``log``, the stream's reads
    as the relay keeps them. What only a page shows is made
    when a page asks for it: the heads (immutable, kept as they are) are redacted then."""
    from sse_proxy.core import dialect_for_path
    from sse_proxy.obs.redact import redact_head, redact_url, scrub_held

    method, path, query, headers = (
        request.method,
        request.path,
        request.query_string,
        request.headers,
    )
    status, reason, upstream_headers = upstream.status, upstream.reason, upstream.headers
    return registry.open(
        stream_id,
        method=method,
        path=path,
        status=status,
        mode=mode,
        hint=lambda: dialect_for_path(path),
        request=lambda: {
            "method": method,
            "path": path,
            "query": redact_url("?" + query)[1:] if query else "",
            "headers": redact_head(headers),
        },
        response=lambda: {
            "status": status,
            "reason": scrub_held(reason or "") or reason,
            "headers": redact_head(upstream_headers),
        },
        started=started,
        log=log,
    )
