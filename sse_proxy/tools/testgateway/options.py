"""What `sse-proxy test-gateway` was asked to do."""

from __future__ import annotations

from dataclasses import dataclass

from sse_proxy.tools.testclient.plan import default_jobs
from sse_proxy.tools.testclient.severity import LEVELS

__all__ = ["GatewayOptions"]


@dataclass(frozen=True, slots=True)
class GatewayOptions:
    """Everything `sse-proxy test-gateway` was asked to do."""

    command: tuple[str, ...]
    dialect: str = "openai"
    headers: tuple[str, ...] = ()
    """``Name: value`` lines added to every request, ``{upstream}`` replaced."""
    path: str | None = None
    """The gateway's path for the dialect (default: the API's own, e.g. /v1/messages)."""
    model: str | None = None
    only: tuple[str, ...] | None = None
    skip: tuple[str, ...] = ()
    seeds: int = 1
    seed: int | None = None
    exhaustive: bool = False
    timeout: float = 30.0
    """Seconds per case."""
    ready_timeout: float = 120.0
    ready_path: str | None = None
    jobs: int | None = None
    case_key: str = "auto"
    pace_ms: float = 1.0
    """Pause between the upstream's writes in the baseline, so its output has gaps to
    compare (0: none)."""
    usage: bool = True
    """OpenAI Chat: ask for usage (``stream_options.include_usage``), as most apps do."""
    tools: bool = False
    chaos_k: int = 3
    report: str | None = None
    junit: str | None = None
    html: str | None = None
    gateway_log: str | None = None
    fail_on: tuple[str, ...] = LEVELS
    verbose: bool = False

    @property
    def parallel(self) -> int:
        return self.jobs if self.jobs is not None else default_jobs()
