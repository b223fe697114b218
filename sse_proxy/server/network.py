"""The network toward the upstream: forward proxies from the environment, private CAs, mTLS.

A sidecar runs where the app runs: behind the same corporate proxy and trusting the same
private CA. ``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY``/``NO_PROXY`` (either case, lower
case first, as curl reads them) are honoured unless ``trust_env`` is off: ``ALL_PROXY``
for every scheme without its own, ``NO_PROXY`` names (a domain and the names under it),
addresses, CIDR ranges, ``*``. They are read once at startup, not per request, and
``~/.netrc`` is never read: aiohttp's own ``trust_env`` would add netrc credentials as an
``Authorization`` header behind the client's back.
"""

from __future__ import annotations

import base64
import ipaddress
import os
import ssl
from collections.abc import Mapping
from typing import Final, NamedTuple

import aiohttp
from yarl import URL

from sse_proxy.errors import ConfigError
from sse_proxy.obs.redact import hold_secret, redact_url
from sse_proxy.settings import Config

__all__ = ["Hop", "Network", "no_proxy_matches", "tls_reason"]


class Hop(NamedTuple):
    """How to reach one upstream URL: directly (``proxy`` None) or through a forward proxy.

    aiohttp sends ``proxy_headers`` in the CONNECT of a TLS upstream only; for a plain one
    (http, ws) the request itself goes to the forward proxy, so its credentials travel as
    ``request_headers``, added to that request (the forward proxy consumes them).
    """

    proxy: URL | None = None
    proxy_headers: dict[str, str] | None = None
    request_headers: dict[str, str] | None = None


_DIRECT = Hop()


def no_proxy_matches(host: str, port: int | None, no_proxy: str) -> bool:
    """Whether ``NO_PROXY`` sends ``host`` direct, as curl reads it: ``*``; a name (with or
    without a leading ``.`` or ``*.``) matching itself and every name under it; an address;
    a CIDR range (``10.0.0.0/8``, ``fd00::/8``) matching the addresses in it; each with an
    optional ``:port``. Names are not resolved: a range matches addresses only."""
    host = host.strip("[]").lower().rstrip(".")
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for raw in no_proxy.replace(",", " ").split():
        entry = raw.strip().lower()
        if entry == "*":
            return True
        if "/" in entry:
            try:
                network = ipaddress.ip_network(entry.strip("[]"), strict=False)
            except ValueError:
                continue
            if address is not None and address.version == network.version and address in network:
                return True
            continue
        name, want = entry, None
        if entry.startswith("["):
            name, _, rest = entry[1:].partition("]")
            want = int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
        elif entry.count(":") == 1:
            name, _, port_text = entry.partition(":")
            want = int(port_text) if port_text.isdigit() else None
        if want is not None and want != port:
            continue
        name = name.removeprefix("*.").lstrip(".").rstrip(".")
        if not name:
            continue
        if address is not None:
            try:
                if ipaddress.ip_address(name) == address:
                    return True
            except ValueError:
                pass
            continue
        if host == name or host.endswith("." + name):
            return True
    return False


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
            every = _env(env, "all_proxy")
            for scheme in ("http", "https"):
                value = _env(env, f"{scheme}_proxy") or every  # ALL_PROXY: the fallback
                if value:
                    self.proxies[scheme] = value
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
        for proxy in self._parsed.values():  # the proxy's password is a secret it holds
            if proxy.password:
                hold_secret(proxy.password)
                hold_secret(_basic(proxy))
        self._bypass: dict[tuple[str, int | None], bool] = {}

    def connector(self) -> aiohttp.TCPConnector:
        return aiohttp.TCPConnector(
            limit=0, ttl_dns_cache=300, ssl=self.ssl if self.ssl is not None else True
        )

    def proxy_for(self, url: URL) -> Hop:
        """The way to ``url``: direct, or the forward proxy for its scheme and the headers
        that carry the proxy's credentials (from its URL), to the forward proxy only."""
        if not self._parsed:  # (no forward proxy: most proxies, every request)
            return _DIRECT
        scheme = _SCHEME_OF.get(url.scheme, url.scheme)
        proxy = self._parsed.get(scheme)
        if proxy is None or url.host is None:
            return _DIRECT
        key = (url.host, url.port)
        bypass = self._bypass.get(key)
        if bypass is None:
            bypass = self._bypass[key] = bool(self.no_proxy) and no_proxy_matches(
                url.host, url.port, self.no_proxy
            )
        if bypass:
            return _DIRECT
        if proxy.user is None:
            return Hop(proxy)
        auth = {"Proxy-Authorization": _basic(proxy)}
        proxy = proxy.with_user(None)
        if scheme == "https":
            return Hop(proxy, proxy_headers=auth)  # in the CONNECT
        return Hop(proxy, request_headers=auth)  # on the request the proxy forwards

    def describe(self) -> dict[str, object]:
        """For the startup line: proxies (credentials redacted), no_proxy, TLS settings."""
        out: dict[str, object] = {
            f"{k}_proxy": redact_url(str(v)) for k, v in sorted(self._parsed.items())
        }
        if self.no_proxy:
            out["no_proxy"] = self.no_proxy
        return out


_SCHEME_OF: Final = {"ws": "http", "wss": "https"}
"""The forward proxy a WebSocket URL goes through: its HTTP scheme's."""


def _basic(proxy: URL) -> str:
    token = f"{proxy.user or ''}:{proxy.password or ''}".encode()
    return "Basic " + base64.b64encode(token).decode()


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
