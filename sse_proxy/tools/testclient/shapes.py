"""The `shapes` and `tokens` groups: the same message in the shapes real providers send.

Each case serves the fixture through one variant (:mod:`sse_proxy.rechunk.shapes`, applied
by the proxy in chaos mode, as ``serve --chaos NAME`` would), whole frames one per write,
so a failure is about what the stream says, not how it is cut. The diagnosis names the
variant's family (``stream shape (empty choices: Azure first chunk)``, ``token boundary
(inside grapheme clusters)``), the exact chunk (the harness runs the same pure transform
over the same fixture, so it knows the bytes the client got), the providers that send it
with the sources (:mod:`sse_proxy.tools.fixtures.variants`) and a hint in the client's
language.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Final

from sse_proxy.rechunk.shapes.events import parse_frame
from sse_proxy.rechunk.shapes.rewriter import VARIANT_DIALECTS, apply_variants, split_frames
from sse_proxy.rechunk.shapes.tokens import slot_of
from sse_proxy.rechunk.spec import SHAPE_VARIANTS, TOKEN_VARIANTS
from sse_proxy.tools.fixtures.streams import DELTA_DIALECTS
from sse_proxy.tools.fixtures.variants import VARIANTS, Variant, hint_for
from sse_proxy.tools.testclient.calls import explain_calls, json_crash
from sse_proxy.tools.testclient.diagnose import CrashSite, Diagnosis, first_difference

__all__ = [
    "SEEDED",
    "SHAPES",
    "TOKENS",
    "client_language",
    "diagnose_variant",
    "families_summary",
    "group_of",
    "is_variant_group",
    "key_chunk",
    "variant_lines",
    "variant_summary",
    "variants_for",
]

SHAPES: Final = "shapes"
TOKENS: Final = "tokens"
SEEDED: Final = frozenset({"retokenize"})
"""Variants whose output depends on the seed: one case per seed (the others run once)."""
_PREVIEW = 400


def is_variant_group(group: str) -> bool:
    return group in (SHAPES, TOKENS)


def group_of(name: str) -> str:
    return TOKENS if name in TOKEN_VARIANTS else SHAPES


def variants_for(dialect: str, *, tools: bool) -> tuple[list[str], list[str]]:
    """(shape variants, token variants) that apply to a ``dialect`` fixture (with the tool
    calls, ``tools``: the tool-call variants too); none to MCP, whose text comes whole."""
    shapes = [
        n
        for n in SHAPE_VARIANTS
        if VARIANT_DIALECTS[n] == dialect and (tools or not VARIANTS[n].tools)
    ]
    return shapes, list(TOKEN_VARIANTS) if dialect in DELTA_DIALECTS else []


def client_language(command: Sequence[str]) -> str:
    """python, javascript, go or other: what CMD is written in, as far as it shows."""
    if tuple(command[:1]) == ("--browser",):
        return "javascript"
    if tuple(command[:1]) == ("--",):
        command = command[1:]
    words = [os.path.basename(w).lower() for w in command[:3]]
    for word in words:
        if word.startswith(("python", "pypy", "uv", "pytest")) or word.endswith(".py"):
            return "python"
        if word in ("node", "deno", "bun", "npx", "tsx", "ts-node") or word.endswith(
            (".js", ".mjs", ".cjs", ".ts")
        ):
            return "javascript"
        if word == "go" or word.endswith(".go"):
            return "go"
    return "other"


def _preview(frame: bytes) -> str:
    text = frame.decode("utf-8", "replace").strip()
    return text if len(text) <= _PREVIEW else text[: _PREVIEW - 3] + "..."


def key_chunk(body: bytes, name: str, seed: int, dialect: str) -> bytes | None:
    """The chunk of ``body`` through variant ``name`` that the variant is about."""
    for frame, key in apply_variants([name], body, dialect, seed):
        if key == name:
            return frame
    return None


def _chunk_at(body: bytes, name: str, seed: int, dialect: str, at: int) -> bytes | None:
    """The delta that carries character ``at`` of the answer, in the variant stream."""
    out = b"".join(f for f, _ in apply_variants([name], body, dialect, seed))
    pos = 0
    for frame in split_frames(out):
        slot = slot_of(parse_frame(frame), dialect)
        if slot is None or not slot.answer:
            continue
        pos += len(slot.text)
        if pos > at:
            return frame
    return None


def _symptom(
    expected: str,
    actual: str,
    exit_code: int | None,
    timed_out: bool,
    timeout: float,
    site: CrashSite | None,
) -> str:
    if timed_out:
        return f"no exit within {timeout:g} s"
    if exit_code != 0:
        where = f", crash inside {site}" if site is not None else ""
        return f"exited with status {exit_code}{where}"
    if len(actual) < len(expected) and expected.startswith(actual):
        return f"printed {len(actual)} of {len(expected)} characters, then stopped"
    return f"printed the wrong text, {first_difference(expected, actual)}"


def diagnose_variant(
    name: str,
    expected: str,
    actual: str,
    *,
    exit_code: int | None,
    timed_out: bool,
    timeout: float,
    site: CrashSite | None,
    stderr: str,
    body: bytes,
    seed: int,
    dialect: str,
    command: Sequence[str],
    tools: bool,
) -> Diagnosis | None:
    """None when the client passed variant ``name``; else the shape it cannot take."""
    if not timed_out and exit_code == 0 and actual == expected:
        return None
    variant: Variant = VARIANTS[name]
    symptom = _symptom(expected, actual, exit_code, timed_out, timeout, site)
    calls = explain_calls(expected, actual) if tools and exit_code == 0 else None
    if calls is not None:
        symptom = calls[1]
    elif tools and exit_code not in (0, None) and json_crash(stderr):
        symptom += " in a JSON parser: tool-call arguments were parsed before they were whole"
    chunk = None
    if variant.group == TOKENS and exit_code == 0 and not timed_out and calls is None:
        at = next(
            (i for i, (a, b) in enumerate(zip(expected, actual, strict=False)) if a != b),
            min(len(expected), len(actual)),
        )
        chunk = _chunk_at(body, name, seed, dialect, at)
    if chunk is None:
        chunk = key_chunk(body, name, seed, dialect)
    shown = _preview(chunk) if chunk is not None else "(not found in this fixture)"
    hint = hint_for(variant, client_language(command))
    providers = ", ".join(variant.providers)
    reason = f"{symptom}; the stream had {variant.what}, as {providers} send it"
    return Diagnosis(
        variant.family,
        reason,
        f"{name}: {variant.what}",
        site,
        chunk=shown,
        providers=variant.providers,
        sources=variant.sources,
        hint=hint,
    )


def families_summary(families: Sequence[str]) -> str:
    """``stream shape (empty choices: Azure first chunk, include_usage final chunk)``: the
    families of a group's failures, those of one kind joined."""
    kinds: dict[str, list[str]] = {}
    other: list[str] = []
    for family in families:
        head, sep, rest = family.partition(" (")
        if head == "stream shape" and sep and ": " in rest:
            kind, _, chunk = rest.rstrip(")").partition(": ")
            kinds.setdefault(kind, [])
            if chunk not in kinds[kind]:
                kinds[kind].append(chunk)
        elif family not in other:
            other.append(family)
    shaped = [f"stream shape ({k}: {', '.join(v)})" for k, v in kinds.items()]
    return ", ".join(shaped + other)


