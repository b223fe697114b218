"""`sse-proxy test-gateway`'s options (argparse) and its entry point, kept out of cli.py."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

from sse_proxy.errors import UsageError

if TYPE_CHECKING:
    from sse_proxy.tools.testgateway.options import GatewayOptions

__all__ = [
    "KEY_CHANNELS",
    "add_test_gateway",
    "run_test_gateway",
    "test_gateway_from_args",
]

# Spelled here, not imported from the router: cli.py builds this parser at every start,
# which must not import the harness (test-client's planner, the fixtures) for it.
KEY_CHANNELS: Final = ("auto", "header", "model", "order")

_DESCRIPTION = """\
Start the mock upstream, then CMD (after --) with SSE_PROXY_UPSTREAM_URL and
SSE_PROXY_GATEWAY_PORT in its environment and {upstream} / {port} replaced in its arguments;
wait until it listens; stream every test-client case through it as a correct client, and
say per case what the gateway changed: the text, tool calls, finish reasons, usage
(dropped, invented), the ending (a cut stream made to look whole), error events (reworded,
swallowed), the dialect's shape rules, and the delivery (held back, slow first chunk)."""


def add_test_gateway(sub: Any, common: argparse.ArgumentParser) -> None:
    """The ``test-gateway`` sub-command."""
    p = sub.add_parser(
        "test-gateway",
        parents=[common],
        help="stream every test-client case through a gateway (CMD) and say what it changed",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--dialect",
        default="openai",
        metavar="API",
        help="the API the client speaks: openai (Chat Completions, the default), responses "
        "or anthropic (Messages)",
    )
    p.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="add to every request ({upstream} replaced); repeatable",
    )
    p.add_argument("--path", help="the gateway's endpoint (default: the API's, /v1/...)")
    p.add_argument("--model", help="the model name the client asks for")
    p.add_argument(
        "--ready-path",
        metavar="PATH",
        help="after the port opens, wait until GET PATH answers 200 (e.g. /health/readiness)",
    )
    p.add_argument(
        "--ready-timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="how long the gateway may take to get ready (default 120)",
    )
    p.add_argument(
        "--case-key",
        choices=KEY_CHANNELS,
        default="auto",
        help="how a request names its case to the upstream: the X-Gateway-Case header, "
        "a suffix of the model name, or the order of the cases (one at a time); auto "
        "(default) finds the first that reaches the upstream",
    )
    p.add_argument(
        "--only",
        metavar="GROUP[,..]",
        help="test-client's groups: strategies, combos, baseline, shapes, tokens, faults, "
        "faults:KIND, cut:N (as test-client --only)",
    )
    p.add_argument("--skip", metavar="GROUP[,..]", help="groups not to run")
    p.add_argument("--seeds", type=int, default=1, help="seeds per strategy (default 1)")
    p.add_argument("--seed", type=int, help="run this one seed only")
    p.add_argument(
        "--exhaustive", action="store_true", help="also every two-way cut of the short fixture"
    )
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per case (default 30)")
    p.add_argument("--jobs", type=int, default=None, help="cases in parallel (default: per core)")
    p.add_argument(
        "--pace-ms",
        type=float,
        default=1.0,
        help="pause between the upstream's writes in the baseline, so the delivery through "
        "the gateway has gaps to compare (default 1; 0: none)",
    )
    p.add_argument(
        "--usage",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="OpenAI Chat: ask for usage (stream_options.include_usage; default yes)",
    )
    p.add_argument(
        "--tools", action="store_true", help="the tool-call fixture: the answer, then two calls"
    )
    p.add_argument("--report", metavar="FILE", help="write a JSON report")
    p.add_argument("--junit", metavar="FILE", help="write JUnit XML")
    p.add_argument("--html", metavar="FILE", help="write a self-contained HTML report")
    p.add_argument("--gateway-log", metavar="FILE", help="keep the gateway's output here")
    p.add_argument(
        "--fail-on",
        metavar="real|spec|both",
        default="both",
        help="which failures make the exit non-zero (as test-client's)",
    )
    p.add_argument("--verbose", action="store_true", help="every case's changes too")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS... (the gateway)")


