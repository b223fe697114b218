"""How much a failing case matters: does the stream it serves reach clients in real life?

``real``: real providers, proxies and networks produce it (TCP splits a stream anywhere,
Google ends lines with CRLF, OpenRouter sends comments, Azure a first chunk with no
choices). ``spec``: the SSE spec or the API allows it, but it is rarely seen (a BOM, a bare
CR, data-less ``retry:`` blocks, tool-call fragments interleaved by index). A combination
is as rare as its rarest part. ``--fail-on real`` makes only real ones fail the run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Final

from sse_proxy.rechunk.spec import REWRITES, STRATEGIES, VARIANTS
from sse_proxy.tools.fixtures.variants import REAL, SPEC
from sse_proxy.tools.fixtures.variants import VARIANTS as PROVENANCE

__all__ = ["LEVELS", "REAL", "SEVERITY", "SPEC", "parse_fail_on", "severity_of"]

LEVELS: Final[tuple[str, ...]] = (REAL, SPEC)
"""In the order the report lists them."""

SEVERITY: Final[Mapping[str, str]] = MappingProxyType(
    {
        **dict.fromkeys(STRATEGIES, REAL),  # reads end anywhere: proxies, TLS records, TCP
        "crlf": REAL,  # Google's servers, IIS, many Java servers
        "cr": SPEC,
        "mixed_newlines": SPEC,
        "bom": SPEC,
        "keepalive": REAL,  # comment pings: OpenRouter, many gateways and frameworks
        "dataless": SPEC,
        "blank_lines": SPEC,
        "nospace": REAL,  # Spring's SseEmitter and others write 'data:x'
        **{name: PROVENANCE[name].severity for name in VARIANTS},
    }
)
"""The severity of every strategy, rewrite and variant."""

assert set(SEVERITY) == set(STRATEGIES + REWRITES + VARIANTS)


def severity_of(strategy: str | None) -> str:
    """The severity of a case that serves ``strategy`` (None: the baseline, a fault, a
    cut, all real); a combination takes its rarest part's."""
    names = [n for n in (strategy or "").split("+") if n]
    return SPEC if any(SEVERITY.get(n, REAL) == SPEC for n in names) else REAL


def parse_fail_on(values: Sequence[str] | None) -> tuple[str, ...]:
    """``--fail-on real``, ``spec``, ``real,spec`` or ``both`` as levels; ValueError else."""
    levels: list[str] = []
    for raw in values or ("both",):
        for given in raw.split(","):
            item = given.strip().lower()
            if not item:
                continue
            if item in ("both", "all"):
                levels += LEVELS
            elif item in LEVELS:
                levels.append(item)
            else:
                raise ValueError(f"--fail-on takes real, spec or both, not {item!r}")
    if not levels:
        raise ValueError("--fail-on takes real, spec or both")
    return tuple(level for level in LEVELS if level in levels)
