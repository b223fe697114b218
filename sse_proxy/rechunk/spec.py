"""Chaos specs: which strategies, which seed, which fault in time, parsed from flags or the
per-request header.

A spec is plain data. Names are validated and put in one canonical order here, so the same
spec always renders the same header value and always draws from the seeded generators in
the same order: a seed reproduces a run only if the order of work is fixed too.
"""

from __future__ import annotations

import difflib
import math
import random
import re
from dataclasses import dataclass

from sse_proxy.errors import ChaosSpecError
from sse_proxy.rechunk.timefaults import DEFAULT_TIMING, SETTINGS, TIME_FAULTS, TimeSettings

__all__ = [
    "DEFAULT_DELAY_MS",
    "DEFAULT_FRAMES_PER_WRITE",
    "DEFAULT_K",
    "LINE_ENDING_REWRITES",
    "MAX_AT",
    "MAX_SEED",
    "REWRITES",
    "SHAPE_VARIANTS",
    "STRATEGIES",
    "TOKEN_VARIANTS",
    "VARIANTS",
    "ChaosSpec",
    "draw_seed",
    "parse_chaos_header",
    "parse_strategy",
    "parse_strategy_names",
]

STRATEGIES: tuple[str, ...] = ("bytewise", "utf8", "boundaries", "random", "coalesce")
"""Re-chunking strategies: the client gets exactly the upstream bytes, cut differently."""

REWRITES: tuple[str, ...] = (
    "crlf",
    "cr",
    "mixed_newlines",
    "bom",
    "keepalive",
    "dataless",
    "blank_lines",
    "nospace",
)
"""Spec-equivalent rewrites: the bytes change, the events a conforming parser sees do not."""

SHAPE_VARIANTS: tuple[str, ...] = (
    # OpenAI Chat Completions
    "azure",
    "azure_async_filter",
    "include_usage",
    "usage_chunks",
    "reasoning_content",
    "reasoning",
    "reasoning_with_content",
    "role_only",
    "first_text",
    "finish_with_text",
    "choices_n2",
    "openrouter_comments",
    "vllm_usage",
    "usage_on_last_choice",
    "no_ids",
    "tool_calls_empty",
    "tool_args_whole",
    "tool_args_chars",
    "tool_interleaved",
    "tool_args_with_id",
    # Anthropic Messages
    "ping",
    "thinking",
    "text_blocks",
    "citations",
    "server_tool",
    "empty_partial_json",
    # OpenAI Responses
    "reasoning_summary",
    "output_items",
    "annotations",
    "in_progress_repeated",
    "late_item_done",
    # Gemini
    "thoughts",
    "no_text_part",
    "finish_alone",
    "function_calls_one_chunk",
    "function_call_no_args",
    "signature_apart",
)
"""API-equivalent shapes of one dialect's stream (:mod:`sse_proxy.rechunk.shapes`): the
events change within what the API allows, the assembled message does not."""

TOKEN_VARIANTS: tuple[str, ...] = (
    "chars",
    "midword",
    "graphemes",
    "whitespace",
    "stop_runs",
    "retokenize",
)
"""The same text in other deltas, in every dialect (tool-call arguments too)."""

VARIANTS: tuple[str, ...] = SHAPE_VARIANTS + TOKEN_VARIANTS
"""Every shape and token variant."""

LINE_ENDING_REWRITES: frozenset[str] = frozenset({"crlf", "cr", "mixed_newlines"})
"""At most one of these per spec: each rewrites every line ending, so two would fight."""

DEFAULT_K = 3
DEFAULT_DELAY_MS = 0.0
DEFAULT_FRAMES_PER_WRITE = 3
MAX_SEED = (1 << 64) - 1

_ALL_NAMES: tuple[str, ...] = STRATEGIES + REWRITES + VARIANTS
_ORDER = {name: i for i, name in enumerate(_ALL_NAMES)}
_NAME_SPLIT = re.compile(r"[+,]")
_UINT = re.compile(r"[0-9]{1,20}")
_CUT_AT = re.compile(r"cut:([0-9]{1,12})")
_KEYS = ("strategy", "seed", "k", "delay_ms", "frames_per_write", "force", "fault", *SETTINGS)
_FLAGS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
_NO_FAULT = ("", "none")
MAX_AT = 64
"""The most ``cut:N`` items one spec may carry."""


