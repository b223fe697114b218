"""`sse-proxy health`: ask the proxy the same settings describe whether it is healthy.

A container's HEALTHCHECK runs it: it reads the effective settings as `serve` does
(``--config``, else ``SSE_PROXY_CONFIG``, then ``SSE_PROXY_*``), so a port, admin port or
admin prefix set in a mounted config file or the environment is the one it asks. Exit 0 when
``<admin prefix>/health`` answers 200; 1 for anything else (Docker reserves 2), with one
line on stderr saying why; 2 only for a ``--url`` that is not an http(s) URL (a usage
error, as for any other bad flag). It talks to the proxy's port directly: never through
``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY`` (a corporate proxy would answer for a dead
sidecar, or fail a live one). Standard library only: it runs every few seconds.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from sse_proxy.errors import ConfigError, UsageError

__all__ = ["health_url", "run_health"]

EXIT_HEALTHY, EXIT_UNHEALTHY, EXIT_USAGE = 0, 1, 2
# No ProxyHandler from the environment: the health check asks its own port.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_EVERYWHERE = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}  # noqa: S104 - a mapping


def health_url(*, config: str | None, url: str | None = None) -> str:
    """The health URL of the proxy these settings describe (loopback if it listens on all)."""
    from sse_proxy.config import load_config

    if url is not None:
        _check_url(url)
    cfg = load_config(env=os.environ, path=config)
    if url is None:
        # with an admin listener of its own, health is there (and a 404 on the traffic port)
        bound, port = cfg.host, cfg.port
        if cfg.admin_port is not None:
            bound, port = cfg.admin_listen_host, cfg.admin_port
        host = _EVERYWHERE.get(bound, bound)
        url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    return url.rstrip("/") + cfg.admin_prefix + "/health"


def _check_url(url: str) -> None:
    """``--url``: an http(s) URL with a host (and a port, if any, in range)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises for a port that is not a number in range
    except ValueError as exc:
        raise UsageError(f"--url: {url!r} is not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--url: must be an http:// or https:// URL with a host (got {url!r})")


def run_health(*, config: str | None, url: str | None = None, timeout: float = 3.0) -> int:
    try:
        target = health_url(config=config, url=url)
    except UsageError as exc:
        sys.stderr.write(f"sse-proxy health: {exc}" + "\n")
        return EXIT_USAGE
    except ConfigError as exc:
        sys.stderr.write(f"sse-proxy health: {exc}" + "\n")
        return EXIT_UNHEALTHY
    request = urllib.request.Request(target, headers={"Accept": "application/json"})  # noqa: S310
    try:
        with _DIRECT.open(request, timeout=timeout) as resp:
            body = resp.read()
    except urllib.error.HTTPError as exc:
        status = _status_of(exc.read())
        sys.stderr.write(f"sse-proxy health: {target}: {exc.code} {status}" + "\n")
        return EXIT_UNHEALTHY
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        sys.stderr.write(f"sse-proxy health: {target}: {reason}" + "\n")
        return EXIT_UNHEALTHY
    sys.stdout.write(f"{target}: 200 {_status_of(body)}\n")
    return EXIT_HEALTHY


def _status_of(body: bytes) -> str:
    try:
        doc = json.loads(body)
    except ValueError:
        return "(not JSON)"
    if not isinstance(doc, dict):
        return "(not an object)"
    error = doc.get("error")
    if "status" not in doc and isinstance(error, dict):
        return f"error {error.get('type')}"
    parts = [str(doc.get("status"))]
    workers = doc.get("workers")
    if isinstance(workers, dict):
        parts.append(f"workers={workers.get('live')}/{workers.get('configured')}")
    if "active_streams" in doc:
        parts.append(f"active_streams={doc['active_streams']}")
    return " ".join(parts)
