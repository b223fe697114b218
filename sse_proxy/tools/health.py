"""`sse-proxy health`: ask the proxy the same settings describe whether it is healthy.

A container's HEALTHCHECK runs it: it reads the effective settings as `serve` does
(``--config``, else ``SSE_PROXY_CONFIG``, then ``SSE_PROXY_*``), so a port, admin port or
admin prefix set in a mounted config file or the environment is the one it asks. Exit 0 when
``<admin prefix>/health`` answers 200; 1 for anything else (Docker reserves 2), with one
line on stderr saying why. Standard library only: it runs every few seconds.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request

from sse_proxy.errors import ConfigError

__all__ = ["health_url", "run_health"]

EXIT_HEALTHY, EXIT_UNHEALTHY = 0, 1
_EVERYWHERE = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}  # noqa: S104 - a mapping


def health_url(*, config: str | None, url: str | None = None) -> str:
    """The health URL of the proxy these settings describe (loopback if it listens on all)."""
    from sse_proxy.config import load_config

    cfg = load_config(env=os.environ, path=config)
    if url is not None and not url.startswith(("http://", "https://")):
        raise ConfigError(f"--url: must be an http:// or https:// URL (got {url!r})")
    if url is None:
        # with an admin listener of its own, health is there (and a 404 on the traffic port)
        bound, port = cfg.host, cfg.port
        if cfg.admin_port is not None:
            bound, port = cfg.admin_listen_host, cfg.admin_port
        host = _EVERYWHERE.get(bound, bound)
        url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    return url.rstrip("/") + cfg.admin_prefix + "/health"


def run_health(*, config: str | None, url: str | None = None, timeout: float = 3.0) -> int:
    try:
        target = health_url(config=config, url=url)
    except ConfigError as exc:
        sys.stderr.write(f"sse-proxy health: {exc}" + "\n")
        return EXIT_UNHEALTHY
    request = urllib.request.Request(target, headers={"Accept": "application/json"})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:  # noqa: S310 - http(s) only
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
