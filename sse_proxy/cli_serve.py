"""`sse-proxy serve`: its flags (each with its unit and default) and how they become a Config.

Every flag is also ``SSE_PROXY_<NAME>`` in the environment and ``<name>`` in the config
file; a flag left out is ``None`` here, so the lower sources decide (see
:mod:`sse_proxy.config`). The defaults quoted in the help come from
:class:`~sse_proxy.settings.Config` itself, so they cannot drift.
"""

from __future__ import annotations

import argparse
import math
import os
from typing import Any

from sse_proxy.core.dialects.registry import DIALECTS
from sse_proxy.names import MODES
from sse_proxy.rechunk.spec import REWRITES, STRATEGIES, VARIANTS
from sse_proxy.rechunk.timefaults import CHAOS_FAULTS, SETTINGS
from sse_proxy.settings import LOG_LEVELS, LOOPS, RECORD_ON, Config

__all__ = [
    "DIRECTORY",
    "FILE",
    "SERVE_EPILOG",
    "SERVE_FLAGS",
    "add_serve",
    "finite_float",
    "run_serve",
]

# shtab's completion actions for paths (shtab.FILE and shtab.DIRECTORY), spelled out so the
# parser does not import shtab unless `sse-proxy completion` runs; a test compares them.
FILE = {
    "bash": "_shtab_compgen_files",
    "zsh": "_files",
    "tcsh": "f",
    "fish": "(__fish_complete_path (commandline -ct))",
    "powershell": "_shtab_powershell_compgen_files",
}
DIRECTORY = {
    "bash": "_shtab_compgen_dirs",
    "zsh": "_files -/",
    "tcsh": "d",
    "fish": "(__fish_complete_directories)",
    "powershell": "_shtab_powershell_compgen_dirs",
}

SERVE_EPILOG = """\
examples:
  sse-proxy serve --upstream https://api.openai.com
      then, in the app: OPENAI_BASE_URL=http://127.0.0.1:8787/v1 (the start-up line says it)
  sse-proxy serve --upstream https://api.anthropic.com --mode frames
      ANTHROPIC_BASE_URL=http://127.0.0.1:8787; clients get whole SSE frames only
  sse-proxy serve --route /openai=https://api.openai.com/v1 \\
                  --route /anthropic=https://api.anthropic.com
      one sidecar, two APIs: OPENAI_BASE_URL=http://127.0.0.1:8787/openai/v1
  sse-proxy serve --upstream http://127.0.0.1:8788 --chaos utf8 --seed 7
      re-chunk every stream, a cut inside every multi-byte character, reproducibly
  sse-proxy serve --config sse-proxy.toml --ui
      settings from a file; the live inspector at http://127.0.0.1:8787/_sse-proxy/ui
  SSE_PROXY_UPSTREAM=https://api.openai.com sse-proxy serve --workers 2 --log-format json
  sse-proxy serve --upstream https://api.openai.com --admin-port 9787 --strict-end
      health and metrics on port 9787 only (404 on 8787); a stream cut short upstream
      reaches the client as a broken body, so its SDK raises instead of half-answering

Every flag is also SSE_PROXY_<NAME> in the environment and <name> in the config file
(flags > environment > config file > defaults); config/sse-proxy.toml lists them all.
Health: <admin prefix>/health; metrics: <admin prefix>/metrics (prefix /_sse-proxy),
on --port, or with --admin-port N on a listener of their own (and 404 on --port).
"""