def test_gateway_from_args(args: argparse.Namespace) -> int:
    from sse_proxy.tools.testclient.severity import parse_fail_on
    from sse_proxy.tools.testgateway.options import GatewayOptions

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    try:
        fail_on = parse_fail_on([args.fail_on])
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    options = GatewayOptions(
        command=tuple(cmd),
        dialect=args.dialect,
        headers=tuple(args.header),
        path=args.path,
        model=args.model,
        only=tuple(args.only.split(",")) if args.only is not None else None,
        skip=tuple(args.skip.split(",")) if args.skip else (),
        seeds=args.seeds,
        seed=args.seed,
        exhaustive=args.exhaustive,
        timeout=args.timeout,
        ready_timeout=args.ready_timeout,
        ready_path=args.ready_path,
        jobs=args.jobs,
        case_key=args.case_key,
        pace_ms=args.pace_ms,
        usage=args.usage,
        tools=args.tools,
        report=args.report,
        junit=args.junit,
        html=args.html,
        gateway_log=args.gateway_log,
        fail_on=fail_on,
        verbose=args.verbose,
    )
    return run_test_gateway(options)


def _validate(options: GatewayOptions) -> None:
    from sse_proxy.tools.testgateway.meaning import DIALECTS

    if options.dialect not in DIALECTS:
        raise UsageError(f"--dialect must be one of {', '.join(DIALECTS)}, not {options.dialect!r}")
    if not options.command:
        raise UsageError("test-gateway needs the gateway's command: sse-proxy test-gateway -- CMD")
    exe = options.command[0]
    if os.sep not in exe and shutil.which(exe) is None:
        raise UsageError(f"command not found: {exe!r}")
    if os.sep in exe and not os.access(exe, os.X_OK):
        raise UsageError(f"command not found or not executable: {exe!r}")
    if options.seeds < 1:
        raise UsageError("--seeds must be at least 1")
    if options.seed is not None and options.seed < 0:
        raise UsageError("--seed must be a non-negative integer")
    if options.jobs is not None and options.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    for flag, value in (
        ("--timeout", options.timeout),
        ("--ready-timeout", options.ready_timeout),
    ):
        if not value > 0:
            raise UsageError(f"{flag} must be a positive number of seconds")
    if options.pace_ms < 0:
        raise UsageError("--pace-ms must not be negative")
    if options.path is not None and not options.path.startswith("/"):
        raise UsageError(f"--path must start with /, not {options.path!r}")
    for header in options.headers:
        name, sep, _ = header.partition(":")
        if not sep or not name.strip() or " " in name.strip():
            raise UsageError(f"--header: expected 'Name: value', got {header!r}")
    for flag, path in (
        ("--report", options.report),
        ("--junit", options.junit),
        ("--html", options.html),
        ("--gateway-log", options.gateway_log),
    ):
        if path is not None and not Path(path).resolve().parent.is_dir():
            raise UsageError(f"{flag}: no such directory for {path!r}")


def _write(path: str, text: str) -> None:
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path!r}: {exc.strerror or exc}") from None


def run_test_gateway(options: GatewayOptions, out: IO[str] | None = None) -> int:
    """Run every case through the gateway; print the report. 0: all passed, 1: any failed."""
    import asyncio

    from sse_proxy.obs.logs import configure_logging
    from sse_proxy.tools.testgateway.report import (
        exit_passed,
        render_text,
        report_json,
        report_junit,
        write_html,
    )
    from sse_proxy.tools.testgateway.run import run_gateway

    _validate(options)
    with open(os.devnull, "w") as devnull:  # the case proxies' own logs: not the report's
        configure_logging(fmt="json", stream=devnull, level="error")
        run = asyncio.run(run_gateway(options))
    stream = out if out is not None else sys.stdout
    stream.write(render_text(options, run))
    stream.flush()
    if options.report:
        _write(
            options.report,
            json.dumps(report_json(options, run), ensure_ascii=False, indent=2) + "\n",
        )
    if options.junit:
        tree = report_junit(options, run)
        try:
            tree.write(options.junit, encoding="utf-8", xml_declaration=True)
        except OSError as exc:
            raise UsageError(f"cannot write {options.junit!r}: {exc.strerror or exc}") from None
    if options.html:
        write_html(options, run, options.html)
    return 0 if exit_passed(options, run) else 1
