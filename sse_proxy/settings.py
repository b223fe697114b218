"""The settings: one frozen :class:`Config`, each field with its default, and the checks.

This is the field table; where values come from (file, environment, flags) and in which
order is :mod:`sse_proxy.config`. Every field has a line in ``config/sse-proxy.toml``, an
environment variable ``SSE_PROXY_<NAME>`` and, for the common ones, a ``serve`` flag.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import urlsplit

from sse_proxy.errors import ConfigError
from sse_proxy.names import ADMIN_PREFIX, MODES
from sse_proxy.rechunk.timefaults import CHAOS_FAULTS, DEFAULT_TIMING, SETTINGS, TimeSettings

__all__ = [
    "LOG_FORMATS",
    "LOG_LEVELS",
    "LOOPS",
    "MODES",
    "RECORD_ON",
    "Config",
    "RouteSpec",
    "SettingError",
    "StartupNote",
]

LOG_FORMATS = ("auto", "json", "console")
"""``auto``: human lines when stderr is a terminal, JSON lines otherwise."""
LOOPS = ("auto", "uvloop", "asyncio")
LOG_LEVELS = ("debug", "info", "warning", "error")
RECORD_ON = ("ok", "degraded", "broken")
"""``record_on``: the least verdict a recording is written for (``ok``: every stream)."""


@dataclass(frozen=True, slots=True)
class StartupNote:
    """Something the startup line must say about how the settings were read."""

    event: str
    level: str
    fields: Mapping[str, Any] = field(default_factory=dict)


class SettingError(ConfigError):
    """A value out of range, raised by validation; ``load_config`` says where it came from."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


@dataclass(frozen=True, slots=True, kw_only=True)
class RouteSpec:
    """One route as configured: requests under ``prefix`` go to ``upstream``, prefix stripped.

    ``headers`` are (name, template) pairs added to or replacing the client's headers toward
    the upstream; a template may hold ``${ENV_NAME}`` or ``${file:PATH}``, resolved at
    startup (:mod:`sse_proxy.server.routes`), so the config never holds a key itself.
    """

    prefix: str
    upstream: str
    dialect: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    drop_client_auth: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    """Everything `sse-proxy serve` needs; see config/sse-proxy.toml for the meaning of each."""

    upstream: str = ""
    host: str = "127.0.0.1"
    port: int = 8787
    admin_port: int | None = None
    admin_host: str = ""
    allowed_hosts: tuple[str, ...] = ()
    allow_origins: tuple[str, ...] = ()
    mode: str = "passthrough"
    chaos: str = "random"
    seed: int | None = None
    chaos_k: int = 3
    chaos_force: bool = False
    delay_ms: float = 0.0
    chaos_fault: str = "none"
    chaos_stall: float = DEFAULT_TIMING.stall
    chaos_keepalive_every: float = DEFAULT_TIMING.keepalive_every
    chaos_linger: float = DEFAULT_TIMING.linger
    chaos_drip_rate: float = DEFAULT_TIMING.drip_rate
    chaos_retry_large: float = DEFAULT_TIMING.retry_large
    allow_chaos_header: bool = False
    dialect: str = "auto"
    max_line_bytes: int = 1 << 20
    max_frame_bytes: int = 1 << 20
    max_request_body_bytes: int = 32 << 20
    max_request_header_bytes: int = 64 << 10
    max_decompressed_ratio: float = 100.0
    max_decompressed_bytes: int = 256 << 20
    connect_timeout: float = 10.0
    idle_timeout: float = 300.0
    total_timeout: float = 0.0
    shutdown_grace: float = 10.0
    strict_end: bool = False
    request_head_timeout: float = 20.0
    keepalive_timeout: float = 75.0
    admin_prefix: str = ADMIN_PREFIX
    log_format: str = "auto"
    log_level: str = "info"
    log_text: bool = False
    max_alerts_per_kind: int = 10
    record_dir: str = ""
    record_on: str = "ok"
    record_max_stream_bytes: int = 4 << 20
    record_max_files: int = 1000
    record_max_bytes: int = 1 << 30
    workers: int = 1
    worker_max_restarts: int = 5
    worker_restart_window: float = 60.0
    loop: str = "auto"
    stall_threshold: float = 15.0
    linger_threshold: float = 5.0
    metrics_models: str = ""
    metrics_max_models: int = 20
    otlp_endpoint: str = ""
    routes: tuple[RouteSpec, ...] = ()
    upstream_headers: tuple[tuple[str, str], ...] = ()
    drop_client_auth: bool = False
    trust_env: bool = True
    upstream_ca: str = ""
    client_cert: str = ""
    client_key: str = ""
    ui: bool = False
    ui_text: bool = False
    ui_allow_remote: bool = False
    ui_streams: int = 50
    ui_stream_bytes: int = 256 << 10

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def chaos_timing(self) -> TimeSettings:
        """The durations of the chaos faults in time (``chaos_stall``...)."""
        return TimeSettings(
            stall=self.chaos_stall,
            keepalive_every=self.chaos_keepalive_every,
            linger=self.chaos_linger,
            drip_rate=self.chaos_drip_rate,
            retry_large=self.chaos_retry_large,
        )

    @property
    def upstream_base(self) -> str:
        return self.upstream.rstrip("/")

    @property
    def admin_listen_host(self) -> str:
        """Where the admin listener binds (``admin_port`` set): ``admin_host``, else ``host``."""
        return self.admin_host or self.host


