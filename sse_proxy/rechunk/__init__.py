"""Re-chunking and spec-equivalent rewriting of event streams toward the client.

Pure code: bytes, frame ends and a seed in, write boundaries (and, for rewrites, new
bytes) out. No I/O, no clock, no asyncio; the server shell performs the writes.
"""

from __future__ import annotations

from sse_proxy.rechunk.planner import (
    DEFAULT_MAX_HOLD,
    MODES,
    ChaosPlanner,
    FramesPlanner,
    PassthroughPlanner,
    Planner,
    Write,
    make_planner,
)
from sse_proxy.rechunk.rewrites import BOM, apply_rewrites, is_complete_frame, rewrite_frame
from sse_proxy.rechunk.spec import (
    REWRITES,
    STRATEGIES,
    ChaosSpec,
    draw_seed,
    parse_chaos_header,
    parse_strategy_names,
)
from sse_proxy.rechunk.strategies import combined_cut_points, cut_points, split_at

__all__ = [
    "BOM",
    "DEFAULT_MAX_HOLD",
    "MODES",
    "REWRITES",
    "STRATEGIES",
    "ChaosPlanner",
    "ChaosSpec",
    "FramesPlanner",
    "PassthroughPlanner",
    "Planner",
    "Write",
    "apply_rewrites",
    "combined_cut_points",
    "cut_points",
    "draw_seed",
    "is_complete_frame",
    "make_planner",
    "parse_chaos_header",
    "parse_strategy_names",
    "rewrite_frame",
    "split_at",
]