def _short(text: str, limit: int = 40) -> str:
    """Quote user input for an error message without echoing a huge header back."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _valid_names(given: str = "") -> str:
    """The names, short enough for a one-line 400 response: the variants are many, so they
    are summed up (with the closest name to ``given`` first, when there is one)."""
    close = difflib.get_close_matches(given.lower(), _ALL_NAMES, n=1) if given else []
    hint = f"did you mean {close[0]!r}? " if close else ""
    listed = ", ".join(STRATEGIES + REWRITES)
    return (
        f"{hint}valid: {listed}, or one of {len(VARIANTS)} shape and token variants such as "
        "azure, thinking, chars"
    )


def draw_seed() -> int:
    """A fresh seed from the OS; the caller logs it so the run can be reproduced."""
    return random.SystemRandom().randrange(2**32)


def parse_strategy_names(strategy: str) -> tuple[str, ...]:
    """Split ``"utf8+crlf"`` / ``"random, bom"`` into canonical, de-duplicated names."""
    names, at = parse_strategy(strategy)
    if at:
        raise ChaosSpecError(f"cut:N is not a strategy name here; valid: {_valid_names()}")
    return names


def parse_strategy(strategy: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """``"utf8+crlf"``, ``"cut:57"``, ``"crlf+cut:40+cut:90"``: (canonical names, sorted
    ``cut:N`` offsets). A spec of ``cut:N`` items alone cuts exactly there."""
    names: list[str] = []
    at: set[int] = set()
    for raw in _NAME_SPLIT.split(strategy):
        name = raw.strip().lower()
        if not name:
            continue
        cut = _CUT_AT.fullmatch(name)
        if cut is not None:
            at.add(int(cut.group(1)))
            continue
        if name not in _ORDER:
            raise ChaosSpecError(
                f"unknown chaos strategy {_short(raw.strip())}; {_valid_names(raw.strip())}"
            )
        if name not in names:
            names.append(name)
    if not names and not at:
        raise ChaosSpecError(f"empty chaos strategy; {_valid_names()}")
    return _canonical(names), tuple(sorted(at))


def _canonical(names: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Fixed order, so ``random+utf8`` and ``utf8+random`` are the same reproducible run."""
    return tuple(sorted(set(names), key=_ORDER.__getitem__))


