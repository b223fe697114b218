"""Configuration: one frozen :class:`Config`, from flags > environment > file > defaults.

Every setting has a default here, a line in ``config/sse-proxy.toml``, an environment
variable ``SSE_PROXY_<NAME>`` and (for the commonly used ones) a command-line flag. A bad
value anywhere is a :class:`~proxy.errors.ConfigError` naming where it came from.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from proxy.errors import ConfigError
from proxy.names import ADMIN_PREFIX, MODES

__all__ = ["MODES", "Config", "load_config"]

LOG_FORMATS = ("json", "console")
LOOPS = ("auto", "uvloop", "asyncio")
LOG_LEVELS = ("debug", "info", "warning", "error")
ENV_PREFIX = "SSE_PROXY_"


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
            from proxy.logsink import redact_url

            value = redact_url(value)
        return ConfigError(f"{name}: {why} (got {value!r})")

    if cfg.upstream:
        parts = urlsplit(cfg.upstream)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise bad("upstream", "must be an http:// or https:// URL with a host")
        if parts.query or parts.fragment:
            raise bad("upstream", "must not carry a query or fragment")
        if "@" in parts.netloc:
            # aiohttp turns them into an Authorization header, and a client's own
            # Authorization then makes every request fail (ValueError, a bare 500).
            raise ConfigError(
                "upstream: must not carry credentials (user:password@); "
                "clients send their own Authorization header"
            )
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
    from proxy.core import normalize_dialect

    try:
        normalize_dialect(cfg.dialect)
    except ValueError as exc:
        raise ConfigError(f"dialect: {exc}") from None


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
        if kind == "float":
            if isinstance(value, bool):
                raise ValueError(value)
            return float(value)
        if not isinstance(value, str):
            raise ValueError(value)
        return value
    except ValueError:
        expected = {
            "int": "an integer",
            "int | None": "an integer",
            "float": "a number",
            "bool": "true or false",
            "str": "a string",
        }.get(kind, f"a {kind}")
        raise ConfigError(f"{source}: {name} must be {expected}, got {value!r}") from None


def load_config(
    *,
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    path: str | Path | None = None,
) -> Config:
    """Merge defaults < config file < environment < flags (flags set to ``None`` are unset)."""
    names = set(_field_types())
    merged: dict[str, Any] = {}
    if path is not None:
        merged.update(_read_file(Path(path), names))
    for key, raw in (env or {}).items():
        if not key.startswith(ENV_PREFIX):
            continue
        name = key[len(ENV_PREFIX) :].lower()
        if name in names:
            merged[name] = _coerce(name, raw, f"environment {key}")
    for name, value in (flags or {}).items():
        if value is None:
            continue
        if name not in names:
            raise ConfigError(f"unknown setting {name!r}")
        merged[name] = _coerce(name, value, f"flag --{name.replace('_', '-')}")
    try:
        return Config(**merged)
    except TypeError as exc:  # pragma: no cover - names are checked above
        raise ConfigError(str(exc)) from None


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
    for key, value in table.items():
        name = key.replace("-", "_")
        if name not in names:
            raise ConfigError(f"config file {str(path)!r}: unknown setting {key!r}")
        out[name] = _coerce(name, value, f"config file {str(path)!r}")
    return out
