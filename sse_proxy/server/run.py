"""Running the proxy: start on a socket, serve until SIGTERM/SIGINT, shut down gracefully.

``start_proxy`` is what the demo, the client-test harness and the tests use (ephemeral
loopback port, returns the base URL); ``serve_forever`` is `sse-proxy serve`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ipaddress
import os
import signal
import socket
import tempfile
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import structlog
from aiohttp import web

from sse_proxy.core.dialects.registry import DIALECTS, Provider, normalize_dialect
from sse_proxy.errors import ChaosSpecError, ConfigError, ProxyError, UsageError
from sse_proxy.inspect.web import close_feeds
from sse_proxy.obs.logs import configure_logging, get_logger
from sse_proxy.obs.redact import redact_url
from sse_proxy.server.admin import make_admin_app
from sse_proxy.server.admission import config_spec
from sse_proxy.server.app import make_app
from sse_proxy.server.exchange import ProxyState
from sse_proxy.server.keys import (
    CONFIG,
    METRICS,
    NETWORK,
    ROUTES,
    STATE,
    WORKERS,
)
from sse_proxy.server.network import Network
from sse_proxy.server.protocol import proxy_app_runner
from sse_proxy.server.recorder import private_dir
from sse_proxy.server.routes import Route, RouteTable
from sse_proxy.server.sockets import (
    LISTEN_BACKLOG,
    WorkerSockets,
    bind_listening,
    refuse_if_taken,
)
from sse_proxy.server.workers import WorkerCounts, die_with_parent, supervise
from sse_proxy.settings import Config, StartupNote

__all__ = [
    "LISTEN_BACKLOG",
    "Listeners",
    "admin_url",
    "app_env",
    "run_loop",
    "serve",
    "serve_forever",
    "start_proxy",
    "stop_proxy",
]


@dataclass(slots=True)
class Listeners:
    """Where a started proxy listens: its traffic URL, the URL of health and metrics (the
    same, or with ``--admin-port`` the admin listener's) and the admin listener's runner."""

    url: str = ""
    admin_url: str = ""
    admin_runner: web.AppRunner | None = None


_LISTENERS = web.AppKey("listeners", Listeners)
# Once the drain is over: how long a probe or scrape under way may take to finish.
_ADMIN_SHUTDOWN_S = 2.0


def _validate_chaos(cfg: Config) -> None:
    """A bad chaos spec is a startup error, never a crash of the data path."""
    if cfg.mode == "chaos":
        try:
            config_spec(cfg)
        except ChaosSpecError as exc:
            raise ConfigError(f"chaos: {exc}") from None


def _prepare_record_dir(cfg: Config) -> None:
    """``--record DIR``: create it now, or refuse to start, instead of failing every stream."""
    if not cfg.record_dir:
        return
    where = Path(cfg.record_dir)
    try:
        private_dir(where)
        with tempfile.TemporaryFile(dir=where):
            pass
    except OSError as exc:
        raise ConfigError(
            f"record_dir: cannot create or write {str(where)!r}: {exc.strerror or exc}"
        ) from None


async def start_proxy(
    cfg: Config,
    *,
    reuse_port: bool = False,
    workers: WorkerCounts | None = None,
    sockets: WorkerSockets | None = None,
) -> tuple[web.AppRunner, str]:
    """Start the proxy on ``cfg.host:cfg.port`` (port 0: ephemeral); return runner and URL.

    With ``cfg.admin_port``, health, metrics and the inspector get a listener of their own
    (:func:`admin_url` tells where). ``workers``: how many worker processes there are and
    how many live (health and the metrics show it); one, by default. ``sockets``: a
    worker's listening sockets, bound by its parent.
    """
    if not cfg.upstream and not cfg.routes:
        raise ConfigError("upstream: required (e.g. --upstream https://api.openai.com)")
    _validate_chaos(cfg)
    _prepare_record_dir(cfg)
    app = make_app(cfg)
    app[WORKERS] = workers = workers or WorkerCounts.single()
    app[METRICS].worker_counts = workers.fields
    app[_LISTENERS] = listeners = Listeners()
    runner = proxy_app_runner(
        app,
        handler_cancellation=True,
        access_log=None,
        shutdown_timeout=cfg.shutdown_grace,
    )
    await runner.setup()
    try:
        listeners.url = listeners.admin_url = await _listen(
            runner, cfg.host, cfg.port, reuse_port, bound_sockets=sockets.traffic if sockets else ()
        )
        if cfg.admin_port is not None:
            admin = proxy_app_runner(
                make_admin_app(app), access_log=None, shutdown_timeout=_ADMIN_SHUTDOWN_S
            )
            await admin.setup()
            listeners.admin_runner = admin
            listeners.admin_url = await _listen(
                admin,
                cfg.admin_listen_host,
                cfg.admin_port,
                reuse_port,
                "admin_port: ",
                bound_sockets=sockets.admin if sockets else (),
            )
        _refuse_own_address(app[ROUTES].routes, cfg.host, urlsplit(listeners.url).port)
    except ProxyError:
        if listeners.admin_runner is not None:
            await listeners.admin_runner.cleanup()
        await runner.cleanup()
        raise
    return runner, listeners.url


def _addresses(name: str) -> set[str]:
    name = name.lower().strip("[]")
    return {"127.0.0.1", "::1"} if name == "localhost" else {name}


def _refuse_own_address(routes: Sequence[Route], host: str, port: int | None) -> None:
    """An upstream that is the proxy's own listener (``host:port``) would send every request
    back to the proxy, which forwards it again until the process runs out of sockets:
    refused at start (a port 0 that the kernel handed out again is how a test meets it)."""
    try:
        wildcard = not host or ipaddress.ip_address(host).is_unspecified
    except ValueError:
        wildcard = False
    for route in routes:
        parts = urlsplit(route.upstream)
        if parts.scheme != "http" or (parts.port or 80) != port:
            continue
        name = parts.hostname or ""
        if (wildcard and _is_loopback(name.lower())) or _addresses(name) & _addresses(host):
            raise ConfigError(
                f"upstream: {redact_url(route.upstream)} is this proxy's own address "
                f"(port {port} on {host or 'every address'}): every request would be "
                "forwarded back to it"
            )


async def _listen(
    runner: web.AppRunner,
    host: str,
    port: int,
    reuse_port: bool,
    what: str = "",
    bound_sockets: tuple[socket.socket, ...] = (),
) -> str:
    """Open a site of ``runner`` on ``host:port`` (or on ``bound_sockets``, listening
    already: a worker's, bound by its parent); its base URL (the port it got, if 0)."""
    sites: list[web.BaseSite] = [
        web.SockSite(runner, sock, backlog=LISTEN_BACKLOG) for sock in bound_sockets
    ] or [web.TCPSite(runner, host, port, reuse_port=reuse_port or None, backlog=LISTEN_BACKLOG)]
    before = len(runner.addresses)
    try:
        for site in sites:
            await site.start()
    except OSError as exc:
        raise UsageError(f"{what}cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    bound, got = runner.addresses[before][:2]  # the first new site's first socket
    shown = f"[{bound}]" if ":" in bound else bound
    return f"http://{shown}:{got}"


def admin_url(runner: web.AppRunner) -> str:
    """The base URL that health, metrics and the inspector answer on: the admin listener's
    with ``admin_port``, else the traffic port's."""
    return runner.app[_LISTENERS].admin_url


async def stop_proxy(runner: web.AppRunner) -> None:
    """Stop accepting traffic, give streams ``shutdown_grace`` to finish, then close them.

    Health (503 from now on) stays up through the drain on an admin listener of its own,
    so that a probe sees the proxy draining rather than gone; it closes last.
    """
    state = runner.app[STATE]
    state.shutting_down = True
    close_feeds(runner.app)  # the inspector's live feeds must not hold the grace
    for site in list(runner.sites):
        await site.stop()
    await asyncio.sleep(0)  # requests accepted just before are under way
    pre_shutdown = getattr(runner.server, "pre_shutdown", None)  # aiohttp >= 3.10
    if pre_shutdown is not None:
        pre_shutdown()  # keep-alive connections take no new request
    await _close_streams(state, state.in_flight, runner.app[CONFIG].shutdown_grace)
    state.backlog.flush()  # every stream's summary before the totals
    await runner.cleanup()
    admin = runner.app[_LISTENERS].admin_runner
    if admin is not None:
        close_feeds(runner.app)  # and any opened during the drain
        await admin.cleanup()


async def _close_streams(
    state: ProxyState, in_flight: set[asyncio.Task[Any]], grace: float
) -> None:
    """Let in-flight requests finish within ``grace`` seconds, then cancel the rest.

    aiohttp's own graceful shutdown waits up to its timeout for a handler, then up to the
    timeout again before cancelling it: on its own, a stream that outlasts the grace would
    run for twice the grace. Cancelled streams log their summary with ended_by=shutdown.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    while (tasks := {*state.active, *in_flight}) and (left := deadline - loop.time()) > 0:
        await asyncio.wait(tasks, timeout=left)
    leftover = {*state.active, *in_flight}
    for task in leftover:
        task.cancel()
    if leftover:
        await asyncio.wait(leftover, timeout=1.0)


# When neither a route's dialect nor its upstream's host tells which API it is: most LLM
# servers (vLLM, Ollama, gateways) speak the OpenAI API.
_COMPATIBLE_DIALECT = "openai"


def _provider_of(route: Route) -> Provider | None:
    """The API a route serves, for its SDK's base-URL variable: its dialect's (told apart
    by the upstream's host where the dialect has several), else the one whose hosts the
    upstream's is, else OpenAI-compatible; ``None`` for a dialect no SDK speaks (text)."""
    host = urlsplit(route.upstream).hostname or ""
    canon = normalize_dialect(route.dialect)
    if canon is not None:
        own = [p for p in DIALECTS[canon].providers if p.base_url_env]
        if not own:
            return None
        return next((p for p in own if p.host_contains and p.host_contains in host), own[-1])
    every = (p for d in DIALECTS.values() for p in d.providers if p.base_url_env)
    found = next((p for p in every if p.host_contains and p.host_contains in host), None)
    return found or DIALECTS[_COMPATIBLE_DIALECT].providers[0]


def app_env(url: str, routes: Sequence[Route]) -> list[dict[str, str]]:
    """For each route, what to set in the app: ``OPENAI_BASE_URL=http://127.0.0.1:8787/v1``
    for an OpenAI route, ``ANTHROPIC_BASE_URL=...`` for an Anthropic one, and so on."""
    # a proxy listening on every interface is reached on loopback from its own host or pod
    url = url.replace("//0.0.0.0:", "//127.0.0.1:").replace("//[::]:", "//[::1]:")
    out = []
    for route in sorted(routes, key=lambda r: r.prefix):
        base = url + route.prefix.rstrip("/")
        provider = _provider_of(route)
        if provider is None:
            entry = {"set": f"your client's base URL to {base}", "url": base}
        else:
            variable = provider.base_url_env
            entry = {"variable": variable, "url": base + provider.base_url_path}
            entry["set"] = f"{variable}={entry['url']}"
        out.append({"route": route.name, "upstream": redact_url(route.upstream), **entry})
    return out


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def loop_factory(choice: str) -> tuple[str, Callable[[], asyncio.AbstractEventLoop] | None]:
    """The event loop a ``loop`` setting asks for: its name and factory (None: asyncio's).

    uvloop by default where it installs: the proxy's per-event cost is mostly the event
    loop's and aiohttp's own (bench/proxy_README.md), and uvloop's is the lower.
    """
    if choice == "asyncio":
        return "asyncio", None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise ConfigError("loop: uvloop is not installed (pip install uvloop)") from None
        return "asyncio", None
    return "uvloop", uvloop.new_event_loop


def run_loop(cfg: Config, main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` on the event loop the configuration chose."""
    _, factory = loop_factory(cfg.loop)
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main)


YOUNG_COLLECTION_AT: Final = 10_000
"""Tracked objects allocated (net) before a young collection, instead of CPython's 700."""
MIDDLE_COLLECTION_AFTER: Final = 1
"""Young collections before a middle one (which collects the young with it), instead of
10: its pause stays short."""


def _freeze_startup_heap() -> None:
    """Keep what startup built (modules, app, config) out of every later collection, and
    collect young objects less often.

    A full collection walks every tracked object; a serving process's startup objects
    never become garbage, so walking them is pure cost, a pause on the event loop. Frozen,
    a full collection walks only what the streams allocated.

    A young collection walks the young objects still alive, and a request's objects live
    as long as its first byte is under way: at CPython's 700, streams that start together
    set off collections that walk (and promote) exactly those; at 10,000 a burst of starts
    sets off none. What streams keep for their lifetime is walked as often as before, in
    fewer, longer pauses; a middle collection after every two young ones keeps the
    longest short. Garbage only a collection frees (reference cycles, rare here) waits for 10,000
    allocations instead of 700.
    """
    gc.collect()
    gc.freeze()
    _, _, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_AT, MIDDLE_COLLECTION_AFTER, old)


async def serve(
    cfg: Config,
    *,
    reuse_port: bool,
    notes: Sequence[StartupNote] = (),
    workers: WorkerCounts | None = None,
    sockets: WorkerSockets | None = None,
    parent: int | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT, then drain: one process, or one worker of several
    (``sockets``: its own, bound by its parent; ``parent``: the pid whose exit stops it)."""
    log = get_logger(pid=os.getpid())
    runner, url = await start_proxy(cfg, reuse_port=reuse_port, workers=workers, sockets=sockets)
    admin = admin_url(runner)
    _freeze_startup_heap()
    # Signal handlers before the startup line: whoever reads it may signal at once.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    if parent is not None:
        _watch_parent(loop, parent, stop, log)
    implied = [n for n in notes if n.event == "config.mode_implied"]
    routes = runner.app[ROUTES].describe()
    network = runner.app[NETWORK].describe()
    log.info(
        "proxy.started",
        listen=url,
        app_env=app_env(url, runner.app[ROUTES].routes),
        upstream=redact_url(cfg.upstream),
        mapping=routes[-1]["example"] if len(routes) == 1 else None,
        routes=routes,
        network=network,
        mode=cfg.mode,
        loop=loop_factory(cfg.loop)[0],
        **({"mode_reason": implied[0].fields["reason"]} if implied else {}),
        **({"admin": admin} if cfg.admin_port is not None else {}),
        **({"strict_end": True} if cfg.strict_end else {}),
        health=f"{admin}{cfg.admin_prefix}/health",
        metrics=f"{admin}{cfg.admin_prefix}/metrics",
        **({"inspector": f"{admin}{cfg.admin_prefix}/ui"} if cfg.ui else {}),
    )
    for note in notes:
        if note.event != "config.mode_implied":
            getattr(log, note.level)(note.event, **note.fields)
    if not _is_loopback(cfg.host):
        log.warning(
            "proxy.exposed",
            host=cfg.host,
            notice="listening beyond loopback: whoever reaches this port can use your upstream",
        )
    await stop.wait()
    log.info("proxy.stopping", grace_s=cfg.shutdown_grace, active=len(runner.app[STATE].active))
    await stop_proxy(runner)
    # What this process relayed, in one line: streams by verdict, alerts by kind, bytes.
    log.info("proxy.totals", **runner.app[METRICS].shutdown_fields())
    log.info("proxy.stopped")


_PARENT_CHECK_S: Final = 1.0
"""How often a worker looks whether its parent is still there (where no signal says so)."""


def _watch_parent(
    loop: asyncio.AbstractEventLoop, parent: int, stop: asyncio.Event, log: Any
) -> None:
    """Stop (drain, then exit) once ``parent`` is gone: the fallback of the death signal
    (:func:`~sse_proxy.server.workers.die_with_parent`), for where there is none."""

    def check() -> None:
        if stop.is_set():
            return
        if os.getppid() != parent:
            log.warning("worker.orphaned", parent_pid=parent, notice="the parent is gone: stopping")
            stop.set()
            return
        loop.call_later(_PARENT_CHECK_S, check)

    loop.call_later(_PARENT_CHECK_S, check)


def _worker(
    cfg: Config, notes: Sequence[StartupNote], shared: Any, parent: int, sockets: WorkerSockets
) -> None:  # pragma: no cover - runs in a child process
    die_with_parent(parent)
    configure_logging(fmt=cfg.log_format, level=cfg.log_level)
    # Every line a worker logs (stream.summary included) says which worker it came from.
    structlog.contextvars.bind_contextvars(pid=os.getpid())
    counts = WorkerCounts.shared(cfg.workers, shared)
    with contextlib.suppress(KeyboardInterrupt):
        run_loop(
            cfg,
            serve(
                cfg,
                reuse_port=True,
                notes=notes,
                workers=counts,
                sockets=sockets,
                parent=parent,
            ),
        )


class _WorkerListeners:
    """Each worker's listening sockets, bound here in the parent (see
    :mod:`~sse_proxy.server.sockets`): the first call refuses a port another process
    listens on, then binds at once."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.checked = False

    def __call__(self) -> WorkerSockets:
        cfg = self.cfg
        if not self.checked:
            refuse_if_taken(cfg.host, cfg.port)
            if cfg.admin_port is not None:
                refuse_if_taken(cfg.admin_listen_host, cfg.admin_port, "admin_port: ")
            self.checked = True
        traffic = bind_listening(cfg.host, cfg.port, reuse_port=True)
        if cfg.admin_port is None:
            return WorkerSockets(traffic)
        try:
            return WorkerSockets(
                traffic,
                bind_listening(
                    cfg.admin_listen_host, cfg.admin_port, reuse_port=True, what="admin_port: "
                ),
            )
        except UsageError:
            WorkerSockets(traffic).close()
            raise


def serve_forever(cfg: Config, *, notes: Sequence[StartupNote] = ()) -> int:
    """`sse-proxy serve`: one process, or ``cfg.workers`` processes sharing the port."""
    if cfg.workers <= 1:
        loop_factory(cfg.loop)  # an unavailable loop is a startup error, before anything runs
        run_loop(cfg, serve(cfg, reuse_port=False, notes=notes))
        return 0
    if not hasattr(socket, "SO_REUSEPORT"):
        raise ConfigError("workers: SO_REUSEPORT is not available on this platform")
    if cfg.port == 0:
        raise ConfigError("workers: needs a fixed --port (0 would give each worker its own port)")
    if cfg.admin_port == 0:
        raise ConfigError("workers: needs a fixed --admin-port (0 would give each its own port)")
    _validate_chaos(cfg)
    loop_factory(cfg.loop)
    _prepare_record_dir(cfg)
    # a missing key, a bad route or a route back to this proxy fails here, not in each worker
    _refuse_own_address(RouteTable.from_config(cfg).routes, cfg.host, cfg.port)
    Network(cfg)
    return supervise(cfg, notes, _worker, _WorkerListeners(cfg))
