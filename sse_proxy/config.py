"""Configuration: one frozen :class:`Config`, from flags > environment > file > defaults.

Every setting has a default here, a line in ``config/sse-proxy.toml``, an environment
variable ``SSE_PROXY_<NAME>`` and (for the commonly used ones) a command-line flag. A bad
value anywhere is a :class:`~sse_proxy.errors.ConfigError` naming where it came from.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sse_proxy.errors import ConfigError
from sse_proxy.names import ADMIN_PREFIX, MODES

__all__ = [
    "MODES",
    "Config",
    "RouteSpec",
    "StartupNote",
    "load_config",
    "load_config_with_notes",
]

LOG_FORMATS = ("json", "console")
LOOPS = ("auto", "uvloop", "asyncio")
LOG_LEVELS = ("debug", "info", "warning", "error")
ENV_PREFIX = "SSE_PROXY_"
# SSE_PROXY_* variables that are not settings: the client-test harness sets them for the
# command it runs, so seeing them is no sign of a misspelling.
_ENV_NOT_SETTINGS = frozenset({"URL", "STREAM_URL", "STREAM_BODY", "CASE"})
# Settings whose flag is spelled otherwise (repeatable flags are singular).
_FLAG_NAMES = {"routes": "route", "upstream_headers": "upstream_header"}
# Precedence ranks of the sources, low to high.
_RANKS = {"default": 0, "file": 1, "env": 2, "flag": 3}


@dataclass(frozen=True, slots=True)
class StartupNote:
    """Something the startup line must say about how the settings were read."""

    event: str
    level: str
    fields: Mapping[str, Any] = field(default_factory=dict)


class _SettingError(ConfigError):
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
    mode: str = "passthrough"
    chaos: str = "random"
    seed: int | None = None
    chaos_k: int = 3
    delay_ms: float = 0.0
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
    admin_prefix: str = ADMIN_PREFIX
    log_format: str = "json"
    log_level: str = "info"
    log_text: bool = False
    max_alerts_per_kind: int = 10
    record_dir: str = ""
    workers: int = 1
    loop: str = "auto"
    stall_threshold: float = 15.0
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
    def upstream_base(self) -> str:
        return self.upstream.rstrip("/")


def _validate(cfg: Config) -> None:
    def bad(name: str, why: str) -> ConfigError:
        value = getattr(cfg, name)
        if name == "upstream":  # the message is printed: never with a key or password in it
            from sse_proxy.obs.redact import redact_url

            value = redact_url(value)
        return _SettingError(name, f"{name}: {why} (got {value!r})")

    if cfg.upstream:
        _check_upstream_url(cfg.upstream, "upstream", bad)
    for route in cfg.routes:
        _check_route(route, cfg.admin_prefix)
    if cfg.client_key and not cfg.client_cert:
        raise _SettingError("client_key", "client_key: needs client_cert (got a key alone)")
    for name, _ in cfg.upstream_headers:
        _check_header_name(name, "upstream_headers")
    if not 0 <= cfg.port <= 65535:
        raise bad("port", "must be 0..65535")
    if cfg.mode not in MODES:
        raise bad("mode", f"must be one of {', '.join(MODES)}")
    if cfg.log_format not in LOG_FORMATS:
        raise bad("log_format", f"must be one of {', '.join(LOG_FORMATS)}")
    if cfg.loop not in LOOPS:
        raise bad("loop", f"must be one of {', '.join(LOOPS)}")
    if cfg.log_level not in LOG_LEVELS:
        raise bad("log_level", f"must be one of {', '.join(LOG_LEVELS)}")
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
    ):
        if getattr(cfg, name) < 1:
            raise bad(name, "must be at least 1")
    if not cfg.max_decompressed_ratio >= 1:  # also refuses NaN
        raise bad("max_decompressed_ratio", "must be at least 1")
    for name in (
        "connect_timeout",
        "idle_timeout",
        "total_timeout",
        "shutdown_grace",
        "delay_ms",
        "stall_threshold",
    ):
        if getattr(cfg, name) < 0:
            raise bad(name, "must not be negative (0 disables a timeout)")
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
        raise _SettingError("dialect", f"dialect: {exc}") from None


def _check_upstream_url(url: str, name: str, bad: Any) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise bad(name, "must be an http:// or https:// URL with a host")
    if parts.query or parts.fragment:
        raise bad(name, "must not carry a query or fragment")
    if "@" in parts.netloc:
        # aiohttp turns them into an Authorization header, and a client's own
        # Authorization then makes every request fail (ValueError, a bare 500).
        raise _SettingError(
            name,
            f"{name}: must not carry credentials (user:password@); "
            "hold a key with a route header instead",
        )


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def _check_header_name(name: str, where: str) -> None:
    if not _TOKEN.fullmatch(name):
        raise _SettingError("routes", f"{where}: {name!r} is not a valid header name")


def _check_route(route: RouteSpec, admin_prefix: str) -> None:
    from sse_proxy.obs.redact import redact_url

    where = f"routes: {route.prefix!r}"

    def bad(_name: str, why: str) -> ConfigError:
        return _SettingError(
            "routes", f"{where}: upstream {why} (got {redact_url(route.upstream)!r})"
        )

    prefix = route.prefix
    if not prefix.startswith("/") or (prefix != "/" and prefix.endswith("/")):
        raise _SettingError(
            "routes", f"{where}: a prefix starts with '/' and does not end with '/'"
        )
    if any(c in prefix for c in "?#% \t"):
        raise _SettingError("routes", f"{where}: a prefix is a plain path (no ?, #, % or spaces)")
    if prefix == admin_prefix or prefix.startswith(admin_prefix + "/"):
        raise _SettingError("routes", f"{where}: is under the reserved {admin_prefix!r}")
    _check_upstream_url(route.upstream, "routes", bad)
    if route.dialect:
        from sse_proxy.core import normalize_dialect

        try:
            normalize_dialect(route.dialect)
        except ValueError as exc:
            raise _SettingError("routes", f"{where}: dialect: {exc}") from None
    for name, _ in route.headers:
        _check_header_name(name, f"{where}: header")


class _Shape(ValueError):
    """A malformed routes or headers value; its message quotes names, never values."""


def _parse_routes(value: Any) -> tuple[RouteSpec, ...]:
    """Routes from a flag list (``PREFIX=URL``), an env string (comma or space separated),
    or the config file's ``[routes]`` table (a URL, or a table per prefix)."""
    if isinstance(value, tuple) and all(isinstance(r, RouteSpec) for r in value):
        return value
    if isinstance(value, str):
        value = [v for v in re.split(r"[,\s]+", value) if v]
    if isinstance(value, list):
        out = []
        for item in value:
            if not isinstance(item, str) or "=" not in item:
                raise ValueError(item)
            prefix, _, url = item.partition("=")
            out.append(RouteSpec(prefix=prefix.strip(), upstream=url.strip()))
        return tuple(out)
    if isinstance(value, dict):
        specs = []
        for prefix, entry in value.items():
            if isinstance(entry, str):
                specs.append(RouteSpec(prefix=prefix, upstream=entry))
                continue
            if not isinstance(entry, dict):
                raise _Shape(f"route {prefix!r} is neither a URL nor a table")
            unknown = set(entry) - {"upstream", "dialect", "headers", "drop_client_auth"}
            if unknown:
                raise _Shape(f"route {prefix!r}: unknown key {sorted(unknown)[0]!r}")
            headers = entry.get("headers", {})
            drop = entry.get("drop_client_auth", False)
            if (
                not isinstance(entry.get("upstream"), str)
                or not isinstance(entry.get("dialect", ""), str)
                or not isinstance(drop, bool)
            ):
                raise _Shape(
                    f"route {prefix!r}: upstream and dialect are strings, "
                    "drop_client_auth true or false"
                )
            specs.append(
                RouteSpec(
                    prefix=prefix,
                    upstream=entry["upstream"],
                    dialect=entry.get("dialect", ""),
                    headers=_parse_headers(headers),
                    drop_client_auth=drop,
                )
            )
        return tuple(specs)
    raise ValueError(value)


