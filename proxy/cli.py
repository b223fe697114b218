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
    return parser


def _run(args: argparse.Namespace) -> int:
    from proxy.logsink import configure_logging

    log_format = args.log_format or os.environ.get("SSE_PROXY_LOG_FORMAT", "json")
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