SERVE_FLAGS = (
    "upstream",
    "host",
    "port",
    "admin_port",
    "admin_host",
    "allowed_hosts",
    "allow_origins",
    "mode",
    "chaos",
    "seed",
    "chaos_k",
    "delay_ms",
    "chaos_force",
    "chaos_fault",
    "chaos_stall",
    "chaos_keepalive_every",
    "chaos_linger",
    "chaos_drip_rate",
    "chaos_retry_large",
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
    "strict_end",
    "request_head_timeout",
    "keepalive_timeout",
    "log_format",
    "log_level",
    "log_text",
    "record_dir",
    "record_on",
    "record_max_stream_bytes",
    "record_max_files",
    "record_max_bytes",
    "workers",
    "loop",
    "stall_threshold",
    "linger_threshold",
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
"""The serve flags' Config fields, in the order the help lists them."""

_D = Config()


def finite_float(text: str) -> float:
    """A number argparse accepts, minus ``nan`` and ``inf`` (no setting means either)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number: {text!r}")
    return value


def _complete(action: argparse.Action, kind: dict[str, str]) -> None:
    """What shell completion offers for this flag's value (shtab reads ``complete``)."""
    action.complete = kind  # type: ignore[attr-defined]


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n} = {n // size} {unit}"
    return str(n)


def _seconds(name: str, what: str, zero: str = "none") -> str:
    value = getattr(_D, name)
    default = f"{value:g} = {zero}" if value == 0 else f"{value:g}; 0 = {zero}"
    return f"{what}, in seconds (default {default})"


def add_serve(sub: Any, parent: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The `serve` subcommand and its flags."""
    serve: argparse.ArgumentParser = sub.add_parser(
        "serve",
        parents=[parent],
        help="run the reverse proxy in front of an LLM API",
        description="Forward every request to the upstream API and stream the responses back;\n"
        "every text/event-stream response is reassembled and checked on the way (alerts in\n"
        "the log, counts in the metrics).",
        epilog=SERVE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = serve.add_argument
    where = serve.add_argument_group("where requests go")
    where.add_argument(
        "--upstream",
        metavar="URL",
        help="the API base URL, e.g. https://api.openai.com (required unless --route is given)",
    )
    where.add_argument(
        "--route",
        dest="routes",
        action="append",
        metavar="PREFIX=URL",
        help="send requests under PREFIX to URL, prefix stripped (repeatable; with "
        "--upstream, that one catches the rest)",
    )
    where.add_argument(
        "--upstream-header",
        dest="upstream_headers",
        action="append",
        metavar="'NAME: VALUE'",
        help="add or replace a header toward --upstream; ${ENV} and ${file:PATH} are read "
        "at start-up, never logged (repeatable)",
    )
    where.add_argument(
        "--drop-client-auth",
        action="store_true",
        default=None,
        help="drop the client's Authorization/x-api-key/x-goog-api-key headers (default off)",
    )
    where.add_argument(
        "--trust-env",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="use HTTP(S)_PROXY/NO_PROXY from the environment (default on)",
    )
    _complete(
        where.add_argument(
            "--upstream-ca", metavar="FILE", help="extra CA bundle (PEM) to trust (default none)"
        ),
        FILE,
    )
    _complete(
        where.add_argument(
            "--client-cert", metavar="FILE", help="client certificate (PEM) for mutual TLS"
        ),
        FILE,
    )
    _complete(
        where.add_argument(
            "--client-key", metavar="FILE", help="its private key, if not in the certificate file"
        ),
        FILE,
    )
    _complete(
        add(
            "--config",
            metavar="FILE",
            help="TOML config file (see config/sse-proxy.toml; default $SSE_PROXY_CONFIG)",
        ),
        FILE,
    )
    add("--host", metavar="ADDR", help=f"listen address (default {_D.host}: loopback only)")
    add("--port", type=int, metavar="N", help=f"listen port (default {_D.port}; 0 = any free)")
    add(
        "--admin-port",
        type=int,
        metavar="N",
        help="serve health, metrics and the inspector on this port of their own, not on "
        "--port (default: on --port); it stays up through the drain after SIGTERM",
    )
    add(
        "--admin-host",
        metavar="ADDR",
        help="listen address of --admin-port (default: --host's)",
    )
    add(
        "--workers",
        type=int,
        metavar="N",
        help=f"processes sharing the port; one that dies is replaced (default {_D.workers})",
    )
    add("--loop", choices=LOOPS, help="event loop (default auto: uvloop where installed)")
    add(
        "--shutdown-grace",
        type=finite_float,
        metavar="SECONDS",
        help=_seconds(
            "shutdown_grace", "after SIGTERM, how long streams may finish", "cut them at once"
        ),
    )
    door = serve.add_argument_group("the front door (who may call the proxy)")
    door.add_argument(
        "--allowed-host",
        dest="allowed_hosts",
        action="append",
        metavar="NAME",
        help="serve requests for this Host besides the loopback names and addresses "
        "(.domain: it and the names under it; *: any Host); others get 421 (repeatable; "
        "default none)",
    )
    door.add_argument(
        "--allow-origin",
        dest="allow_origins",
        action="append",
        metavar="ORIGIN",
        help="let web pages of this origin call the proxy, e.g. http://localhost:5173; "
        "other pages get 403 (repeatable; default none)",
    )
    door.add_argument(
        "--request-head-timeout",
        type=finite_float,
        metavar="SECONDS",
        help=_seconds("request_head_timeout", "how long a request head may take to arrive"),
    )
    door.add_argument(
        "--keepalive-timeout",
        type=finite_float,
        metavar="SECONDS",
        help=_seconds(
            "keepalive_timeout", "how long an idle client connection is kept", "no keep-alive"
        ),
    )
    modes = serve.add_argument_group("what the client receives")
    modes.add_argument(
        "--mode",
        choices=MODES,
        help="passthrough: bytes as they arrive; frames: whole SSE frames, one write each; "
        f"chaos: re-chunked (default {_D.mode})",
    )
    modes.add_argument(
        "--chaos",
        metavar="STRATEGY",
        help=f"re-chunking: {', '.join(STRATEGIES)}; rewrites: {', '.join(REWRITES)}; "
        f"shape and token variants: {', '.join(VARIANTS)}; joined by + "
        f"(default {_D.chaos}; given alone, implies --mode chaos)",
    )
    modes.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="chaos seed (default: a fresh one per stream, logged and sent back in "
        "X-SSE-Proxy-Chaos-Seed)",
    )
    modes.add_argument(
        "--chaos-k",
        type=int,
        metavar="N",
        help=f"random cuts per upstream read, strategy random (default {_D.chaos_k})",
    )
    modes.add_argument(
        "--delay-ms",
        type=finite_float,
        metavar="MS",
        help=f"jitter before each chaos write, in ms (default {_D.delay_ms:g})",
    )
    modes.add_argument(
        "--chaos-force",
        action="store_true",
        default=None,
        help="serve the shape variants providers send only when a request asks for them "
        "(choices_n2: n > 1, include_usage: stream_options.include_usage, the tool-call "
        "ones: tools, ...) to every request, for hardening (default off: a request that "
        "does not ask gets the stream without them; the header's force=1 does it per "
        "request)",
    )
    modes.add_argument(
        "--chaos-fault",
        choices=("none", *CHAOS_FAULTS),
        metavar="NAME",
        help="a fault in time on every chaos stream: "
        + ", ".join(CHAOS_FAULTS)
        + " (default none; per request: X-SSE-Proxy-Chaos: fault=NAME); a drop cuts the "
        "client off and its reconnect goes to the upstream, which resumes it",
    )
    for setting in SETTINGS.values():
        name = f"chaos_{setting.name}"
        modes.add_argument(
            "--" + name.replace("_", "-"),
            type=finite_float,
            metavar="BPS" if setting.unit != "seconds" else "SECONDS",
            help=f"--chaos-fault: {setting.help}, in {setting.unit} "
            f"(default {getattr(_D, name):g}; per request: {setting.name}=N)",
        )
    modes.add_argument(
        "--strict-end",
        action="store_true",
        default=None,
        help="end a stream that the upstream ended without its terminal marker, mid-frame or "
        "with an error event as a broken body (no final chunk), so the client's HTTP library "
        "raises (default off: such a body ends normally)",
    )
    modes.add_argument(
        "--allow-chaos-header",
        action="store_true",
        default=None,
        help="let clients pick chaos per request with X-SSE-Proxy-Chaos in any mode "
        "(default: only in chaos mode)",
    )
    obs = serve.add_argument_group("observing streams")
    obs.add_argument(
        "--dialect",
        help=f"{'|'.join(['auto', *DIALECTS])} "
        f"(default {_D.dialect}: by request path, then the first event)",
    )
    for flag, name, what in (
        ("--max-line-bytes", "max_line_bytes", "longest SSE line observed"),
        ("--max-frame-bytes", "max_frame_bytes", "largest SSE frame observed"),
        (
            "--max-decompressed-bytes",
            "max_decompressed_bytes",
            "most a compressed body is decompressed to for observing",
        ),
    ):
        obs.add_argument(
            flag,
            type=int,
            metavar="BYTES",
            help=f"{what}, in bytes (default {_bytes(getattr(_D, name))}); past it the "
            "bytes are still forwarded, no longer parsed",
        )
    obs.add_argument(
        "--max-decompressed-ratio",
        type=finite_float,
        metavar="X",
        help="stop observing a compressed body that expands more than X times "
        f"(default {_D.max_decompressed_ratio:g})",
    )
    obs.add_argument(
        "--stall-threshold",
        type=finite_float,
        metavar="SECONDS",
        help=_seconds(
            "stall_threshold",
            "time without text or tool-call progress (comments and pings do not count) that "
            "logs sse.stall",
            "off",
        ),
    )
    obs.add_argument(
        "--linger-threshold",
        type=finite_float,
        metavar="SECONDS",
        help=_seconds(
            "linger_threshold",
            "a body still open this long after its terminal marker logs sse.linger",
            "off",
        ),
    )
    timeouts = serve.add_argument_group("timeouts toward the upstream")
    timeouts.add_argument(
        "--connect-timeout",
        type=finite_float,
        metavar="SECONDS",
        help=_seconds("connect_timeout", "to connect"),
    )
    timeouts.add_argument(
        "--idle-timeout",
        type=finite_float,
        metavar="SECONDS",
        help=_seconds("idle_timeout", "longest gap between two upstream reads"),
    )
    timeouts.add_argument(
        "--total-timeout",
        type=finite_float,
        metavar="SECONDS",
        help=_seconds("total_timeout", "longest whole response"),
    )
    logs = serve.add_argument_group("logs, metrics, traces, recordings")
    logs.add_argument(
        "--log-level", choices=LOG_LEVELS, help=f"the least level logged (default {_D.log_level})"
    )
    logs.add_argument(
        "--log-text",
        action="store_true",
        default=None,
        help="log the reassembled message text (default off: only its length)",
    )
    _complete(
        logs.add_argument(
            "--record",
            dest="record_dir",
            metavar="DIR",
            help="record SSE streams into DIR as .ssrec, each written when it ends (default off)",
        ),
        DIRECTORY,
    )
    logs.add_argument(
        "--record-on",
        choices=RECORD_ON,
        help="write a stream's recording only when it ends this badly or worse: ok (every "
        "stream), degraded (degraded or broken), broken (default ok)",
    )
    logs.add_argument(
        "--record-max-stream-bytes",
        type=int,
        metavar="BYTES",
        help="most of one stream kept in memory for its recording, in bytes; past it its "
        "head and its tail are kept, marked truncated "
        f"(default {_bytes(_D.record_max_stream_bytes)})",
    )
    logs.add_argument(
        "--record-max-files",
        type=int,
        metavar="N",
        help=f"recordings kept in DIR; the oldest go first (default {_D.record_max_files})",
    )
    logs.add_argument(
        "--record-max-bytes",
        type=int,
        metavar="BYTES",
        help="most of DIR the recordings may take, in bytes; the oldest go first "
        f"(default {_bytes(_D.record_max_bytes)})",
    )
    logs.add_argument(
        "--metrics-models",
        metavar="M1,M2",
        help="model label values; others count as other (default: the first "
        f"{_D.metrics_max_models} seen)",
    )
    logs.add_argument(
        "--otlp-endpoint",
        metavar="URL",
        help="export traces and the GenAI streaming metrics over OTLP/HTTP, e.g. "
        "http://127.0.0.1:4318 (needs [otel]; default off)",
    )
    ui = serve.add_argument_group("the live inspector")
    ui.add_argument(
        "--ui",
        action="store_true",
        default=None,
        help="live inspector at <admin prefix>/ui, loopback clients only (default off)",
    )
    ui.add_argument(
        "--ui-text",
        action="store_true",
        default=None,
        help="show message text in the inspector (default off)",
    )
    ui.add_argument(
        "--ui-allow-remote",
        action="store_true",
        default=None,
        help="let non-loopback clients open the inspector (default off)",
    )
    ui.add_argument(
        "--ui-streams",
        type=int,
        metavar="N",
        help=f"streams the inspector keeps, per worker (default {_D.ui_streams})",
    )
    ui.add_argument(
        "--ui-stream-bytes",
        type=int,
        metavar="BYTES",
        help=f"bytes kept per inspected stream (default {_bytes(_D.ui_stream_bytes)})",
    )
    return serve


def run_serve(args: argparse.Namespace) -> int:
    from sse_proxy.config import load_config_with_notes
    from sse_proxy.errors import ConfigError
    from sse_proxy.obs.logs import configure_logging
    from sse_proxy.server.run import serve_forever

    flags = {name: getattr(args, name, None) for name in SERVE_FLAGS}
    cfg, notes = load_config_with_notes(flags=flags, env=os.environ, path=args.config)
    if not cfg.upstream and not cfg.routes:
        raise ConfigError(
            "upstream: required (--upstream URL or --route PREFIX=URL, "
            "SSE_PROXY_UPSTREAM or config file)"
        )
    configure_logging(fmt=cfg.log_format, level=cfg.log_level)
    return serve_forever(cfg, notes=notes)
