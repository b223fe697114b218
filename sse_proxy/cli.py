"""The `sse-proxy` command line. Errors are one clear line on stderr and exit status 2."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from sse_proxy import __version__
from sse_proxy.core.dialects import DIALECTS, TEXT_DIALECTS
from sse_proxy.errors import ProxyError
from sse_proxy.names import MODES
from sse_proxy.tools.fixtures.faults import (
    ENDINGS,
    KINDS,
    MOCK_LEGACY_NAMES,
    TEST_CLIENT_LEGACY_NAMES,
    names_help,
)

__all__ = ["build_parser", "main"]

EXIT_OK, EXIT_ALERT, EXIT_USAGE = 0, 1, 2
_DIALECT_NAMES = "|".join(["auto", *DIALECTS])


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line, not a usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sse-proxy",
        description="Reassemble, validate and re-chunk Server-Sent Events streams.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--log-format", choices=("json", "console"), default=None, help="log rendering"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    check = sub.add_parser("check", help="validate a captured raw event stream offline")
    check.add_argument("file", nargs="?", default="-", help="capture file, or - for stdin")
    check.add_argument("--text", action="store_true", help="print only the reassembled text")
    check.add_argument(
        "--dialect",
        default=None,
        help=f"{_DIALECT_NAMES} (default: auto)",
    )
    check.add_argument("--max-line", type=_positive_int, default=None, help="line limit, bytes")
    check.add_argument("--max-frame", type=_positive_int, default=None, help="frame limit, bytes")
    check.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")

    serve = sub.add_parser("serve", help="run the reverse proxy in front of an LLM API")
    serve.add_argument("--upstream", help="the API base URL, e.g. https://api.openai.com")
    serve.add_argument(
        "--route",
        dest="routes",
        action="append",
        metavar="PREFIX=URL",
        help="send requests under PREFIX to URL, prefix stripped (repeatable)",
    )
    serve.add_argument(
        "--upstream-header",
        dest="upstream_headers",
        action="append",
        metavar="'NAME: VALUE'",
        help="add or replace a header toward --upstream; ${ENV} and ${file:PATH} (repeatable)",
    )
    serve.add_argument(
        "--drop-client-auth",
        action="store_true",
        default=None,
        help="drop the client's Authorization/x-api-key/x-goog-api-key headers",
    )
    serve.add_argument(
        "--trust-env",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="use HTTP(S)_PROXY/NO_PROXY from the environment (default: on)",
    )
    serve.add_argument("--upstream-ca", metavar="FILE", help="extra CA bundle (PEM) to trust")
    serve.add_argument("--client-cert", metavar="FILE", help="client certificate (PEM) for mTLS")
    serve.add_argument("--client-key", metavar="FILE", help="its private key, if not in the cert")
    serve.add_argument("--config", help="TOML config file (see config/sse-proxy.toml)")
    serve.add_argument("--host", help="listen address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="listen port (default 8787)")
    serve.add_argument("--mode", choices=MODES)
    serve.add_argument(
        "--chaos", metavar="STRATEGY", help="chaos strategy, e.g. random or utf8+crlf"
    )
    serve.add_argument("--seed", type=int, help="chaos seed (default: a fresh one per stream)")
    serve.add_argument("--chaos-k", type=int, help="random cuts per upstream chunk")
    serve.add_argument("--delay-ms", type=float, help="chaos jitter before each write, ms")
    serve.add_argument(
        "--allow-chaos-header",
        action="store_true",
        default=None,
        help="let clients pick chaos per request with X-SSE-Proxy-Chaos",
    )
    serve.add_argument("--dialect", help=_DIALECT_NAMES)
    serve.add_argument("--max-line-bytes", type=int)
    serve.add_argument("--max-frame-bytes", type=int)
    serve.add_argument(
        "--max-decompressed-ratio", type=float, help="stop observing a body expanding more"
    )
    serve.add_argument(
        "--max-decompressed-bytes", type=int, help="stop observing a body decompressing to more"
    )
    serve.add_argument("--connect-timeout", type=float)
    serve.add_argument("--idle-timeout", type=float)
    serve.add_argument("--total-timeout", type=float)
    serve.add_argument("--shutdown-grace", type=float)
    serve.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    serve.add_argument(
        "--log-format",
        choices=("json", "console"),
        default=argparse.SUPPRESS,  # keeps a global --log-format given before `serve`
        help="JSON lines (default) or a readable console rendering",
    )
    serve.add_argument("--log-text", action="store_true", default=None, help="log message text")
    serve.add_argument("--record", dest="record_dir", metavar="DIR", help="record SSE streams")
    serve.add_argument("--workers", type=int, help="processes sharing the port")
    serve.add_argument(
        "--loop",
        choices=("auto", "uvloop", "asyncio"),
        help="event loop (default auto: uvloop where installed, else asyncio)",
    )
    serve.add_argument(
        "--stall-threshold", type=float, help="seconds without an event that log sse.stall"
    )
    serve.add_argument(
        "--metrics-models", metavar="M1,M2", help="model label values (others count as other)"
    )
    serve.add_argument(
        "--otlp-endpoint", metavar="URL", help="export traces over OTLP/HTTP (needs [otel])"
    )
    serve.add_argument(
        "--ui", action="store_true", default=None, help="live inspector at <admin prefix>/ui"
    )
    serve.add_argument(
        "--ui-text", action="store_true", default=None, help="show message text in the inspector"
    )
    serve.add_argument(
        "--ui-allow-remote",
        action="store_true",
        default=None,
        help="let non-loopback clients open the inspector",
    )
    serve.add_argument("--ui-streams", type=int, help="streams the inspector keeps")
    serve.add_argument("--ui-stream-bytes", type=int, help="bytes kept per inspected stream")

    demo = sub.add_parser("demo", help="zero-setup showcase on a built-in mock upstream")
    demo.add_argument("--mode", choices=MODES, default="passthrough")

    mock = sub.add_parser("mock-upstream", help="run the built-in mock LLM upstream alone")
    mock.add_argument("--host", default="127.0.0.1")
    mock.add_argument("--port", type=int, default=None)
    mock.add_argument(
        "--fault",
        default=None,
        metavar="KIND",
        help=f"break every stream: none, {names_help(KINDS, MOCK_LEGACY_NAMES)}",
    )
    mock.add_argument("--seed", type=int, default=0, help="chunking seed")
    mock.add_argument("--delay", type=float, default=0.0, help="seconds between writes")
    mock.add_argument(
        "--first-text", action="store_true", help="the OpenAI Chat role chunk carries text"
    )

    replay = sub.add_parser("replay", help="serve a recording (serve --record) as an upstream")
    replay.add_argument("file", help="a .ssrec recording made with `serve --record DIR`")
    replay.add_argument("--host", default="127.0.0.1", help="listen address")
    replay.add_argument("--port", type=int, default=8788, help="listen port (0: any free)")
    replay.add_argument("--chaos", metavar="STRATEGY", help="re-chunk, e.g. utf8 or random+crlf")
    replay.add_argument("--seed", type=int, help="chaos seed (default: a fresh one, printed)")
    pace = replay.add_mutually_exclusive_group()
    pace.add_argument("--speed", type=float, default=1.0, help="timing factor (2 = twice as fast)")
    pace.add_argument(
        "--no-timing", action="store_true", help="write the reads back to back, no pauses"
    )

    tc = sub.add_parser(
        "test-client",
        help="run CMD against chaos streams and diagnose its SSE bugs",
        description="Run CMD (after --) once per chaos strategy, rewrite, seed and cut; "
        "compare what it prints with the expected text; diagnose each failure.",
    )
    tc.add_argument(
        "--dialect",
        default="openai",
        choices=TEXT_DIALECTS,
    )
    tc.add_argument("--fixture", metavar="FILE", help="serve a recording (.ssrec) or a raw capture")
    tc.add_argument(
        "--only",
        metavar="GROUP[,..]",
        help="strategies, combos, baseline, faults, faults:KIND, cut, cut:N, cut:A-B; "
        f"fault kinds: {names_help(ENDINGS, TEST_CLIENT_LEGACY_NAMES)}",
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
    tc.add_argument("--timeout", type=float, default=20.0, help="seconds per case")
    tc.add_argument(
        "--jobs", type=_positive_int, default=None, help="cases in parallel (default: per core)"
    )
    tc.add_argument("--chaos-k", type=int, default=3, help="random cuts per upstream chunk")
    tc.add_argument("--delay-ms", type=float, default=0.0, help="chaos jitter before each write")
    tc.add_argument("--report", metavar="FILE", help="write a JSON report")
    tc.add_argument("--junit", metavar="FILE", help="write JUnit XML")
    tc.add_argument("--html", metavar="FILE", help="write a self-contained HTML report")
    tc.add_argument("--proxy-log", metavar="FILE", help="append the proxies' JSON logs here")
    tc.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    return parser


_SERVE_FLAGS = (
    "upstream",
    "host",
    "port",
    "mode",
    "chaos",
    "seed",
    "chaos_k",
    "delay_ms",
    "allow_chaos_header",
    "dialect",
    "max_line_bytes",
    "max_frame_bytes",
    "max_decompressed_ratio",
    "max_decompressed_bytes",
    "connect_timeout",
    "idle_timeout",
    "total_timeout",
    "shutdown_grace",
    "log_format",
    "log_level",
    "log_text",
    "record_dir",
    "workers",
    "loop",
    "stall_threshold",
    "metrics_models",
    "otlp_endpoint",
    "routes",
    "upstream_headers",
    "drop_client_auth",
    "trust_env",
    "upstream_ca",
    "client_cert",
    "client_key",
    "ui",
    "ui_text",
    "ui_allow_remote",
    "ui_streams",
    "ui_stream_bytes",
)


def _serve(args: argparse.Namespace) -> int:
    from sse_proxy.config import load_config_with_notes
    from sse_proxy.errors import ConfigError
    from sse_proxy.obs.logs import configure_logging
    from sse_proxy.server.run import serve_forever

    flags = {name: getattr(args, name, None) for name in _SERVE_FLAGS}
    cfg, notes = load_config_with_notes(flags=flags, env=os.environ, path=args.config)
    if not cfg.upstream and not cfg.routes:
        raise ConfigError(
            "upstream: required (--upstream URL or --route PREFIX=URL, "
            "SSE_PROXY_UPSTREAM or config file)"
        )
    configure_logging(fmt=cfg.log_format, level=cfg.log_level)
    return serve_forever(cfg, notes=notes)


def _run(args: argparse.Namespace) -> int:
    from sse_proxy.obs.logs import configure_logging

    log_format = args.log_format or os.environ.get("SSE_PROXY_LOG_FORMAT", "auto")
    if log_format not in ("auto", "json", "console"):
        log_format = "auto"
    configure_logging(fmt=log_format)
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
            args.file, text=args.text, dialect=args.dialect, limits=limits, html=args.html
        )
    if args.command == "serve":
        return _serve(args)
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
    raise AssertionError(args.command)  # pragma: no cover - argparse rejects the rest


def _test_client(args: argparse.Namespace) -> int:
    from sse_proxy.tools.testclient import HarnessOptions, run_test_client

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
    )
    return run_test_client(options)


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
