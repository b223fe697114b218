"""The `sse-proxy` command line. Errors are one clear line on stderr and exit status 2."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from sse_proxy import __version__
from sse_proxy.cli_serve import FILE, add_serve, finite_float, run_serve
from sse_proxy.cli_tools import TOOL_COMMANDS, add_tools, run_tool
from sse_proxy.core.dialects.registry import DIALECTS, TEXT_DIALECTS
from sse_proxy.errors import ProxyError, UsageError
from sse_proxy.names import MOCK_RESUME_HEADERS, MOCK_TIME_HEADERS, MODES
from sse_proxy.rechunk.timefaults import DEFAULT_TIMING
from sse_proxy.rechunk.timefaults import SETTINGS as TIME_SETTINGS
from sse_proxy.settings import LOG_FORMATS
from sse_proxy.tools.fixtures.faults import (
    DROPPED,
    ENDINGS,
    KINDS,
    MOCK_LEGACY_NAMES,
    TEST_CLIENT_LEGACY_NAMES,
    TIMED,
    names_help,
)
from sse_proxy.tools.fixtures.resume import DEFAULT_RESUME, RESUME_SETTINGS
from sse_proxy.tools.testgateway.command import add_test_gateway

__all__ = ["build_parser", "main"]

EXIT_OK, EXIT_ALERT, EXIT_USAGE = 0, 1, 2
_DIALECT_NAMES = "|".join(["auto", *DIALECTS])


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line, not a usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def port_number(text: str) -> int:
    """A TCP port flag: 0..65535 (0: any free port)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be 0..65535 (0: any free port), not {value}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value}")
    return value


_LOG_FORMAT = (
    "auto (default): human lines on a terminal, JSON lines on a file or pipe; json; console"
)


def _complete(action: argparse.Action, kind: dict[str, str]) -> None:
    action.complete = kind  # type: ignore[attr-defined]


