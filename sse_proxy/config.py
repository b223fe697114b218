"""Where the settings come from: flags > environment > config file > defaults.

The fields, their defaults and their checks are :mod:`sse_proxy.settings`; this module
reads the sources, converts each raw value to its field's type, and says where a bad one
came from. A misspelt name gets the closest real one ("did you mean"), in the file and in
the environment alike. The file is ``--config FILE``, else ``SSE_PROXY_CONFIG``.
"""

from __future__ import annotations

import datetime as dt
import difflib
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from sse_proxy.errors import ConfigError
from sse_proxy.settings import Config, RouteSpec, SettingError, StartupNote

__all__ = [
    "CONFIG_ENV",
    "config_path",
    "load_config",
    "load_config_with_notes",
]

ENV_PREFIX = "SSE_PROXY_"
CONFIG_ENV = "SSE_PROXY_CONFIG"
"""A config file path from the environment, for every command that takes ``--config``."""
# SSE_PROXY_* variables that are not settings: the client-test harness sets them for the
# command it runs, and SSE_PROXY_CONFIG names the file; seeing them is no misspelling.
_ENV_NOT_SETTINGS = frozenset({"URL", "STREAM_URL", "STREAM_BODY", "CASE", "CONFIG"})
# Settings whose flag is spelled otherwise (repeatable flags are singular).
_FLAG_NAMES = {
    "routes": "route",
    "upstream_headers": "upstream_header",
    "allowed_hosts": "allowed_host",
    "allow_origins": "allow_origin",
}
# Precedence ranks of the sources, low to high.
_RANKS = {"default": 0, "file": 1, "env": 2, "flag": 3}
_ROUTE_KEYS = ("upstream", "dialect", "headers", "drop_client_auth")


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate a misspelt ``name`` most likely meant, if any is close enough."""
    found = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.6)
    return found[0] if found else None


def _did_you_mean(name: str, candidates: Iterable[str]) -> str:
    match = closest(name, candidates)
    return f" (did you mean {match!r}?)" if match else ""


def config_path(path: str | Path | None, env: Mapping[str, str] | None) -> str | Path | None:
    """``--config`` if given, else ``SSE_PROXY_CONFIG`` (empty: none)."""
    if path is not None:
        return path
    return (env or {}).get(CONFIG_ENV) or None


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
            unknown = sorted(set(entry) - set(_ROUTE_KEYS))
            if unknown:
                hint = _did_you_mean(unknown[0], _ROUTE_KEYS)
                if not hint and unknown[0].replace("-", "_") in _field_types():
                    hint = (
                        " (a setting written below a [routes] table belongs to that table:"
                        " move it above the first one)"
                    )
                raise _Shape(f"route {prefix!r}: unknown key {unknown[0]!r}{hint}")
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


def _parse_names(value: Any, *, strip_slash: bool = False) -> tuple[str, ...]:
    """A list of names from flags or the file, or one string (comma or space separated)."""
    if isinstance(value, str):
        value = [v for v in re.split(r"[,\s]+", value) if v]
    if isinstance(value, tuple):
        value = list(value)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(value)
    names = [v.strip() for v in value if v.strip()]
    if strip_slash:  # "http://localhost:5173/" as copied from an address bar
        names = [v[:-1] if v.endswith("/") and v.count("/") == 3 else v for v in names]
    return tuple(names)


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
        if kind == "tuple[str, ...]":
            return _parse_names(value, strip_slash=name == "allow_origins")
        if kind == "float":
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                raise ValueError(value)
            return float(value)
        if not isinstance(value, str):
            raise ValueError(value)
        return value
    # every wrong type too (a TOML array, table, date or time where a number belongs: a
    # TypeError from the conversion, or an OverflowError), not only a wrong spelling
    except (ValueError, TypeError, OverflowError) as exc:
        detail = f" ({exc})" if isinstance(exc, _Shape) else ""
        expected = {
            "int": "an integer",
            "int | None": "an integer",
            "float": "a number",
            "bool": "true or false",
            "str": "a string",
            "tuple[RouteSpec, ...]": "PREFIX=URL routes (or a [routes] table in the file)",
            "tuple[tuple[str, str], ...]": "'Name: value' headers (or a table in the file)",
            "tuple[str, ...]": "a list of names (comma-separated in the environment)",
        }.get(kind, f"a {kind}")
        if name in _FLAG_NAMES:  # may hold a literal key: never echoed
            raise ConfigError(f"{source}: {name} must be {expected}{detail}") from None
        raise ConfigError(f"{source}: {name} must be {expected}, got {_shown(value)}") from None


def _shown(value: Any) -> str:
    """A bad value as the error quotes it: what TOML calls it when it is not a scalar, and
    short (a table could be long)."""
    kind = {list: "an array", dict: "a table", dt.datetime: "a date-time", dt.date: "a date"}
    kind_of = next((k for t, k in kind.items() if isinstance(value, t)), None)
    if isinstance(value, dt.time):
        kind_of = "a time"
    text = repr(value) if kind_of is None or isinstance(value, list | dict) else str(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{kind_of} ({text})" if kind_of else text


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
    path = config_path(path, env)
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
            close = closest(name, names)
            notes.append(
                StartupNote(
                    "config.unknown_env",
                    "warning",
                    {
                        "variable": key,
                        "closest": f"{ENV_PREFIX}{close.upper()}" if close else None,
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
    except SettingError as exc:
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
    if table is not raw:
        for key in raw:
            if key not in ("sse-proxy", "routes"):
                hint = _did_you_mean(key, ("sse-proxy", "routes"))
                raise ConfigError(f"config file {str(path)!r}: unknown table [{key}]{hint}")
    if table is not raw and "routes" in raw:  # a top-level [routes] beside [sse-proxy]
        if "routes" in table:
            raise ConfigError(f"config file {str(path)!r}: routes given twice")
        table = {**table, "routes": raw["routes"]}
    for key, value in table.items():
        name = key.replace("-", "_")
        if name not in names:
            hint = _did_you_mean(name, names)
            if isinstance(value, dict) and not hint:
                hint = " (settings go under [sse-proxy]; routes under [routes])"
            raise ConfigError(f"config file {str(path)!r}: unknown setting {key!r}{hint}")
        out[name] = _coerce(name, value, f"config file {str(path)!r}")
    return out