_FLOAT_FIELDS = tuple(f.name for f in fields(Config) if str(f.type) == "float")


def _validate(cfg: Config) -> None:
    def bad(name: str, why: str) -> ConfigError:
        value = getattr(cfg, name)
        if name == "upstream":  # the message is printed: never with a key or password in it
            from sse_proxy.obs.redact import redact_url

            value = redact_url(value)
        return SettingError(name, f"{name}: {why} (got {value!r})")

    if cfg.upstream:
        _check_upstream_url(cfg.upstream, "upstream", bad)
    for route in cfg.routes:
        _check_route(route, cfg.admin_prefix)
    if cfg.client_key and not cfg.client_cert:
        raise SettingError("client_key", "client_key: needs client_cert (got a key alone)")
    for name, _ in cfg.upstream_headers:
        _check_header_name(name, "upstream_headers")
    if not 0 <= cfg.port <= 65535:
        raise bad("port", "must be 0..65535")
    if cfg.admin_port is not None:
        if not 0 <= cfg.admin_port <= 65535:
            raise bad("admin_port", "must be 0..65535")
        if cfg.admin_port == cfg.port != 0:
            raise bad("admin_port", f"must differ from port ({cfg.port}): a listener of its own")
    elif cfg.admin_host:
        raise SettingError("admin_host", "admin_host: needs admin_port (got a host alone)")
    if cfg.mode not in MODES:
        raise bad("mode", f"must be one of {', '.join(MODES)}")
    if cfg.log_format not in LOG_FORMATS:
        raise bad("log_format", f"must be one of {', '.join(LOG_FORMATS)}")
    if cfg.loop not in LOOPS:
        raise bad("loop", f"must be one of {', '.join(LOOPS)}")
    if cfg.log_level not in LOG_LEVELS:
        raise bad("log_level", f"must be one of {', '.join(LOG_LEVELS)}")
    if cfg.record_on not in RECORD_ON:
        raise bad("record_on", f"must be one of {', '.join(RECORD_ON)}")
    if cfg.record_on != "ok" and not cfg.record_dir:
        raise bad("record_on", "needs record_dir (--record DIR): where to write")
    for name in (
        "max_line_bytes",
        "max_frame_bytes",
        "max_request_body_bytes",
        "max_request_header_bytes",
        "max_decompressed_bytes",
        "max_alerts_per_kind",
        "workers",
        "chaos_k",
        "ui_streams",
        "ui_stream_bytes",
        "record_max_stream_bytes",
        "record_max_files",
        "record_max_bytes",
    ):
        if getattr(cfg, name) < 1:
            raise bad(name, "must be at least 1")
    if cfg.record_max_stream_bytes > cfg.record_max_bytes:
        raise bad(
            "record_max_stream_bytes",
            f"must not exceed record_max_bytes ({cfg.record_max_bytes}): "
            "one recording could never be kept",
        )
    for name in _FLOAT_FIELDS:
        # NaN passes every comparison below it (and then fails every request); infinity
        # is no timeout a timer can arm: both are refused here, at startup.
        if not math.isfinite(getattr(cfg, name)):
            raise bad(name, "must be a finite number")
    if not cfg.max_decompressed_ratio >= 1:
        raise bad("max_decompressed_ratio", "must be at least 1")
    for name in (
        "connect_timeout",
        "idle_timeout",
        "total_timeout",
        "shutdown_grace",
        "request_head_timeout",
        "keepalive_timeout",
        "delay_ms",
        "stall_threshold",
        "linger_threshold",
    ):
        if getattr(cfg, name) < 0:
            raise bad(name, "must not be negative (0 disables a timeout)")
    if cfg.chaos_fault and cfg.chaos_fault not in ("none", *CHAOS_FAULTS):
        raise bad("chaos_fault", f"must be none or one of {', '.join(CHAOS_FAULTS)}")
    for setting in SETTINGS.values():
        name = f"chaos_{setting.name}"
        try:
            setting.check(getattr(cfg, name))
        except ValueError:
            low = f"above {setting.low:g}" if setting.low_open else f"{setting.low:g} or more"
            raise bad(name, f"must be {low} and at most {setting.high:g} {setting.unit}") from None
    if cfg.worker_max_restarts < 0:
        raise bad("worker_max_restarts", "must not be negative")
    if not cfg.worker_restart_window > 0:  # also refuses NaN
        raise bad("worker_restart_window", "must be above 0 seconds")
    _check_listen_host(cfg.host, "host")
    if cfg.admin_host:
        _check_listen_host(cfg.admin_host, "admin_host")
    for entry in cfg.allowed_hosts:
        _check_allowed_host(entry)
    for entry in cfg.allow_origins:
        _check_origin(entry)
    if cfg.metrics_max_models < 0:
        raise bad("metrics_max_models", "must not be negative")
    if cfg.otlp_endpoint:
        parts = urlsplit(cfg.otlp_endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise bad("otlp_endpoint", "must be an http:// or https:// URL with a host")
    if cfg.seed is not None and not 0 <= cfg.seed < 2**63:
        raise bad("seed", "must be a non-negative integer")
    if not cfg.admin_prefix.startswith("/_") or cfg.admin_prefix.endswith("/"):
        raise bad("admin_prefix", "must start with '/_' and not end with '/'")
    from sse_proxy.core import normalize_dialect

    try:
        normalize_dialect(cfg.dialect)
    except ValueError as exc:
        raise SettingError("dialect", f"dialect: {exc}") from None


def _check_upstream_url(url: str, name: str, bad: Any) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise bad(name, "must be an http:// or https:// URL with a host")
    if parts.query or parts.fragment:
        raise bad(name, "must not carry a query or fragment")
    if "@" in parts.netloc:
        # aiohttp turns them into an Authorization header, and a client's own
        # Authorization then makes every request fail (ValueError, a bare 500).
        raise SettingError(
            name,
            f"{name}: must not carry credentials (user:password@); "
            "hold a key with a route header instead",
        )


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def _check_listen_host(value: str, name: str) -> None:
    """An address to listen on: empty (every interface), an IP address (IPv6 without
    brackets, as a socket takes it) or a host name."""
    import ipaddress

    from sse_proxy.hosts import parse_host

    if not value:
        return
    try:
        ipaddress.ip_address(value)
        return
    except ValueError:
        pass
    parsed = parse_host(value)
    if parsed is None or parsed.port is not None or value.startswith("["):
        inner = value.strip("[]")
        hint = f" (an IPv6 address goes without brackets: {inner})" if ":" in inner else ""
        raise SettingError(
            name,
            f"{name}: {value!r} is not an address or a host name to listen on{hint}",
        )


def _check_allowed_host(entry: str) -> None:
    """A host name or address the front door serves besides loopback: ``name``, ``.domain``
    (the domain and every name under it) or ``*`` (any Host: the check is off)."""
    from sse_proxy.hosts import parse_host

    if entry == "*":
        return
    name = entry[1:] if entry.startswith(".") else entry
    parsed = parse_host(name)
    if parsed is None or parsed.port is not None:
        raise SettingError(
            "allowed_hosts",
            f"allowed_hosts: {entry!r} is not a host name or address "
            "(a name, .domain, an IP address or *; no port, no scheme)",
        )


def _check_origin(entry: str) -> None:
    from sse_proxy.hosts import parse_origin

    if parse_origin(entry) is None:
        raise SettingError(
            "allow_origins",
            f"allow_origins: {entry!r} is not an origin (scheme://host[:port], "
            "e.g. http://localhost:5173, no path)",
        )


def _check_header_name(name: str, where: str) -> None:
    if not _TOKEN.fullmatch(name):
        raise SettingError("routes", f"{where}: {name!r} is not a valid header name")


def _check_route(route: RouteSpec, admin_prefix: str) -> None:
    from sse_proxy.obs.redact import redact_url

    where = f"routes: {route.prefix!r}"

    def bad(_name: str, why: str) -> ConfigError:
        return SettingError(
            "routes", f"{where}: upstream {why} (got {redact_url(route.upstream)!r})"
        )

    prefix = route.prefix
    if not prefix.startswith("/") or (prefix != "/" and prefix.endswith("/")):
        raise SettingError("routes", f"{where}: a prefix starts with '/' and does not end with '/'")
    if any(c in prefix for c in "?#% \t"):
        raise SettingError("routes", f"{where}: a prefix is a plain path (no ?, #, % or spaces)")
    if prefix == admin_prefix or prefix.startswith(admin_prefix + "/"):
        raise SettingError("routes", f"{where}: is under the reserved {admin_prefix!r}")
    _check_upstream_url(route.upstream, "routes", bad)
    if route.dialect:
        from sse_proxy.core import normalize_dialect

        try:
            normalize_dialect(route.dialect)
        except ValueError as exc:
            raise SettingError("routes", f"{where}: dialect: {exc}") from None
    for name, _ in route.headers:
        _check_header_name(name, f"{where}: header")
