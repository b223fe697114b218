"""What `sse-proxy test-client` runs: the options, the cases, in report order."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from sse_proxy.core.dialects.registry import DIALECTS
from sse_proxy.errors import ChaosSpecError, UsageError
from sse_proxy.rechunk.spec import REWRITES, STRATEGIES, ChaosSpec
from sse_proxy.tools.fixtures.faults import (
    ENDINGS,
    KINDS,
    TEST_CLIENT_LEGACY_NAMES,
    TIMED,
    names_help,
)
from sse_proxy.tools.testclient.severity import LEVELS, severity_of
from sse_proxy.tools.testclient.shapes import SEEDED, SHAPES, TOKENS, group_of, is_variant_group

__all__ = [
    "BASELINE",
    "CUT",
    "CUT_BUDGET",
    "CUT_GAP",
    "DEFAULT_COMBOS",
    "DEFAULT_PATIENCE",
    "FAULTS",
    "FAULT_KINDS",
    "STALLS",
    "STALL_KINDS",
    "Case",
    "HarnessOptions",
    "default_jobs",
    "fault_description",
    "fault_kinds",
    "plan_cases",
    "stall_kinds",
]

DEFAULT_COMBOS: Final[tuple[str, ...]] = (
    "utf8+crlf",
    "boundaries+cr",
    "random+mixed_newlines+keepalive",
    "coalesce+bom+nospace",
)
"""Combinations run by default: re-chunking and rewrites at once."""

BASELINE: Final = "baseline"
CUT: Final = "cut"
FAULTS: Final = "faults"
STALLS: Final = "stalls"
DEFAULT_PATIENCE: Final = 5.0
"""Seconds from a stall's start (a linger's, a drip's) that a client has to end the case:
report the stall (exit non-zero), or exit with the whole answer after a linger."""
CUT_BUDGET: Final = 600
"""The every-cut pass runs by default only up to this many cut points (one run each)."""
CUT_GAP: Final = 0.015
"""Seconds between the two writes of a cut case, so the client reads them apart."""

FAULT_KINDS: Final[dict[str, str]] = {name: KINDS[name].description for name in ENDINGS}
"""The `faults` group (the fixtures' :data:`~sse_proxy.tools.fixtures.ENDINGS`): a correct
client must report failure on each."""


STALL_KINDS: Final[dict[str, str]] = {name: KINDS[name].description for name in TIMED}
"""The ``stalls`` group: the faults in time (:mod:`sse_proxy.rechunk.timefaults`)."""


def fault_description(kind: str) -> str:
    """What a fault of the ``faults`` or ``stalls`` group does to the stream."""
    return FAULT_KINDS.get(kind) or STALL_KINDS[kind]


def stall_kinds(dialect: str) -> tuple[str, ...]:
    """The faults in time that apply to ``dialect``: a linger only where a terminal marker
    says the answer is complete (without one, the close is the end)."""
    described = DIALECTS.get(dialect)
    marker = described is not None and described.terminal_marker is not None
    return tuple(kind for kind in STALL_KINDS if marker or kind != "linger")


def fault_kinds(dialect: str) -> tuple[str, ...]:
    """The faults that apply to ``dialect``, as its descriptor tells.

    Without a terminal marker (raw text) a clean end cannot be told from a cut one, and a
    spec-conforming parser silently drops a partial frame at the end of the stream; without
    an error event there is none to send. A reset can always be noticed.
    """
    described = DIALECTS.get(dialect)
    marker = described is not None and described.terminal_marker is not None
    error = described is not None and described.error_frame is not None
    applies = {"unterminated": marker, "no_terminal": marker, "error_event": error}
    return tuple(kind for kind in FAULT_KINDS if applies.get(kind, True))


def default_jobs() -> int:
    """Cases in parallel by default: one per core, at least 2, at most 8."""
    return max(2, min(8, os.cpu_count() or 2))


@dataclass(frozen=True, slots=True)
class Case:
    """One run of CMD: a chaos ``strategy`` with ``seed``, the baseline, a two-way ``cut``,
    or a ``fault`` (of the ``faults`` group, or of ``stalls``: a fault in time). A
    ``probe`` runs one part of a failed combination alone."""

    group: str
    strategy: str | None = None
    seed: int = 1
    cut: int | None = None
    fault: str | None = None
    probe: bool = False

    @property
    def name(self) -> str:
        if self.cut is not None:
            return f"cut={self.cut}"
        if self.group == STALLS:
            return f"{STALLS}:{self.fault}"
        if self.fault is not None:
            return f"fault={self.fault}"
        if self.group == BASELINE:
            return f"baseline (frames mode) seed={self.seed}"
        if is_variant_group(self.group) and self.strategy not in SEEDED:
            return f"{self.group}:{self.strategy}"
        if is_variant_group(self.group):
            return f"{self.group}:{self.strategy} seed={self.seed}"
        return f"{self.strategy} seed={self.seed}"

    @property
    def row(self) -> str:
        """The report's table row: the group, or for shapes and tokens the variant."""
        return f"{self.group}:{self.strategy}" if is_variant_group(self.group) else self.group

    @property
    def severity(self) -> str:
        """``real`` or ``spec`` (:mod:`.severity`)."""
        return severity_of(self.strategy)


@dataclass(frozen=True, slots=True)
class HarnessOptions:
    """Everything `sse-proxy test-client` was asked to do."""

    command: tuple[str, ...]
    dialect: str = "openai"
    fixture: str | None = None
    only: tuple[str, ...] | None = None
    skip: tuple[str, ...] = ()
    seeds: int = 3
    seed: int | None = None
    exhaustive: bool | None = None
    timeout: float = 20.0
    jobs: int | None = None
    keep_going: bool = False
    report: str | None = None
    junit: str | None = None
    chaos_k: int = 3
    delay_ms: float = 0.0
    proxy_log: str | None = None
    html: str | None = None
    tools: bool = False
    """Serve the tool-call fixture; the client prints the calls too (fixtures.tools)."""
    fail_on: tuple[str, ...] = LEVELS
    """Which severities of failure make the exit non-zero."""
    verbose: bool = False
    browser: str | None = None
    """``chromium`` or ``firefox``: the client is ``script`` in that browser, not CMD."""
    script: str | None = None
    all_shapes: bool = False
    """Serve every shape variant, also those the client's request does not make possible
    (``n > 1``, tools...): hardening, each such case marked forced."""
    patience: float | None = None
    """``stalls``: seconds from a stall's start in which the client must report it (None:
    :data:`DEFAULT_PATIENCE`, and a drip is reported as information only)."""

    @property
    def stall_patience(self) -> float:
        return DEFAULT_PATIENCE if self.patience is None else self.patience

    @property
    def subject(self) -> tuple[str, ...]:
        """What is tested, as it is given after test-client's options: ``-- CMD ...`` or
        ``--browser NAME --script FILE``."""
        if self.browser is not None:
            return ("--browser", self.browser, "--script", self.script or "")
        return ("--", *self.command)

    @property
    def parallel(self) -> int:
        return self.jobs if self.jobs is not None else default_jobs()


def _check_strategy(name: str, flag: str) -> str:
    try:
        return ChaosSpec.from_options(name, 0).strategy
    except ChaosSpecError as exc:
        raise UsageError(f"{flag}: {exc}") from None


def _parse_cut_range(item: str, n_cuts: int, flag: str) -> range:
    """``cut`` (all), ``cut:N`` or ``cut:A-B`` (inclusive) as cut offsets."""
    if item == CUT:
        return range(1, n_cuts + 1)
    spec = item[len(CUT) + 1 :]
    lo_text, sep, hi_text = spec.partition("-")
    try:
        lo = int(lo_text)
        hi = int(hi_text) if sep else lo
    except ValueError:
        raise UsageError(f"{flag}: bad cut {item!r}; use cut, cut:N or cut:A-B") from None
    if not 1 <= lo <= hi <= n_cuts:
        raise UsageError(f"{flag}: {item!r} is out of range; this fixture has cuts 1..{n_cuts}")
    return range(lo, hi + 1)


def _items(values: Sequence[str] | None) -> list[str]:
    return [v.strip().lower() for v in values or () if v.strip()]


def _normalise_group(
    item: str,
    flag: str,
    faults: Sequence[str],
    variants: Sequence[str] = (),
    stalls: Sequence[str] = tuple(STALL_KINDS),
) -> str:
    if item in (BASELINE, FAULTS, CUT, SHAPES, TOKENS, STALLS):
        return item
    if item.startswith(STALLS + ":"):
        kind = item.split(":", 1)[1]
        if kind not in STALL_KINDS:
            raise UsageError(f"{flag}: unknown stall {kind!r}; valid: {', '.join(STALL_KINDS)}")
        if kind not in stalls:
            raise UsageError(f"{flag}: {kind!r} does not apply to this dialect")
        return item
    group, colon, name = item.partition(":")
    if (colon and group in (SHAPES, TOKENS)) or item in variants:
        name = name if colon else item
        if name not in variants:
            valid = ", ".join(v for v in variants if group_of(v) == (group or group_of(name)))
            raise UsageError(
                f"{flag}: {name!r} is not a variant for this fixture (with --tools for the "
                f"tool-call ones); valid: {valid or 'none'}"
            )
        return f"{group_of(name)}:{name}"
    if item.startswith(FAULTS + ":"):
        given = item.split(":", 1)[1]
        kind = TEST_CLIENT_LEGACY_NAMES.get(given, given)
        if kind not in FAULT_KINDS:
            valid = names_help(FAULT_KINDS, TEST_CLIENT_LEGACY_NAMES)
            raise UsageError(f"{flag}: unknown fault {given!r}; valid: {valid}")
        if kind not in faults:
            raise UsageError(f"{flag}: fault {kind!r} does not apply to this dialect")
        return f"{FAULTS}:{kind}"
    return _check_strategy(item, flag)


def plan_cases(
    *,
    only: Sequence[str] | None,
    seeds: Sequence[int],
    cut_points: int,
    exhaustive: bool | None,
    skip: Sequence[str] = (),
    faults: Sequence[str] = tuple(FAULT_KINDS),
    variants: Sequence[str] = (),
    stalls: Sequence[str] = tuple(STALL_KINDS),
) -> list[Case]:
    """The cases to run, in report order. ``cut_points`` is ``len(short fixture) - 1``.

    Without ``only``: the baseline, every strategy, every rewrite, the default combinations,
    the ``shapes`` and ``tokens`` groups (``variants``: those that apply to the fixture),
    the ``faults`` and ``stalls`` groups (``stalls``: the faults in time that apply), and
    the every-cut pass when ``exhaustive`` (``None``: when there are at most
    :data:`CUT_BUDGET` cut points). ``only`` picks groups: strategy names or combinations,
    ``baseline``, ``shapes`` and ``tokens`` (or ``shapes:NAME``, a variant's name),
    ``faults`` (or ``faults:KIND``), ``stalls`` (or ``stalls:KIND``), ``cut``, ``cut:N``,
    ``cut:A-B``; an ``!name``
    item in ``only`` skips it. ``skip`` drops groups (the same names; ``cut`` drops every
    cut) from whatever was selected. A variant runs once, unless its output depends on the
    seed (``retokenize``): then once per seed.
    """
    only_items = _items(only) if only is not None else None
    skip_items = _items(skip)
    if only_items is not None:
        skip_items += [i[1:].strip() for i in only_items if i.startswith("!")]
        only_items = [i for i in only_items if not i.startswith("!")] or None
        if only_items is None and not skip_items:
            raise UsageError("--only: nothing selected")
    skipped = {_normalise_group(i, "--skip", faults, variants, stalls) for i in skip_items if i}
    groups: list[str] = []
    cuts: list[int] = []
    if only_items is None:
        groups = [BASELINE, *STRATEGIES, *REWRITES, *DEFAULT_COMBOS, SHAPES, TOKENS, FAULTS, STALLS]
        run_cuts = exhaustive if exhaustive is not None else cut_points <= CUT_BUDGET
        if run_cuts:
            cuts = list(range(1, cut_points + 1))
    else:
        for item in only_items:
            if item == CUT or item.startswith(CUT + ":"):
                cuts.extend(
                    c for c in _parse_cut_range(item, cut_points, "--only") if c not in cuts
                )
            else:
                groups.append(_normalise_group(item, "--only", faults, variants, stalls))
    if CUT in skipped:
        cuts = []
    cases: list[Case] = []
    seen: set[str] = set()
    wanted_faults: list[str] = []
    wanted_stalls: list[str] = []
    for group in groups:
        if group in seen or group in skipped:
            continue
        seen.add(group)
        if group == STALLS or group.startswith(STALLS + ":"):
            kinds = stalls if group == STALLS else [group.split(":", 1)[1]]
            wanted_stalls += [
                k for k in kinds if k not in wanted_stalls and f"{STALLS}:{k}" not in skipped
            ]
            continue
        if group == FAULTS or group.startswith(FAULTS + ":"):
            kinds = faults if group == FAULTS else [group.split(":", 1)[1]]
            wanted_faults += [
                k for k in kinds if k not in wanted_faults and f"{FAULTS}:{k}" not in skipped
            ]
            continue
        kind, _, one = group.partition(":")
        if kind in (SHAPES, TOKENS):
            names = [one] if one else [v for v in variants if group_of(v) == kind]
            for name in names:
                row = f"{kind}:{name}"
                if row in skipped or (row != group and row in seen):
                    continue
                seen.add(row)
                chosen = seeds if name in SEEDED else seeds[:1]
                cases.extend(Case(kind, name, seed) for seed in chosen)
            continue
        strategy = None if group == BASELINE else group
        cases.extend(Case(group, strategy, seed) for seed in seeds)
    cases.extend(Case(FAULTS, None, 1, fault=kind) for kind in wanted_faults)
    cases.extend(Case(STALLS, None, 1, fault=kind) for kind in wanted_stalls)
    cases.extend(Case(CUT, None, 0, c) for c in sorted(cuts))
    if not cases:
        raise UsageError("nothing selected to run (check --only and --skip)")
    return cases
