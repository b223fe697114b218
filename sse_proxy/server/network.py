"""The network toward the upstream: forward proxies from the environment, private CAs, mTLS.

A sidecar runs where the app runs: behind the same corporate proxy and trusting the same
private CA. ``HTTP_PROXY``/``HTTPS_PROXY``/``NO_PROXY`` (either case, lower case first, as
curl and urllib read them) are honoured unless ``trust_env`` is off. They are read once at
startup, not per request, and ``~/.netrc`` is never read: aiohttp's own ``trust_env``
would add netrc credentials as an ``Authorization`` header behind the client's back.
"""

from __future__ import annotations

import base64
import os
import ssl
import urllib.request
from collections.abc import Mapping

import aiohttp
from yarl import URL

from sse_proxy.config import Config
from sse_proxy.errors import ConfigError
from sse_proxy.obs.redact import redact_url

__all__ = ["Network", "tls_reason"]


def _env(env: Mapping[str, str], name: str) -> str:
    """``name`` in lower case first, then upper case; "" when unset."""
    return (env.get(name.lower()) or env.get(name.upper()) or "").strip()


def _ssl_context(cfg: Config) -> ssl.SSLContext | None:
    """The system trust store plus ``upstream_ca``, with the mTLS client certificate."""
    if not (cfg.upstream_ca or cfg.client_cert):
        return None
    ctx = ssl.create_default_context()
    if cfg.upstream_ca:
        try:
            ctx.load_verify_locations(cafile=cfg.upstream_ca)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"upstream_ca: cannot load {cfg.upstream_ca!r}: {_why(exc)}"
            ) from None
    if cfg.client_cert:
        try:
            ctx.load_cert_chain(cfg.client_cert, cfg.client_key or None)
        except (OSError, ssl.SSLError) as exc:
            files = cfg.client_cert + (f", {cfg.client_key}" if cfg.client_key else "")
            raise ConfigError(f"client_cert: cannot load {files!r}: {_why(exc)}") from None
    return ctx


def _why(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)


class Network:
    """How to reach an upstream URL: which forward proxy (if any), which TLS context."""

    def __init__(self, cfg: Config, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        self.ssl = _ssl_context(cfg)
        self.proxies: dict[str, str] = {}
        self.no_proxy = ""
        if cfg.trust_env:
            for scheme in ("http", "https"):
                value = _env(env, f"{scheme}_proxy")
                if value:
                    self.proxies[scheme] = value
            if not self.proxies.get("https") and _env(env, "all_proxy"):
                self.proxies.setdefault("https", _env(env, "all_proxy"))
                self.proxies.setdefault("http", _env(env, "all_proxy"))
            self.no_proxy = _env(env, "no_proxy")
        for scheme, value in self.proxies.items():
            url = URL(value if "://" in value else f"http://{value}")
            if url.scheme not in ("http",) or not url.host:
                raise ConfigError(
                    f"{scheme.upper()}_PROXY: only http:// forward proxies are supported "
                    f"(got {redact_url(str(url))!r}; set trust_env = false to ignore it)"
                )
        self._parsed = {
            scheme: URL(v if "://" in v else f"http://{v}") for scheme, v in self.proxies.items()
        }
        self._bypass: dict[str, bool] = {}

    def connector(self) -> aiohttp.TCPConnector:
        return aiohttp.TCPConnector(
            limit=0, ttl_dns_cache=300, ssl=self.ssl if self.ssl is not None else True
        )

    def proxy_for(self, url: URL) -> tuple[URL | None, dict[str, str] | None]:
        """(forward proxy, headers for it) for ``url``, or (None, None) to go direct.

        Credentials in the proxy URL become a ``Proxy-Authorization`` header, sent to the
        forward proxy only (in the CONNECT for https upstreams), never to the upstream.
        """
        scheme = {"ws": "http", "wss": "https"}.get(url.scheme, url.scheme)
        proxy = self._parsed.get(scheme)
        if proxy is None or url.host is None:
            return None, None
        host = url.host if url.port is None or url.is_default_port() else f"{url.host}:{url.port}"
        bypass = self._bypass.get(host)
        if bypass is None:
            bypass = self._bypass[host] = bool(self.no_proxy) and bool(
                urllib.request.proxy_bypass_environment(  # type: ignore[attr-defined]
                    host, {"no": self.no_proxy}
                )
            )
        if bypass:
            return None, None
        headers = None
        if proxy.user is not None:
            token = f"{proxy.user}:{proxy.password or ''}".encode()
            headers = {"Proxy-Authorization": "Basic " + base64.b64encode(token).decode()}
            proxy = proxy.with_user(None)
        return proxy, headers

    def describe(self) -> dict[str, object]:
        """For the startup line: proxies (credentials redacted), no_proxy, TLS settings."""
        out: dict[str, object] = {
            f"{k}_proxy": redact_url(str(v)) for k, v in sorted(self._parsed.items())
        }
        if self.no_proxy:
            out["no_proxy"] = self.no_proxy
        return out


def tls_reason(exc: BaseException) -> str:
    """Why a TLS handshake with the upstream failed, in the words OpenSSL uses."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        err = exc.certificate_error
        message = getattr(err, "verify_message", None) or getattr(err, "reason", None)
        return f"certificate verify failed: {message}" if message else str(err)
    os_error = getattr(exc, "os_error", None)
    if isinstance(os_error, ssl.SSLError):
        return os_error.reason or str(os_error)
    if isinstance(exc, aiohttp.ServerFingerprintMismatch):
        return "certificate fingerprint mismatch"
    return type(exc).__name__