def _mock_description() -> str:
    """The mock upstream's faults up front, one line each (from the one fault vocabulary)."""
    width = max(map(len, KINDS))
    faults = "\n".join(f"  {k:<{width}}  {f.description}" for k, f in KINDS.items())
    older = ", ".join(f"{old} = {new}" for old, new in MOCK_LEGACY_NAMES.items())
    return (
        "The built-in mock LLM upstream: OpenAI Chat, OpenAI Responses, Anthropic, Gemini\n"
        "and raw-text streaming endpoints, clean or with a fault that triggers an alert.\n"
        "Raw text resumes after Last-Event-ID; OpenAI Responses in background mode with\n"
        "GET /v1/responses/{id}?stream=true&starting_after=N (the drops make clients resume).\n\n"
        f"fault kinds (--fault KIND, header X-Mock-Fault: KIND, or ?fault=KIND):\n{faults}"
        + (f"\n  (older names still taken: {older})" if older else "")
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sse-proxy",
        description="Reassemble, validate and re-chunk Server-Sent Events streams.",
        epilog="`sse-proxy COMMAND --help` for each command's options; "
        "`sse-proxy completion SHELL` for shell completion (bash, zsh, fish, ...).",
    )
    parser.add_argument("-V", "--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--log-format", choices=LOG_FORMATS, default=None, help=_LOG_FORMAT)
    # The same option after the command (`check --log-format json FILE`); SUPPRESS keeps
    # a value given before the command when it is not repeated after it.
    common = _Parser(add_help=False)
    common.add_argument(
        "--log-format", choices=LOG_FORMATS, default=argparse.SUPPRESS, help=_LOG_FORMAT
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    check = sub.add_parser(
        "check", parents=[common], help="validate a captured raw event stream offline"
    )
    _complete(
        check.add_argument(
            "file", nargs="?", default="-", help="capture file or .ssrec recording; - for stdin"
        ),
        FILE,
    )
    check.add_argument("--text", action="store_true", help="print only the reassembled text")
    check.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="print nothing for a clean stream: no events, no summary; a stream with "
        "warnings still gets its alerts and summary on stderr (the exit status says which)",
    )
    check.add_argument(
        "--dialect",
        default=None,
        help=f"{_DIALECT_NAMES} (default: auto)",
    )
    check.add_argument("--max-line", type=_positive_int, default=None, help="line limit, bytes")
    check.add_argument("--max-frame", type=_positive_int, default=None, help="frame limit, bytes")
    check.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")

    add_serve(sub, common)

    demo = sub.add_parser(
        "demo", parents=[common], help="zero-setup showcase on a built-in mock upstream"
    )
    demo.add_argument("--mode", choices=MODES, default="passthrough")

    mock = sub.add_parser(
        "mock-upstream",
        parents=[common],
        help="run the built-in mock LLM upstream alone",
        description=_mock_description(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mock.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    mock.add_argument("--port", type=port_number, default=None, help="listen port (default 8788)")
    mock.add_argument(
        "--fault",
        default=None,
        metavar="KIND",
        help="serve every stream with this fault (listed above; default none); per "
        "request: header X-Mock-Fault or ?fault=KIND",
    )
    mock.add_argument(
        "--seed", type=int, default=0, help="seed of the random write boundaries (default 0)"
    )
    mock.add_argument(
        "--delay",
        type=finite_float,
        default=0.0,
        metavar="SECONDS",
        help="pause between writes, in seconds (default 0)",
    )
    mock.add_argument(
        "--first-text", action="store_true", help="the OpenAI Chat role chunk carries text"
    )
    mock.add_argument(
        "--tools", action="store_true", help="every stream ends with the fixture's three tool calls"
    )
    mock.add_argument(
        "--mcp",
        default=None,
        metavar="OPTIONS",
        help="the MCP server's tool-call streams, as name=value pairs: priming=on|off, "
        "ids=on|off, retry=MS|off (default: all three for a client of 2025-11-25, none for "
        "2026-07-28 or older ones), era=dual|legacy (legacy: server/discover gets a 400, "
        "so a probing client falls back to initialize); per request: header X-Mock-Mcp or "
        "?mcp=...",
    )
    for setting in TIME_SETTINGS.values():  # the faults in time's durations
        mock.add_argument(
            "--" + setting.name.replace("_", "-"),
            metavar="N",
            help=f"{setting.help}, in {setting.unit} (default "
            f"{getattr(DEFAULT_TIMING, setting.name):g}); per request: header "
            f"{MOCK_TIME_HEADERS[setting.name]} or ?{setting.name}=N",
        )
    mock.add_argument(
        "--resumable",
        action="store_true",
        help="every raw text stream is resumable (ids, retry, Last-Event-ID, 204 after the "
        "end), not only those that resume or drop; per request: X-Mock-Resumable: 1 or "
        "?resumable=1",
    )
    for setting in RESUME_SETTINGS.values():  # the resumable streams' own
        mock.add_argument(
            "--" + setting.name.replace("_", "-"),
            metavar="SECONDS",
            help=f"{setting.help}, in {setting.unit} (default "
            f"{getattr(DEFAULT_RESUME, setting.name):g}); per request: header "
            f"{MOCK_RESUME_HEADERS[setting.name]} or ?{setting.name}=N",
        )

    replay = sub.add_parser(
        "replay", parents=[common], help="serve a recording (serve --record) as an upstream"
    )
    _complete(
        replay.add_argument("file", help="a .ssrec recording made with `serve --record DIR`"),
        FILE,
    )
    replay.add_argument("--host", default="127.0.0.1", help="listen address")
    replay.add_argument("--port", type=port_number, default=8788, help="listen port (0: any free)")
    replay.add_argument("--chaos", metavar="STRATEGY", help="re-chunk, e.g. utf8 or random+crlf")
    replay.add_argument("--seed", type=int, help="chaos seed (default: a fresh one, printed)")
    pace = replay.add_mutually_exclusive_group()
    pace.add_argument(
        "--speed", type=finite_float, default=1.0, help="timing factor (2 = twice as fast)"
    )
    pace.add_argument(
        "--no-timing", action="store_true", help="write the reads back to back, no pauses"
    )

    expected = sub.add_parser(
        "expected-text",
        help="print the fixture's exact expected text (for test suites in any language)",
        description="Print the exact text a correct client prints for the built-in mock's "
        "stream of DIALECT, and nothing else (no newline added).",
    )
    expected.add_argument("--dialect", default="openai", choices=TEXT_DIALECTS)

    tc = sub.add_parser(
        "test-client",
        parents=[common],
        help="run CMD against chaos streams and diagnose its SSE bugs",
        description="Run CMD (after --) once per chaos strategy, rewrite, seed and cut; "
        "compare what it prints with the expected text; diagnose each failure.",
    )
    tc.add_argument(
        "--dialect",
        default="openai",
        choices=TEXT_DIALECTS,
        help="the API CMD streams from (default: openai); mcp: CMD is an MCP client that "
        "calls the tool $SSE_PROXY_MCP_TOOL with the JSON arguments $SSE_PROXY_MCP_ARGS at "
        "$SSE_PROXY_STREAM_URL and prints the result's text",
    )
    tc.add_argument("--fixture", metavar="FILE", help="serve a recording (.ssrec) or a raw capture")
    tc.add_argument(
        "--browser",
        metavar="chromium|firefox",
        help="test browser code instead of CMD: --script FILE.js in this headless browser",
    )
    tc.add_argument(
        "--script",
        metavar="FILE.js",
        help="with --browser: an ES module whose default export gets {url, body, headers, "
        "dialect} and resolves to the streamed text",
    )
    tc.add_argument(
        "--only",
        metavar="GROUP[,..]",
        help="strategies, combos, baseline, faults, faults:KIND, stalls, stalls:KIND, resume, "
        f"resume:KIND (with --resume), cut, cut:N, cut:A-B; fault kinds: "
        f"{names_help(ENDINGS, TEST_CLIENT_LEGACY_NAMES)}; stalls: {', '.join(TIMED)}; "
        f"drops: {', '.join(DROPPED)}",
    )
    tc.add_argument("--skip", metavar="GROUP[,..]", help="groups not to run, e.g. dataless,faults")
    tc.add_argument(
        "--keep-going", action="store_true", help="run every case even when the baseline fails"
    )
    tc.add_argument("--seeds", type=_positive_int, default=3, help="seeds per strategy")
    tc.add_argument("--seed", type=int, help="run this one seed only")
    tc.add_argument(
        "--exhaustive",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="every two-way cut of the short fixture (default: when it is short)",
    )
    tc.add_argument("--timeout", type=finite_float, default=20.0, help="seconds per case")
    tc.add_argument(
        "--patience",
        type=finite_float,
        default=None,
        metavar="SECONDS",
        help="stalls: seconds from a stall's start in which CMD must report it (exit != 0), "
        "or exit with the whole answer after a linger; given, a drip without a whole-answer "
        "deadline within it fails too (default 5, the drip then information only); resume: "
        "seconds from the case's last request (and the retry delay) in which CMD must go on",
    )
    tc.add_argument(
        "--resume",
        action="store_true",
        help="CMD is written to resume a stream (its API lets it): run the resume group, drops "
        "mid-stream it must resume (--dialect text: by Last-Event-ID, as EventSource does; "
        "responses: background mode, GET /v1/responses/{id}?stream=true&starting_after=N; "
        "mcp: the tool call's stream, resumed by GET with Last-Event-ID in 2025-11-25, the "
        "call re-issued under a new id in 2026-07-28)",
    )
    tc.add_argument(
        "--jobs", type=_positive_int, default=None, help="cases in parallel (default: per core)"
    )
    tc.add_argument("--chaos-k", type=int, default=3, help="random cuts per upstream chunk")
    tc.add_argument(
        "--delay-ms",
        type=finite_float,
        default=0.0,
        help="chaos jitter before each cut-bearing write",
    )
    tc.add_argument("--report", metavar="FILE", help="write a JSON report")
    tc.add_argument("--junit", metavar="FILE", help="write JUnit XML")
    tc.add_argument("--html", metavar="FILE", help="write a self-contained HTML report")
    tc.add_argument("--proxy-log", metavar="FILE", help="append the proxies' JSON logs here")
    tc.add_argument(
        "--tools",
        action="store_true",
        help="serve the tool-call fixture: CMD prints the text, then a 'tool_call NAME ARGS' "
        "line per call",
    )
    tc.add_argument(
        "--fail-on",
        metavar="real|spec|both",
        default="both",
        help="which failures make the exit non-zero: those of streams real providers send, "
        "those only the spec allows, or both (default)",
    )
    tc.add_argument(
        "--all-shapes",
        action="store_true",
        help="serve every shape variant, also those CMD's request does not make possible "
        "(choices_n2 without n > 1, the tool-call ones without tools...): hardening, each "
        "such case marked forced (default: they are reported not applicable)",
    )
    tc.add_argument(
        "--verbose",
        action="store_true",
        help="the long report: every failing group, the by-hand command, the diff",
    )
    tc.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")

    add_test_gateway(sub, common)
    add_tools(sub, common)  # diagnose, js-helper

    health = sub.add_parser(
        "health",
        help="ask a running proxy whether it is healthy (exit 0) or not (exit 1)",
        description="GET <admin prefix>/health of the proxy that the same settings "
        "describe (--config, else $SSE_PROXY_CONFIG; SSE_PROXY_PORT, SSE_PROXY_ADMIN_PORT, "
        "SSE_PROXY_ADMIN_PREFIX ...), on loopback when it listens on every interface: a "
        "container's HEALTHCHECK.",
    )
    _complete(
        health.add_argument(
            "--config", metavar="FILE", help="TOML config file (default $SSE_PROXY_CONFIG)"
        ),
        FILE,
    )
    health.add_argument("--url", help="ask this base URL instead, e.g. http://127.0.0.1:8787")
    health.add_argument(
        "--timeout", type=finite_float, default=3.0, help="seconds to wait (default 3)"
    )

    completion = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description="Print a completion script for SHELL (made by shtab from this parser). "
        'bash: eval "$(sse-proxy completion bash)" in ~/.bashrc; zsh: sse-proxy completion '
        "zsh > ~/.zfunc/_sse-proxy, with ~/.zfunc on fpath before compinit; fish: sse-proxy "
        "completion fish > ~/.config/fish/completions/sse-proxy.fish.",
    )
    completion.add_argument("shell", choices=("bash", "zsh", "fish", "tcsh", "powershell"))
    return parser


def _run(args: argparse.Namespace) -> int:
    from sse_proxy.obs.logs import configure_logging

    log_format = args.log_format or os.environ.get("SSE_PROXY_LOG_FORMAT", "auto")
    if log_format not in LOG_FORMATS:
        log_format = "auto"
    quiet = getattr(args, "quiet", False)  # check --quiet: a clean stream logs nothing
    configure_logging(fmt=log_format, level="warning" if quiet else "info")
    if args.command == "check":
        from sse_proxy.core import Limits
        from sse_proxy.tools.check import run_check

        limits = Limits(
            **{
                k: v
                for k, v in (("max_line", args.max_line), ("max_frame", args.max_frame))
                if v is not None
            }
        )
        return run_check(
            args.file,
            text=args.text,
            dialect=args.dialect,
            limits=limits,
            html=args.html,
            quiet=args.quiet,
        )
    if args.command == "serve":
        return run_serve(args)
    if args.command == "demo":
        from sse_proxy.tools.demo import run_demo

        return run_demo(mode=args.mode)
    if args.command == "mock-upstream":
        from sse_proxy.tools.mock_upstream import DEFAULT_PORT, run_mock_upstream

        port = DEFAULT_PORT if args.port is None else args.port
        return run_mock_upstream(
            args.host,
            port,
            args.fault,
            args.seed,
            chunk_delay=args.delay,
            first_text=args.first_text,
            tools=args.tools,
            timing={n: v for n in TIME_SETTINGS if (v := getattr(args, n)) is not None},
            mcp=args.mcp,
            resume={n: v for n in RESUME_SETTINGS if (v := getattr(args, n)) is not None},
            resumable=args.resumable,
        )
    if args.command == "replay":
        from sse_proxy.tools.replay import run_replay

        return run_replay(
            args.file,
            host=args.host,
            port=args.port,
            chaos=args.chaos,
            seed=args.seed,
            timing=not args.no_timing,
            speed=args.speed,
        )
    if args.command == "test-client":
        return _test_client(args)
    if args.command == "test-gateway":
        from sse_proxy.tools.testgateway.command import test_gateway_from_args

        return test_gateway_from_args(args)
    if args.command in TOOL_COMMANDS:
        return run_tool(args)
    if args.command == "health":
        from sse_proxy.tools.health import run_health

        return run_health(config=args.config, url=args.url, timeout=args.timeout)
    if args.command == "completion":
        import shtab

        print(shtab.complete(build_parser(), shell=args.shell), end="")
        return EXIT_OK
    if args.command == "expected-text":
        from sse_proxy.tools import fixtures

        sys.stdout.buffer.write(fixtures.expected_text(args.dialect).encode("utf-8"))
        sys.stdout.flush()
        return EXIT_OK
    raise AssertionError(args.command)  # pragma: no cover - argparse rejects the rest


def _test_client(args: argparse.Namespace) -> int:
    from sse_proxy.tools.testclient.harness import HarnessOptions, run_test_client

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    only = tuple(args.only.split(",")) if args.only is not None else None
    options = HarnessOptions(
        command=tuple(cmd),
        dialect=args.dialect,
        fixture=args.fixture,
        only=only,
        skip=tuple(args.skip.split(",")) if args.skip else (),
        keep_going=args.keep_going,
        seeds=args.seeds,
        seed=args.seed,
        exhaustive=args.exhaustive,
        timeout=args.timeout,
        jobs=args.jobs,
        report=args.report,
        junit=args.junit,
        chaos_k=args.chaos_k,
        delay_ms=args.delay_ms,
        proxy_log=args.proxy_log,
        html=args.html,
        tools=args.tools,
        fail_on=_fail_on(args.fail_on),
        verbose=args.verbose,
        browser=args.browser,
        script=args.script,
        all_shapes=args.all_shapes,
        patience=args.patience,
        resume=args.resume,
    )
    return run_test_client(options)


def _fail_on(value: str) -> tuple[str, ...]:
    from sse_proxy.tools.testclient.severity import parse_fail_on

    try:
        return parse_fail_on([value])
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except ProxyError as exc:
        print(f"sse-proxy: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`| head`); quiet exit, stdout may be unusable now.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
