"""Secrets never logged, in one place: names that look secret, values the proxy holds.

Two kinds of redaction: by *name* (a header or field called like a key, token or secret)
and by *value* (:data:`HELD`, the values the proxy itself substitutes into upstream
headers: whatever field they surface in, they are replaced). The log pipeline calls
:func:`redact_processor` last, so nothing that reaches a renderer carries either.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Iterable, Mapping, MutableMapping
from types import TracebackType
from typing import Any

import orjson

from sse_proxy.cache import BoundedCache, size_of

__all__ = [
    "HELD",
    "REDACTED",
    "HeldBytes",
    "HeldSecrets",
    "format_exception_redacted",
    "hold_secret",
    "is_secret_header",
    "mask_chunks",
    "mask_message_text",
    "redact_foreign",
    "redact_head",
    "redact_headers",
    "redact_processor",
    "redact_text",
    "redact_url",
    "scrub_held",
    "scrub_held_value",
]

REDACTED = "[redacted]"
_SECRET_EXACT = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie", "set-cookie"}
)
_SECRET_PART = ("key", "token", "secret", "password", "auth", "session")
_QUERY_SECRET = re.compile(
    r"(?i)([?&][^=&#]*(?:key|token|secret|password|auth|sig)[^=&#]*=)[^&#\s\"]*"
)


# The proxy's own log fields whose names merely look secret (token counts, not tokens).
_NOT_SECRET = frozenset(
    {
        "tool_call",
        "input_tokens",
        "output_tokens",
        "cached_tokens",
        "reasoning_tokens",
        "output_tokens_per_s",
    }
)


class HeldSecrets:
    """The values the proxy itself holds (route headers with keys): never in a log line,
    whatever the field is called. The route table registers them at startup; this is
    process-wide state on purpose, as structlog's configuration is: a log line anywhere
    in the process must not carry them."""

    __slots__ = ("_values",)

    def __init__(self) -> None:
        self._values: tuple[str, ...] = ()  # the longest first, see scrub

    def __bool__(self) -> bool:
        return bool(self._values)

    def hold(self, value: str) -> None:
        """Never log ``value``: every log line has it replaced, in any field, from now on."""
        if len(value) >= 4 and value not in self._values:  # shorter: ordinary words go
            self._values = tuple(sorted((*self._values, value), key=len, reverse=True))

    def scrub(self, text: str) -> str:
        """``text`` with every held value replaced (the longest first: a value that holds
        another, as ``Bearer KEY`` holds ``KEY``, goes whole)."""
        for secret in self._values:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def values(self) -> tuple[str, ...]:
        return self._values

    def bytes_scrubber(self) -> HeldBytes | None:
        """A scrubber for a byte stream (a recording's reads), or None when nothing is held."""
        return HeldBytes(v.encode("utf-8") for v in self._values) if self._values else None


class HeldBytes:
    """Held values masked in a byte stream however it is cut, each read's length kept.

    For the bytes a recording or the inspector keeps of an upstream that echoes a key: a
    value is replaced by as many ``*`` (so offsets and read boundaries stay true), even when
    it straddles reads. A read is released once no held value starting in it can still be
    completed by later bytes; :meth:`finish` releases the rest. Linear: each byte is
    scanned a bounded number of times (the longest value's length decides).
    """

    __slots__ = ("_held", "_keep", "_reads", "_secrets")

    def __init__(self, secrets: Iterable[bytes]) -> None:
        self._secrets = tuple(sorted({s for s in secrets if s}, key=len, reverse=True))
        self._keep = max((len(s) for s in self._secrets), default=1) - 1
        self._reads: list[tuple[Any, bytearray]] = []
        self._held = 0

    def feed(self, read: bytes, tag: Any = None) -> list[tuple[Any, bytes]]:
        """One read (with a tag of the caller's, its time say); the reads now final."""
        self._reads.append((tag, bytearray(read)))
        self._held += len(read)
        self._mask()
        final = self._held - self._keep
        out: list[tuple[Any, bytes]] = []
        done = 0
        while self._reads and done + len(self._reads[0][1]) <= final:
            tag_, data = self._reads.pop(0)
            done += len(data)
            out.append((tag_, bytes(data)))
        self._held -= done
        return out

    def finish(self) -> list[tuple[Any, bytes]]:
        out = [(tag, bytes(data)) for tag, data in self._reads]
        self._reads.clear()
        self._held = 0
        return out

    def _mask(self) -> None:
        window = bytearray().join(data for _, data in self._reads)
        hit = False
        for secret in self._secrets:
            at = window.find(secret)
            while at >= 0:
                window[at : at + len(secret)] = b"*" * len(secret)
                hit = True
                at = window.find(secret, at + 1)
        if not hit:
            return
        pos = 0
        for _, data in self._reads:
            data[:] = window[pos : pos + len(data)]
            pos += len(data)


def mask_chunks(chunks: Iterable[bytes]) -> list[bytes]:
    """``chunks`` with every held value masked (see :class:`HeldBytes`), lengths kept."""
    scrubber = HELD.bytes_scrubber()
    if scrubber is None:
        return list(chunks)
    out = [data for chunk in chunks for _, data in scrubber.feed(chunk)]
    return out + [data for _, data in scrubber.finish()]


# A preview of raw stream bytes, without message text: the line's field name and the
# punctuation (JSON's shape) stay, every run of letters and digits becomes "*".
_WORD_RUN = re.compile(r"(\\(?:x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8}|.))|[^\W_]+")
_FIELD_NAMES = frozenset({"data", "event", "id", "retry"})


def mask_message_text(preview: str) -> str:
    """An alert's ``preview`` as it may be logged without ``--log-text``: where the frame
    broke and its shape (``data: {"*":[{"*":{"*":"*``), not what it said."""

    def mask(m: re.Match[str]) -> str:
        word = m.group(0)
        if m.group(1) is not None:  # an escape of the preview's own (\n, \xff): kept
            return word
        if word in _FIELD_NAMES and preview[m.end() : m.end() + 1] == ":":
            return word
        return "*"

    return _WORD_RUN.sub(mask, preview)


HELD = HeldSecrets()
"""The process's held secrets (the one instance; the route table fills it)."""


def hold_secret(value: str) -> None:
    """Never log ``value`` (see :meth:`HeldSecrets.hold`)."""
    HELD.hold(value)


def scrub_held(text: str) -> str:
    """``text`` with every held value replaced (for fields built before the log sink)."""
    return HELD.scrub(text) if HELD else text


_MAX_NAMES = 4096
"""Log field names classified once and kept (they are the code's own)."""
_SECRET_NAMES: BoundedCache[str, bool] = BoundedCache(1 << 20)
"""Header names classified once and kept: they repeat, and they are the client's (a client
inventing long names only empties it)."""


def _looks_secret(name: str) -> bool:
    low = name.lower()
    return low in _SECRET_EXACT or any(part in low for part in _SECRET_PART)


def is_secret_header(name: str) -> bool:
    secret = _SECRET_NAMES.get(name)
    if secret is None:
        secret = _looks_secret(name)
        _SECRET_NAMES.put(name, secret, size_of(name))
    return secret


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Header dict safe to log: secret-looking values replaced."""
    return {k: (REDACTED if is_secret_header(k) else v) for k, v in headers.items()}


def redact_head(headers: Mapping[str, str]) -> dict[str, str]:
    """Headers as a recording or the inspector keeps them: secret-named ones redacted, and
    every value scrubbed of what the proxy holds (an upstream may echo a key in any)."""
    return {k: scrub_held(v) for k, v in redact_headers(headers).items()}


def redact_url(url: str) -> str:
    """URL safe to log: credentials and key-like query values replaced."""
    url = re.sub(r"(?<=://)[^/@\s]+@", f"{REDACTED}@", url)
    if HELD:
        url = HELD.scrub(url)
    return _QUERY_SECRET.sub(lambda m: m.group(1) + REDACTED, url)


# Free text (exception messages, foreign log lines): credentials after an auth scheme, the
# value of a header-like `name: value` / `name=value` whose name looks secret, and URLs.
# Bounded repeats only: this runs on attacker-influenced text and must stay linear.
_TEXT_AUTH_SCHEME = re.compile(r"(?i)\b(bearer|basic|digest|negotiate)(\s+)[^\s'\",;]+")
_TEXT_WHOLE_LINE = re.compile(
    r"(?i)\b((?:proxy-)?authorization|(?:set-)?cookie)(['\"]?[ \t]*[:=][ \t]*)[^\r\n'\"]+"
)
_TEXT_NAMED = re.compile(
    r"(?i)\b([\w-]{0,40}(?:key|token|secret|passw|auth|session)[\w-]{0,40})"
    r"(['\"]?[ \t]*[:=][ \t]*['\"]?)[^\s'\",;&]+"
)


def redact_text(text: str) -> str:
    """Free text safe to log, best effort: URLs, auth schemes and secret-named values."""
    text = redact_url(text)
    text = _TEXT_WHOLE_LINE.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    text = _TEXT_AUTH_SCHEME.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    return _TEXT_NAMED.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)


def _exception_message(exc: BaseException) -> str:
    # Imported here, not at the top: check and the CLI load this module at start-up and
    # need no aiohttp (the slowest import of all) until there is an exception to show.
    from aiohttp.http_exceptions import HttpProcessingError

    if isinstance(exc, HttpProcessingError):
        # A malformed request: aiohttp quotes the client's raw bytes (headers, query, all of
        # it) in the message, so only the status survives.
        return f"{exc.code} (message withheld: it quotes the request's raw bytes)"
    try:
        return redact_text(str(exc))
    except Exception:  # noqa: BLE001 - a broken __str__ must not break logging
        return "<unprintable>"


def format_exception_redacted(
    exc_info: tuple[type[BaseException], BaseException, TracebackType | None],
) -> str:
    """A traceback with every exception message in the chain redacted.

    Frames (file, line, source line) are code, never data; only the messages can carry a
    header value or a URL, so those go through :func:`redact_text`, and aiohttp's HTTP
    parse errors lose their message entirely.
    """
    parts: list[str] = []
    seen: set[int] = set()

    def walk(exc: BaseException) -> None:
        seen.add(id(exc))
        cause, context = exc.__cause__, exc.__context__
        if cause is not None and id(cause) not in seen:
            walk(cause)
            parts.append(
                "\nThe above exception was the direct cause of the following exception:\n\n"
            )
        elif context is not None and not exc.__suppress_context__ and id(context) not in seen:
            walk(context)
            parts.append(
                "\nDuring handling of the above exception, another exception occurred:\n\n"
            )
        if exc.__traceback__ is not None:
            parts.append("Traceback (most recent call last):\n")
            parts.extend(traceback.format_tb(exc.__traceback__))
        name = type(exc).__qualname__
        module = type(exc).__module__
        if module not in ("builtins", "__main__"):
            name = f"{module}.{name}"
        parts.append(f"{name}: {_exception_message(exc)}")

    walk(exc_info[1])
    return "".join(parts)


# Fields that carry exception messages, which may quote raw bytes from either side.
_FREE_TEXT_FIELDS = frozenset({"error", "reason", "message", "exception"})
# The pipeline's own fields, never a secret and never scrubbed.
_OWN_FIELDS = frozenset({"event", "level", "timestamp", "stream_id", "event_index"})

# What a log field's name alone says it needs (the value's type decides the rest).
_OWN, _PLAIN, _SECRET, _FREE_TEXT = 0, 1, 2, 3
_FIELD_FATES: dict[str, tuple[bool, int]] = {}
"""Each field name: (a headers mapping goes through :func:`redact_headers`, its kind).
A summary line has some forty fields: each name is matched against the secret patterns
once, not on every line."""


def _field_fate(key: str) -> tuple[bool, int]:
    if key in _OWN_FIELDS:
        fate = (False, _OWN)
    else:
        if key not in _NOT_SECRET and _looks_secret(key):  # kept here, not with the headers
            kind = _SECRET
        elif key in _FREE_TEXT_FIELDS:
            kind = _FREE_TEXT
        else:
            kind = _PLAIN
        fate = (key.endswith("headers"), kind)
    if len(_FIELD_FATES) < _MAX_NAMES:
        _FIELD_FATES[key] = fate
    return fate


_PLAIN_FATES = frozenset({(False, _OWN), (False, _PLAIN)})
_LINE_SHAPES: dict[tuple[str, ...], bool] = {}
"""Each line shape (its field names, in order): whether every name is the pipeline's own
or plain. A summary line has some fifty fields and the same names every time."""
_MAX_SHAPES = 1024


def _plain_shape(keys: tuple[str, ...]) -> bool:
    fates = _FIELD_FATES
    plain = all((fates.get(k) or _field_fate(k)) in _PLAIN_FATES for k in keys)
    if len(_LINE_SHAPES) < _MAX_SHAPES:
        _LINE_SHAPES[keys] = plain
    return plain


def _nothing_to_redact(event_dict: MutableMapping[str, Any]) -> bool:
    """Whether the field rules would leave this line as it is, found at C speed: no held
    value, only own and plain names, and no ``://`` anywhere in the values (a plain
    field's only rule is the URL one; its rendering holds every string the values hold,
    nested ones too, so this never says yes where the rules would change a value)."""
    if HELD:
        return False
    keys = tuple(event_dict)
    plain = _LINE_SHAPES.get(keys)
    if plain is None:
        plain = _plain_shape(keys)
    if not plain:
        return False
    try:
        rendered = orjson.dumps(list(event_dict.values()), default=str)
    except (TypeError, ValueError):  # (orjson.JSONEncodeError is a TypeError)
        return False
    return rendered.find(b"://") < 0  # (`in` tries b"://" as an int first: a TypeError)


def redact_processor(
    _logger: Any, _name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Last line of defence: no secret-named field or header value leaves the process."""
    if _nothing_to_redact(event_dict):
        return event_dict
    fates = _FIELD_FATES
    held = bool(HELD)
    for key, value in event_dict.items():  # values replaced in place: the keys stay
        fate = fates.get(key)
        if fate is None:
            fate = _field_fate(key)
        headers, kind = fate
        if kind == _OWN:
            continue
        shown = value
        if headers and isinstance(value, Mapping):
            shown = redact_headers(value)
        elif kind == _SECRET:
            shown = REDACTED
        elif isinstance(value, str):
            if kind == _FREE_TEXT:
                shown = redact_text(value)
            elif "://" in value:
                shown = redact_url(value)
        if held:  # whatever the field and whatever was redacted above: held values go
            shown = _scrub_nested(shown)
        if shown is not value:
            event_dict[key] = shown
    return event_dict


def scrub_held_value(value: Any) -> Any:
    """``value`` (strings, lists, mappings of them) with every held value replaced."""
    return _scrub_nested(value) if HELD else value


def _scrub_nested(value: Any) -> Any:
    if isinstance(value, str):
        return HELD.scrub(value)
    if isinstance(value, (list, tuple)):
        return [_scrub_nested(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _scrub_nested(v) for k, v in value.items()}
    return value


def redact_foreign(
    _logger: Any, _name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """A stdlib (aiohttp, asyncio) line: its message is free text, redact it as such."""
    event = event_dict.get("event")
    if isinstance(event, str):
        event_dict["event"] = redact_text(event)
    return event_dict
