"""How to reproduce a case: the `test-client` command that reruns exactly it, and the same
case by hand, as one shell command that works as pasted: the upstream and a proxy with the
case's settings on free ports, a wait until both listen, CMD with every variable the
harness sets (dummy keys included), then both stopped.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from sse_proxy.rechunk.shapes.rewriter import VARIANT_REQUIRES
from sse_proxy.tools.testclient.fixture import Fixture, uses_first_text
from sse_proxy.tools.testclient.plan import BASELINE, FAULTS, STALLS, Case, HarnessOptions
from sse_proxy.tools.testclient.process import free_port
from sse_proxy.tools.testclient.run import DUMMY_KEYS, client_env
from sse_proxy.tools.testclient.shapes import SEEDED, is_variant_group
from sse_proxy.tools.testclient.stalls import DRIP_RATE, STALL_SECONDS, keepalive_every

__all__ = ["by_hand", "rerun_line"]


def _cmd_text(command: Sequence[str]) -> str:
    return shlex.join(command)


def _forces(options: HarnessOptions, case: Case) -> bool:
    """Whether ``--all-shapes`` changes ``case``: a variant that needs what a request may
    not ask for."""
    return (
        options.all_shapes
        and is_variant_group(case.group)
        and VARIANT_REQUIRES.get(case.strategy or "") is not None
    )


def rerun_line(options: HarnessOptions, case: Case) -> str:
    """`sse-proxy test-client` re-running exactly ``case``."""
    parts = ["sse-proxy", "test-client", "--dialect", options.dialect]
    if options.fixture:
        parts += ["--fixture", options.fixture]
    if options.tools:
        parts.append("--tools")
    if _forces(options, case):
        parts.append("--all-shapes")
    if case.cut is not None:
        parts += ["--only", f"cut:{case.cut}"]
    elif case.group == STALLS:
        parts += ["--only", case.name]
        if options.patience is not None:
            parts += ["--patience", f"{options.patience:g}"]
    elif case.fault is not None:
        parts += ["--only", f"{FAULTS}:{case.fault}"]
    elif is_variant_group(case.group):
        parts += ["--only", case.row]
        if case.strategy in SEEDED:
            parts += ["--seed", str(case.seed)]
    else:
        parts += ["--only", case.group, "--seed", str(case.seed)]
    # every option that changes what the client is sent, or how long it may take
    if options.chaos_k != 3:
        parts += ["--chaos-k", str(options.chaos_k)]
    if options.delay_ms:
        parts += ["--delay-ms", f"{options.delay_ms:g}"]
    if options.timeout != 20.0:
        parts += ["--timeout", f"{options.timeout:g}"]
    return f"{_cmd_text(parts)} {_cmd_text(options.subject)}"


def by_hand(
    options: HarnessOptions,
    fixture: Fixture,
    case: Case,
    ports: tuple[int, int] | None = None,
) -> str | None:
    """One shell command that reproduces ``case`` with the real commands, or None.

    Cut and fault cases need the harness's own tiny upstreams, and a browser case the
    harness's page, so they have none; a ``stalls`` case is the mock upstream performing
    the fault (the client's patience is yours to keep). The ports are free when the report
    is written.
    """
    stall = case.group == STALLS
    if case.cut is not None or (case.fault is not None and not stall) or options.browser:
        return None
    up_port, px_port = ports or (free_port(), free_port())
    if fixture.recording is not None and options.fixture:
        up = ["sse-proxy", "replay", options.fixture, "--no-timing", "--port", str(up_port)]
    else:
        up = ["sse-proxy", "mock-upstream", "--port", str(up_port), "--seed", str(case.seed)]
        if uses_first_text(case.strategy):
            up.append("--first-text")
        if options.tools:
            up.append("--tools")
        if stall and case.fault is not None:
            every = keepalive_every(options.stall_patience)
            up += ["--fault", case.fault, "--stall", f"{STALL_SECONDS:g}"]
            up += ["--linger", f"{STALL_SECONDS:g}", "--keepalive-every", f"{every:g}"]
            up += ["--drip-rate", f"{DRIP_RATE:g}"]
    serve = [
        "sse-proxy",
        "serve",
        "--upstream",
        f"http://127.0.0.1:{up_port}",
        "--port",
        str(px_port),
    ]
    if case.group == BASELINE:
        serve += ["--mode", "frames"]
    elif stall:
        pass  # passthrough: the mock performs the fault
    else:
        serve += ["--mode", "chaos", "--chaos", case.strategy or "random", "--seed", str(case.seed)]
        if _forces(options, case):
            serve.append("--chaos-force")
    if options.chaos_k != 3:
        serve += ["--chaos-k", str(options.chaos_k)]
    if options.delay_ms:
        serve += ["--delay-ms", f"{options.delay_ms:g}"]
    env = client_env(f"http://127.0.0.1:{px_port}", fixture, case.name)
    assigns = [f"{k}={shlex.quote(v)}" for k, v in env.items() if k not in DUMMY_KEYS]
    assigns += [f'{k}="${{{k}:-{v}}}"' for k, v in DUMMY_KEYS.items()]
    wait = (  # no shell metacharacters inside the double quotes
        'until python3 -c "import socket; '
        f"[socket.create_connection(('127.0.0.1', p), 1).close() "
        f'for p in ({up_port}, {px_port})]" 2>/dev/null; do sleep 0.1; done'
    )
    return (
        f"{_cmd_text(up)} >/dev/null & up=$!; "
        f"{_cmd_text(serve)} 2>/dev/null & px=$!; "
        f"{wait}; "
        f"{' '.join(assigns)} {_cmd_text(options.command)}; "
        "status=$?; kill $px $up; (exit $status)"
    )