def variant_summary(results: Sequence[Any]) -> list[str]:
    """One line per variant group that failed (the report's, under its table): how many
    variants failed, their families by kind (the variants that did not apply to the
    client's request are not counted)."""
    out: list[str] = []
    for group in (SHAPES, TOKENS):
        items = [r for r in results if r.case.group == group and r.outcome != "not_applicable"]
        failed = [r for r in items if not r.passed]
        if not failed:
            continue
        variants = len({r.case.strategy for r in items})
        bad = len({r.case.strategy for r in failed})
        families = families_summary([r.diagnosis.family for r in failed if r.diagnosis])
        out.append(f"{group}: {bad} of {variants} variants failed: {families}")
    return out


def variant_lines(diagnosis: Diagnosis, severity: str) -> list[str]:
    """A shape or token failure's lines in a report: the chunk (its ``event:`` and
    ``data:`` lines one under the other), who sends it, the sources and the fix."""
    lines = (diagnosis.chunk or "").splitlines() or [""]
    return [
        f"  the chunk: {lines[0]}",
        *(f"             {line}" for line in lines[1:]),
        f"  sent by:   {', '.join(diagnosis.providers)} ({severity})",
        f"  sources:   {', '.join(diagnosis.sources)}",
        f"  fix:       {diagnosis.hint}",
    ]
