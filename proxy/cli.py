"""The `sse-proxy` command line. Errors are one clear line on stderr and exit status 2."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from proxy import __version__
from proxy.errors import ProxyError

__all__ = ["build_parser", "main"]

EXIT_OK, EXIT_ALERT, EXIT_USAGE = 0, 1, 2


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
        "--dialect", default=None, help="openai|responses|anthropic|text|none (default: detect)"
    )
    check.add_argument("--max-line", type=_positive_int, default=None, help="line limit, bytes")
    check.add_argument("--max-frame", type=_positive_int, default=None, help="frame limit, bytes")

    serve = sub.add_parser("serve", help="run the reverse proxy in front of an LLM API")
    serve.add_argument("--upstream", help="the API base URL, e.g. https://api.openai.com")
    serve.add_argument("--config", help="TOML config file (see config/sse-proxy.toml)")
    serve.add_argument("--host", help="listen address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="listen port (default 8787)")
    serve.add_argument("--mode", choices=("passthrough", "frames", "chaos"))
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
    serve.add_argument("--dialect", help="auto|openai|responses|anthropic|text|none")
    serve.add_argument("--max-line-bytes", type=int)
    serve.add_argument("--max-frame-bytes", type=int)
    serve.add_argument("--connect-timeout", type=float)
    serve.add_argument("--idle-timeout", type=float)
    serve.add_argument("--total-timeout", type=float)
    serve.add_argument("--shutdown-grace", type=float)
    serve.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    serve.add_argument("--log-text", action="store_true", default=None, help="log message text")
    serve.add_argument("--record", dest="record_dir", metavar="DIR", help="record SSE streams")
    serve.add_argument("--workers", type=int, help="processes sharing the port")

    demo = sub.add_parser("demo", help="zero-setup showcase on a built-in mock upstream")
    demo.add_argument("--mode", choices=("passthrough", "frames", "chaos"), default="passthrough")

    mock = sub.add_parser("mock-upstream", help="run the built-in mock LLM upstream alone")
    mock.add_argument("--host", default="127.0.0.1")
    mock.add_argument("--port", type=int, default=None)
    mock.add_argument("--fault", default=None, help="a fault that triggers an alert")
    mock.add_argument("--seed", type=int, default=0, help="chunking seed")
    mock.add_argument("--delay", type=float, default=0.0, help="seconds between writes")
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
    "connect_timeout",
    "idle_timeout",
    "total_timeout",
    "shutdown_grace",
    "log_format",
    "log_level",
    "log_text",
    "record_dir",
    "workers",
)


def _serve(args: argparse.Namespace) -> int:
    from proxy.config import load_config
    from proxy.errors import ConfigError
    from proxy.logsink import configure_logging
    from proxy.server.run import serve_forever

    flags = {name: getattr(args, name, None) for name in _SERVE_FLAGS}
    cfg = load_config(flags=flags, env=os.environ, path=args.config)
    if not cfg.upstream:
        raise ConfigError("upstream: required (--upstream URL, SSE_PROXY_UPSTREAM or config file)")
    configure_logging(fmt=cfg.log_format, level=cfg.log_level)
    return serve_forever(cfg)


def _run(args: argparse.Namespace) -> int:
    from proxy.logsink import configure_logging

    log_format = args.log_format or os.environ.get("SSE_PROXY_LOG_FORMAT", "json")
    if log_format not in ("json", "console"):
        log_format = "json"
    configure_logging(fmt=log_format)
    if args.command == "check":
        from proxy.check import run_check
        from proxy.core import Limits

        limits = Limits(
            **{
                k: v
                for k, v in (("max_line", args.max_line), ("max_frame", args.max_frame))
                if v is not None
            }
        )
        return run_check(args.file, text=args.text, dialect=args.dialect, limits=limits)
    if args.command == "serve":
        return _serve(args)
    if args.command == "demo":
        from proxy.demo import run_demo

        return run_demo(mode=args.mode)
    if args.command == "mock-upstream":
        from proxy.mock_upstream import DEFAULT_PORT, run_mock_upstream

        port = DEFAULT_PORT if args.port is None else args.port
        return run_mock_upstream(args.host, port, args.fault, args.seed, chunk_delay=args.delay)
    raise AssertionError(args.command)  # pragma: no cover - argparse rejects the rest


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