@dataclass(frozen=True, slots=True)
class ChaosSpec:
    """What chaos mode does to one stream; ``seed`` makes every cut and rewrite reproducible.

    ``k`` is the number of random cuts per upstream chunk, ``delay_ms`` the upper bound of
    the jitter before each write that carries a cut, ``frames_per_write`` how many frames
    ``coalesce`` merges. ``at`` (``cut:N`` in a strategy) are offsets of the bytes the
    client receives where a cut is made whatever the strategies, each one a cut the client
    must read apart: `test-client`'s every-cut pass. ``force`` serves the variants whose
    shape providers send only when the request asks for it (``n > 1``, tools,
    ``include_usage``) to every request, for hardening: without it such a variant is left
    out of a stream whose request did not ask. ``fault``: a fault in time
    (:mod:`sse_proxy.rechunk.timefaults`) performed on the stream, with ``timing``; a
    spec may have a fault and no strategy (the writes then go out as they come).
    """

    strategies: tuple[str, ...]
    seed: int
    k: int = DEFAULT_K
    delay_ms: float = DEFAULT_DELAY_MS
    frames_per_write: int = DEFAULT_FRAMES_PER_WRITE
    at: tuple[int, ...] = ()
    force: bool = False
    fault: str | None = None
    timing: TimeSettings = DEFAULT_TIMING

    def __post_init__(self) -> None:
        """Reject bad specs at construction, so the data path never meets one."""
        if self.fault is not None and self.fault not in TIME_FAULTS:
            raise ChaosSpecError(
                f"unknown chaos fault {_short(self.fault)}; valid: none, {', '.join(TIME_FAULTS)}"
            )
        if not self.strategies and not self.at and self.fault is None:
            raise ChaosSpecError(f"empty chaos strategy; {_valid_names()}")
        if len(self.at) > MAX_AT or any(
            isinstance(a, bool) or not isinstance(a, int) or a < 1 for a in self.at
        ):
            raise ChaosSpecError(f"chaos cut:N offsets are 1 or more, at most {MAX_AT} of them")
        if list(self.at) != sorted(set(self.at)):
            object.__setattr__(self, "at", tuple(sorted(set(self.at))))
        for name in self.strategies:
            if name not in _ORDER:
                raise ChaosSpecError(f"unknown chaos strategy {_short(name)}; {_valid_names(name)}")
        endings = sorted(set(self.strategies) & LINE_ENDING_REWRITES, key=_ORDER.__getitem__)
        if len(endings) > 1:
            raise ChaosSpecError(
                f"chaos rewrites {' and '.join(endings)} are mutually exclusive "
                "(each rewrites every line ending)"
            )
        canonical = _canonical(self.strategies)
        if canonical != self.strategies:
            object.__setattr__(self, "strategies", canonical)
        if isinstance(self.seed, bool) or not 0 <= self.seed <= MAX_SEED:
            raise ChaosSpecError(f"chaos seed must be an integer in 0..{MAX_SEED}")
        if isinstance(self.k, bool) or self.k < 0:
            raise ChaosSpecError("chaos k must be a non-negative integer")
        if not math.isfinite(self.delay_ms) or self.delay_ms < 0:
            raise ChaosSpecError("chaos delay_ms must be a non-negative number")
        if isinstance(self.frames_per_write, bool) or self.frames_per_write < 1:
            raise ChaosSpecError("chaos frames_per_write must be an integer >= 1")

    @classmethod
    def from_options(
        cls,
        strategy: str,
        seed: int | None,
        k: int = DEFAULT_K,
        delay_ms: float = DEFAULT_DELAY_MS,
        frames_per_write: int = DEFAULT_FRAMES_PER_WRITE,
        *,
        force: bool = False,
        fault: str | None = None,
        timing: TimeSettings = DEFAULT_TIMING,
    ) -> ChaosSpec:
        """Build from CLI/config options; a missing seed is drawn (and must then be logged).
        With a ``fault``, an empty ``strategy`` is allowed: the fault alone."""
        fault = _fault_name(fault)
        names, at = ((), ()) if fault and not strategy.strip() else parse_strategy(strategy)
        return cls(
            strategies=names,
            seed=draw_seed() if seed is None else seed,
            k=k,
            delay_ms=float(delay_ms),
            frames_per_write=frames_per_write,
            at=at,
            force=force,
            fault=fault,
            timing=timing,
        )

    @property
    def strategy(self) -> str:
        """The canonical ``a+b`` form of the strategy list (``cut:N`` items last)."""
        return "+".join([*self.strategies, *(f"cut:{a}" for a in self.at)])

    @property
    def rechunkers(self) -> tuple[str, ...]:
        """The re-chunking strategies that cut bytes (``coalesce`` merges, it does not cut)."""
        return tuple(n for n in self.strategies if n in STRATEGIES and n != "coalesce")

    @property
    def rewrites(self) -> tuple[str, ...]:
        """The spec-equivalent rewrites, in the order they are applied."""
        return tuple(n for n in self.strategies if n in REWRITES)

    @property
    def coalesce(self) -> bool:
        """Whether several frames go out in one write."""
        return "coalesce" in self.strategies

    @property
    def variants(self) -> tuple[str, ...]:
        """The shape and token variants, in the order they are applied."""
        return tuple(n for n in self.strategies if n in VARIANTS)

    @property
    def rechunk_only(self) -> bool:
        """True when the client receives exactly the upstream bytes (no rewrite, variant
        or keep-alive fault active)."""
        return not self.rewrites and not self.variants and self.fault != "stall_keepalive"

    def header_value(self) -> str:
        """Canonical ``strategy=...; seed=...`` text; parsing it gives this spec back."""
        parts = [f"strategy={self.strategy}"] if self.strategy else []
        parts.append(f"seed={self.seed}")
        if self.k != DEFAULT_K:
            parts.append(f"k={self.k}")
        if self.delay_ms != DEFAULT_DELAY_MS:
            parts.append(f"delay_ms={self.delay_ms!r}")
        if self.frames_per_write != DEFAULT_FRAMES_PER_WRITE:
            parts.append(f"frames_per_write={self.frames_per_write}")
        if self.force:
            parts.append("force=1")
        if self.fault is not None:
            parts.append(f"fault={self.fault}")
            parts += [f"{k}={v!r}" for k, v in self.timing.differing().items()]
        return "; ".join(parts)


def _parse_uint(key: str, value: str) -> int:
    if not _UINT.fullmatch(value):
        raise ChaosSpecError(f"chaos {key} must be a non-negative integer, got {_short(value)}")
    return int(value)