def _parse_headers(value: Any) -> tuple[tuple[str, str], ...]:
    """Held headers from a table (name = template) or ``Name: template`` lines."""
    if isinstance(value, tuple):
        return value
    if isinstance(value, str):
        value = [v for v in value.splitlines() if v.strip()]
    if isinstance(value, list):
        pairs = []
        for item in value:
            if not isinstance(item, str) or ":" not in item:
                raise ValueError(item)
            name, _, template = item.partition(":")
            pairs.append((name.strip(), template.strip()))
        return tuple(pairs)
    if isinstance(value, dict):
        if not all(isinstance(v, str) for v in value.values()):
            raise ValueError(value)
        return tuple((str(k), v) for k, v in value.items())
    raise ValueError(value)


def _field_types() -> dict[str, str]:
    return {f.name: str(f.type) for f in fields(Config)}


def _coerce(name: str, value: Any, source: str) -> Any:
    """Convert a file/env/flag value to the field's type; say where a bad one came from."""
    kind = _field_types()[name]
    try:
        if kind == "bool":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off", ""):
                return False
            raise ValueError(value)
        if kind in ("int", "int | None"):
            if value is None or (kind == "int | None" and str(value).strip() == ""):
                return None
            if isinstance(value, bool):
                raise ValueError(value)
            return int(str(value).strip(), 10)
        if name == "routes":
            return _parse_routes(value)
        if name == "upstream_headers":
            return _parse_headers(value)
        if kind == "float":
            if isinstance(value, bool):
                raise ValueError(value)
            return float(value)
        if not isinstance(value, str):
            raise ValueError(value)
        return value
    except ValueError as exc:
        detail = f" ({exc})" if isinstance(exc, _Shape) else ""
        expected = {
            "int": "an integer",
            "int | None": "an integer",
            "float": "a number",
            "bool": "true or false",
            "str": "a string",
            "tuple[RouteSpec, ...]": "PREFIX=URL routes (or a [routes] table in the file)",
            "tuple[tuple[str, str], ...]": "'Name: value' headers (or a table in the file)",
        }.get(kind, f"a {kind}")
        if name in _FLAG_NAMES:  # may hold a literal key: never echoed
            raise ConfigError(f"{source}: {name} must be {expected}{detail}") from None
        raise ConfigError(f"{source}: {name} must be {expected}, got {value!r}") from None