def _parse_flag(key: str, value: str) -> bool:
    found = _FLAGS.get(value.lower())
    if found is None:
        raise ChaosSpecError(f"chaos {key} must be 1 or 0 (true or false), got {_short(value)}")
    return found


def _fault_name(value: str | None) -> str | None:
    """A fault name as given (``none`` or empty: no fault); ``ChaosSpecError`` if unknown."""
    if value is None or value.strip().lower() in _NO_FAULT:
        return None
    name = value.strip().lower()
    if name not in TIME_FAULTS:
        raise ChaosSpecError(
            f"unknown chaos fault {_short(value.strip())}; valid: none, {', '.join(TIME_FAULTS)}"
        )
    return name


def _parse_delay(value: str) -> float:
    try:
        delay = float(value)
    except ValueError:
        delay = math.nan
    if not math.isfinite(delay) or delay < 0:
        raise ChaosSpecError(f"chaos delay_ms must be a non-negative number, got {_short(value)}")
    return delay


def parse_chaos_header(
    value: str,
    *,
    default_seed: int | None,
    strategy: str | None = None,
    k: int = DEFAULT_K,
    delay_ms: float = DEFAULT_DELAY_MS,
    frames_per_write: int = DEFAULT_FRAMES_PER_WRITE,
    force: bool = False,
    fault: str | None = None,
    timing: TimeSettings = DEFAULT_TIMING,
) -> ChaosSpec:
    """Parse ``X-SSE-Proxy-Chaos: strategy=random; seed=42; k=5; delay_ms=2``, or a fault in
    time: ``fault=stall_keepalive; stall=30; keepalive_every=2`` (keys ``stall``,
    ``keepalive_every``, ``linger``, ``drip_rate``).

    Keys are case-insensitive and whitespace is ignored; a bare first item is taken as the
    strategy (``X-SSE-Proxy-Chaos: bytewise``). A key the header does not name keeps the
    server's setting, passed in: ``default_seed`` (None: a fresh seed is drawn),
    ``strategy`` (None: the header must name one, or a fault), ``k``, ``delay_ms``,
    ``frames_per_write``, ``force`` (``force=1``: serve the variants the request did not
    ask for too), ``fault`` (``fault=none`` clears it) and ``timing``. Anything else wrong
    is a :class:`ChaosSpecError` whose one-line message is fit for a 400 response.
    """
    fields: dict[str, str] = {}
    for i, part in enumerate(value.split(";")):
        item = part.strip()
        if not item:
            continue
        key, sep, val = item.partition("=")
        key = key.strip().lower()
        val = val.strip()
        if not sep:
            if i == 0 and "strategy" not in fields:
                key, val = "strategy", item
            else:
                raise ChaosSpecError(
                    f"malformed chaos setting {_short(item)}: expected key=value "
                    f"with keys {', '.join(_KEYS)}"
                )
        if key not in _KEYS:
            raise ChaosSpecError(f"unknown chaos key {_short(key)}; valid: {', '.join(_KEYS)}")
        if key in fields:
            raise ChaosSpecError(f"chaos key {key!r} given twice")
        fields[key] = val
    fault = _fault_name(fields["fault"]) if "fault" in fields else fault
    if "strategy" not in fields and strategy is None and fault is None:
        raise ChaosSpecError(
            f"chaos header needs strategy=NAME[+NAME...] or fault=NAME; {_valid_names()}"
        )
    seed = _parse_uint("seed", fields["seed"]) if "seed" in fields else default_seed
    given = fields.get("strategy", strategy or "")
    names, at = ((), ()) if fault is not None and not given.strip() else parse_strategy(given)
    try:
        timing = timing.changed({k: v for k, v in fields.items() if k in SETTINGS})
    except ValueError as exc:
        raise ChaosSpecError(f"chaos {exc}") from None
    return ChaosSpec(
        strategies=names,
        seed=draw_seed() if seed is None else seed,
        k=_parse_uint("k", fields["k"]) if "k" in fields else k,
        delay_ms=_parse_delay(fields["delay_ms"]) if "delay_ms" in fields else float(delay_ms),
        frames_per_write=(
            _parse_uint("frames_per_write", fields["frames_per_write"])
            if "frames_per_write" in fields
            else frames_per_write
        ),
        at=at,
        force=_parse_flag("force", fields["force"]) if "force" in fields else force,
        fault=fault,
        timing=timing,
    )