def load_config(
    *,
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    path: str | Path | None = None,
) -> Config:
    """Merge defaults < config file < environment < flags (flags set to ``None`` are unset)."""
    return load_config_with_notes(flags=flags, env=env, path=path)[0]


def load_config_with_notes(
    *,
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    path: str | Path | None = None,
) -> tuple[Config, list[StartupNote]]:
    """:func:`load_config`, plus what the startup line must say about it.

    The notes: chaos mode implied by a chaos strategy given without a mode, and
    ``SSE_PROXY_*`` variables that match no setting (with the closest one).
    """
    names = set(_field_types())
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    ranks: dict[str, int] = {}
    notes: list[StartupNote] = []

    def put(name: str, value: Any, source: str, rank: str) -> None:
        merged[name] = value
        sources[name] = source
        ranks[name] = _RANKS[rank]

    if path is not None:
        file_source = f"config file {str(path)!r}"
        for name, value in _read_file(Path(path), names).items():
            put(name, value, file_source, "file")
    for key, raw in (env or {}).items():
        if not key.startswith(ENV_PREFIX):
            continue
        name = key[len(ENV_PREFIX) :].lower()
        if name in names:
            put(name, _coerce(name, raw, f"environment {key}"), f"environment {key}", "env")
        elif key[len(ENV_PREFIX) :] not in _ENV_NOT_SETTINGS:
            close = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.6)
            notes.append(
                StartupNote(
                    "config.unknown_env",
                    "warning",
                    {
                        "variable": key,
                        "closest": f"{ENV_PREFIX}{close[0].upper()}" if close else None,
                        "notice": "not a setting: ignored",
                    },
                )
            )
    for name, value in (flags or {}).items():
        if value is None:
            continue
        if name not in names:
            raise ConfigError(f"unknown setting {name!r}")
        flag = f"flag --{_FLAG_NAMES.get(name, name).replace('_', '-')}"
        put(name, _coerce(name, value, flag), flag, "flag")
    if "chaos" in merged and ranks["chaos"] > ranks.get("mode", -1):
        # A chaos strategy given where no mode of equal or higher precedence was: the user
        # asked for chaos; running passthrough would silently ignore it.
        put("mode", "chaos", sources["chaos"], _rank_name(ranks["chaos"]))
        notes.append(
            StartupNote(
                "config.mode_implied",
                "info",
                {"mode": "chaos", "reason": f"{sources['chaos']} given without a mode"},
            )
        )
    try:
        return Config(**merged), notes
    except _SettingError as exc:
        source = sources.get(exc.name)
        raise ConfigError(f"{source}: {exc}" if source else str(exc)) from None
    except TypeError as exc:  # pragma: no cover - names are checked above
        raise ConfigError(str(exc)) from None


def _rank_name(rank: int) -> str:
    return next(k for k, v in _RANKS.items() if v == rank)


def _read_file(path: Path, names: set[str]) -> dict[str, Any]:
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config file {str(path)!r}: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {exc}") from None
    table = raw.get("sse-proxy", raw)
    if not isinstance(table, dict):
        raise ConfigError(f"config file {str(path)!r}: [sse-proxy] must be a table")
    out: dict[str, Any] = {}
    if table is not raw and "routes" in raw:  # a top-level [routes] beside [sse-proxy]
        if "routes" in table:
            raise ConfigError(f"config file {str(path)!r}: routes given twice")
        table = {**table, "routes": raw["routes"]}
    for key, value in table.items():
        name = key.replace("-", "_")
        if name not in names:
            raise ConfigError(f"config file {str(path)!r}: unknown setting {key!r}")
        out[name] = _coerce(name, value, f"config file {str(path)!r}")
    return out
