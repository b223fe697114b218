"""Configuration: defaults, the documented file, precedence, bad values and the CLI's exit 2."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from sse_proxy import cli
from sse_proxy.config import load_config
from sse_proxy.errors import ConfigError
from sse_proxy.settings import Config
from tests.support.cli import ROOT, SSE_PROXY

DOCUMENTED = ROOT / "config" / "sse-proxy.toml"
FIELDS = [f.name for f in dataclasses.fields(Config)]


def _write(tmp_path: Path, text: str, name: str = "c.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_documented_file_equals_the_defaults() -> None:
    """config/sse-proxy.toml loads to exactly Config()'s defaults."""
    assert load_config(path=DOCUMENTED) == Config()


def test_documented_file_lists_every_setting() -> None:
    """Every Config field has a line in the documented file (seed and admin_port commented
    out: unset)."""
    table = tomllib.loads(DOCUMENTED.read_text(encoding="utf-8"))["sse-proxy"]
    text = DOCUMENTED.read_text(encoding="utf-8")
    missing = [name for name in FIELDS if name not in table]
    assert missing == ["admin_port", "seed", "routes"]
    assert "# [routes]" in text
    assert "# seed = " in text
    assert "# admin_port = " in text
    assert set(table) <= set(FIELDS)
    for name, value in table.items():
        if name == "upstream_headers":  # a table in the file, pairs in Config
            assert value == {}
            assert Config().upstream_headers == ()
            continue
        default = getattr(Config(), name)
        if isinstance(value, list):  # a list in the file, a tuple in Config
            default = list(default)
        assert value == default, name


def test_defaults() -> None:
    """The defaults are safe: loopback, passthrough, chaos header off, text not logged."""
    cfg = load_config()
    assert cfg == Config()
    assert cfg.host == "127.0.0.1"
    assert cfg.port == 8787
    assert cfg.mode == "passthrough"
    assert cfg.allow_chaos_header is False
    assert cfg.log_text is False
    assert cfg.log_format == "auto"  # JSON lines unless stderr is a terminal
    assert cfg.admin_prefix == "/_sse-proxy"


@pytest.mark.parametrize(
    ("name", "file_line", "file_value", "env_value", "env_parsed", "flag_value"),
    [
        ("idle_timeout", "1.5", 1.5, "2.5", 2.5, 3.5),
        ("port", "1001", 1001, "1002", 1002, 1003),
        ("mode", '"frames"', "frames", "chaos", "chaos", "passthrough"),
        ("log_text", "true", True, "false", False, True),
        ("seed", "7", 7, "8", 8, 9),
        (
            "upstream",
            '"http://file:1"',
            "http://file:1",
            "http://env:2",
            "http://env:2",
            "https://f:3",
        ),
    ],
)
def test_precedence_flag_env_file_default(
    tmp_path: Path,
    name: str,
    file_line: str,
    file_value: Any,
    env_value: str,
    env_parsed: Any,
    flag_value: Any,
) -> None:
    """A flag beats the environment, which beats the file, which beats the default."""
    path = _write(tmp_path, f"[sse-proxy]\n{name} = {file_line}\n")
    env = {f"SSE_PROXY_{name.upper()}": env_value}
    assert getattr(load_config(flags={name: flag_value}, env=env, path=path), name) == flag_value
    assert getattr(load_config(flags={name: None}, env=env, path=path), name) == env_parsed
    assert getattr(load_config(flags={name: None}, env={}, path=path), name) == file_value
    assert getattr(load_config(flags={name: None}), name) == getattr(Config(), name)


def test_settings_combine_across_sources(tmp_path: Path) -> None:
    """Each setting comes from the highest source that sets it; the rest keep defaults."""
    path = _write(tmp_path, '[sse-proxy]\nmode = "frames"\nport = 1\nlog-level = "debug"\n')
    cfg = load_config(
        flags={"port": 3, "mode": None},
        env={"SSE_PROXY_PORT": "2", "SSE_PROXY_IDLE_TIMEOUT": "60", "HOME": "/x", "PORT": "9"},
        path=path,
    )
    assert (cfg.mode, cfg.port, cfg.idle_timeout, cfg.log_level) == ("frames", 3, 60.0, "debug")
    assert cfg.connect_timeout == Config().connect_timeout


def test_file_without_table_header(tmp_path: Path) -> None:
    """A flat file (no [sse-proxy] table) is read as the settings table itself."""
    path = _write(tmp_path, 'mode = "frames"\nidle_timeout = 5\n')
    cfg = load_config(path=path)
    assert (cfg.mode, cfg.idle_timeout) == ("frames", 5.0)


@pytest.mark.parametrize("value", ["1", "true", "YES", "on", " True "])
def test_env_booleans_true(value: str) -> None:
    """Boolean environment values accept the usual spellings of true."""
    assert load_config(env={"SSE_PROXY_ALLOW_CHAOS_HEADER": value}).allow_chaos_header is True


@pytest.mark.parametrize("value", ["0", "false", "No", "off", ""])
def test_env_booleans_false(value: str) -> None:
    """Boolean environment values accept the usual spellings of false."""
    assert load_config(env={"SSE_PROXY_LOG_TEXT": value}).log_text is False


BAD_FLAGS: list[tuple[dict[str, Any], list[str]]] = [
    ({"port": 70000}, ["port", "0..65535", "70000"]),
    ({"port": -1}, ["port"]),
    ({"port": "eighty"}, ["--port", "integer", "eighty"]),
    ({"port": True}, ["--port", "integer"]),
    ({"mode": "turbo"}, ["mode", "passthrough", "frames", "chaos", "turbo"]),
    ({"upstream": "ftp://example.com"}, ["upstream", "http", "ftp://example.com"]),
    ({"upstream": "http://"}, ["upstream", "host"]),
    ({"upstream": "example.com:8080"}, ["upstream"]),
    ({"upstream": "http://example.com/v1?key=x"}, ["upstream", "query"]),
    ({"upstream": "http://example.com/#frag"}, ["upstream", "fragment"]),
    ({"upstream": "https://user:pw@example.com"}, ["upstream", "credentials"]),
    ({"log_format": "xml"}, ["log_format", "json", "console"]),
    ({"log_level": "trace"}, ["log_level", "debug"]),
    ({"max_frame_bytes": 0}, ["max_frame_bytes", "at least 1"]),
    ({"max_line_bytes": -5}, ["max_line_bytes", "at least 1"]),
    ({"max_request_body_bytes": 0}, ["max_request_body_bytes"]),
    ({"max_alerts_per_kind": 0}, ["max_alerts_per_kind"]),
    ({"max_decompressed_ratio": 0.5}, ["max_decompressed_ratio", "at least 1"]),
    ({"max_decompressed_ratio": "nan"}, ["max_decompressed_ratio", "finite"]),
    ({"idle_timeout": "nan"}, ["--idle-timeout", "idle_timeout", "finite", "nan"]),
    ({"connect_timeout": "NaN"}, ["--connect-timeout", "finite"]),
    ({"total_timeout": "inf"}, ["total_timeout", "finite", "inf"]),
    ({"stall_threshold": "-inf"}, ["stall_threshold", "finite"]),
    ({"delay_ms": "nan"}, ["delay_ms", "finite"]),
    ({"request_head_timeout": "nan"}, ["request_head_timeout", "finite"]),
    ({"keepalive_timeout": -1}, ["keepalive_timeout", "negative"]),
    ({"allowed_hosts": ["evil.example:80"]}, ["--allowed-host", "not a host name"]),
    ({"allowed_hosts": ["http://x"]}, ["allowed_hosts", "no scheme"]),
    ({"allow_origins": ["localhost:5173"]}, ["--allow-origin", "not an origin"]),
    ({"allow_origins": ["http://localhost:5173/app"]}, ["allow_origins", "no path"]),
    ({"max_decompressed_bytes": 0}, ["max_decompressed_bytes", "at least 1"]),
    ({"workers": 0}, ["workers"]),
    ({"idle_timeout": -1}, ["idle_timeout", "negative"]),
    ({"connect_timeout": "soon"}, ["--connect-timeout", "a number", "soon"]),
    ({"total_timeout": -0.5}, ["total_timeout"]),
    ({"shutdown_grace": -1}, ["shutdown_grace"]),
    ({"seed": -1}, ["seed", "non-negative"]),
    ({"seed": 2**63}, ["seed"]),
    ({"seed": "lucky"}, ["--seed", "integer", "lucky"]),
    ({"admin_prefix": "/admin"}, ["admin_prefix", "/_"]),
    ({"admin_prefix": "/_ops/"}, ["admin_prefix"]),
    ({"dialect": "klingon"}, ["dialect", "klingon"]),
    ({"no_such_setting": 1}, ["unknown setting", "no_such_setting"]),
    ({"record_on": "sometimes"}, ["record_on", "ok, degraded, broken", "sometimes"]),
    ({"record_on": "broken"}, ["--record-on", "record_on", "needs record_dir"]),
    ({"record_dir": "r", "record_max_files": 0}, ["record_max_files", "at least 1"]),
    ({"record_max_files": "many"}, ["--record-max-files", "integer", "many"]),
    ({"record_max_bytes": -1}, ["record_max_bytes", "at least 1"]),
    ({"record_max_stream_bytes": 0}, ["record_max_stream_bytes", "at least 1"]),
    (
        {"record_max_stream_bytes": 2048, "record_max_bytes": 1024},
        ["record_max_stream_bytes", "must not exceed record_max_bytes (1024)"],
    ),
]


@pytest.mark.parametrize(("flags", "words"), BAD_FLAGS)
def test_bad_flag_values(flags: dict[str, Any], words: list[str]) -> None:
    """Every bad value raises ConfigError with one line naming the setting and the problem."""
    with pytest.raises(ConfigError) as info:
        load_config(flags=flags)
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message, (word, message)


def test_credentials_never_echoed() -> None:
    """An upstream URL with credentials is refused without repeating the password."""
    with pytest.raises(ConfigError) as info:
        load_config(flags={"upstream": "https://user:hunter2@example.com"})
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"SSE_PROXY_PORT": "80x"}, ["environment SSE_PROXY_PORT", "port", "80x"]),
        ({"SSE_PROXY_LOG_TEXT": "maybe"}, ["SSE_PROXY_LOG_TEXT", "true or false", "maybe"]),
        ({"SSE_PROXY_IDLE_TIMEOUT": "forever"}, ["SSE_PROXY_IDLE_TIMEOUT", "forever"]),
        ({"SSE_PROXY_MODE": "fast"}, ["mode", "fast"]),
        ({"SSE_PROXY_MAX_FRAME_BYTES": "0"}, ["max_frame_bytes"]),
        ({"SSE_PROXY_MAX_DECOMPRESSED_RATIO": "lots"}, ["MAX_DECOMPRESSED_RATIO", "a number"]),
    ],
)
def test_bad_env_values(env: dict[str, str], words: list[str]) -> None:
    """A bad environment value names the variable it came from."""
    with pytest.raises(ConfigError) as info:
        load_config(env=env)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[sse-proxy]\nport = 'x'\n", ["config file", "port", "integer"]),
        ("[sse-proxy]\nport = 1.5\n", ["config file", "port"]),
        ("[sse-proxy]\nidle_timeout = true\n", ["idle_timeout", "a number"]),
        ("[sse-proxy]\nlog_text = 'sometimes'\n", ["log_text", "true or false"]),
        ("[sse-proxy]\nmode = 3\n", ["mode", "a string"]),
        ("[sse-proxy]\ntypo_setting = 1\n", ["unknown setting", "typo_setting"]),
        ("[sse-proxy]\nport = \n", ["not valid TOML"]),
        ("sse-proxy = 3\n", ["must be a table"]),
        ("[sse-proxy]\nmax_frame_bytes = 0\n", ["max_frame_bytes"]),
    ],
)
def test_bad_file_values(tmp_path: Path, text: str, words: list[str]) -> None:
    """A bad config file names the file and the setting."""
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path=path)
    message = str(info.value)
    assert "\n" not in message.rstrip()
    for word in words:
        assert word in message, (word, message)


def test_missing_and_undecodable_files(tmp_path: Path) -> None:
    """A missing or non-UTF-8 config file is a ConfigError naming the path."""
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(path=missing)
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"port = \xff\xfe\n")
    with pytest.raises(ConfigError, match=r"bin\.toml"):
        load_config(path=binary)


def test_config_is_immutable() -> None:
    """Config is frozen: a running proxy's settings cannot be changed under it."""
    cfg = Config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.port = 1  # type: ignore[misc]


# ------------------------------------------------------------------------------ CLI


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SSE_PROXY_")}
    env.update(extra)
    return env


@pytest.mark.parametrize(
    ("args", "env", "word"),
    [
        (["--upstream", "http://127.0.0.1:1", "--port", "70000"], {}, "port"),
        (["--upstream", "ftp://example.com"], {}, "upstream"),
        (["--upstream", "http://127.0.0.1:1"], {"SSE_PROXY_IDLE_TIMEOUT": "abc"}, "IDLE"),
        (["--upstream", "http://127.0.0.1:1", "--config", "/nonexistent/x.toml"], {}, "config"),
        ([], {}, "upstream"),
        (["--upstream", "http://127.0.0.1:1", "--mode", "bogus"], {}, "mode"),
        # NaN and infinity: one line, exit 2, never a 500 per request
        (["--upstream", "http://127.0.0.1:1", "--idle-timeout", "nan"], {}, "finite"),
        (["--upstream", "http://127.0.0.1:1", "--connect-timeout", "inf"], {}, "finite"),
        (["--upstream", "http://127.0.0.1:1"], {"SSE_PROXY_IDLE_TIMEOUT": "nan"}, "finite"),
        (["--upstream", "http://127.0.0.1:1"], {"SSE_PROXY_CONNECT_TIMEOUT": "-inf"}, "finite"),
        (["--upstream", "http://127.0.0.1:1", "--allow-origin", "localhost:5173"], {}, "origin"),
        (["--upstream", "http://127.0.0.1:1", "--record-on", "maybe"], {}, "--record-on"),
        (["--upstream", "http://127.0.0.1:1", "--record-on", "broken"], {}, "record_dir"),
        (["--upstream", "http://127.0.0.1:1"], {"SSE_PROXY_RECORD_MAX_BYTES": "0"}, "RECORD"),
        (
            ["--upstream", "http://127.0.0.1:1", "--record", "r", "--record-max-files", "0"],
            {},
            "record_max_files",
        ),
        (["--upstream", "http://127.0.0.1:1", "--record-max-files", "lots"], {}, "--record-max"),
        (["--upstream", "http://127.0.0.1:1", "--record-max-bytes", "-5"], {}, "record_max_bytes"),
        (["--upstream", "http://127.0.0.1:1", "--record-max-bytes", "1GB"], {}, "--record-max"),
    ],
)
def test_cli_bad_value_exits_2_with_one_line(
    args: list[str], env: dict[str, str], word: str
) -> None:
    """`sse-proxy serve` with a bad value prints one line on stderr, no traceback, exit 2."""
    proc = subprocess.run(
        [str(SSE_PROXY), "serve", *args],
        capture_output=True,
        text=True,
        env=_clean_env(**env),
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert word in lines[0]
    assert proc.stdout == ""


def test_cli_serve_runs_with_file_env_and_flags(tmp_path: Path) -> None:
    """`sse-proxy serve` merges file, env and flags, serves health, and exits 0 on SIGTERM."""
    path = _write(tmp_path, '[sse-proxy]\nmode = "frames"\nport = 1\nadmin_prefix = "/_file"\n')
    proc = subprocess.Popen(
        [str(SSE_PROXY), "serve", "--config", str(path), "--port", "0"],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_clean_env(SSE_PROXY_UPSTREAM="http://127.0.0.1:9", SSE_PROXY_ADMIN_PREFIX="/_env"),
    )
    try:
        assert proc.stderr is not None
        started = json.loads(proc.stderr.readline())
        assert started["event"] == "proxy.started"
        assert started["mode"] == "frames"
        assert started["listen"].startswith("http://127.0.0.1:")
        assert started["health"].endswith("/_env/health")
        with urllib.request.urlopen(started["health"], timeout=5) as resp:
            assert json.loads(resp.read())["status"] == "ok"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


# ------------------------------------------------------------------ the file's examples


def _uncommented_routes_example() -> str:
    """The documented file with its [routes] example uncommented, as a user would do it."""
    lines = DOCUMENTED.read_text(encoding="utf-8").splitlines()
    start = lines.index("# [routes]")
    out = lines[:start]
    for line in lines[start:]:
        assert line == "#" or line.startswith("# "), f"not part of the example: {line!r}"
        out.append(line[2:])
    return "\n".join(out) + "\n"


def test_the_routes_example_loads_when_uncommented(tmp_path: Path) -> None:
    """Uncommenting the [routes] block gives three routes and leaves every other default."""
    from sse_proxy.server.routes import RouteTable

    key_file = tmp_path / "gemini-key"
    key_file.write_text("gk-secret\n", encoding="utf-8")
    text = _uncommented_routes_example().replace("/run/secrets/gemini-key", str(key_file))
    cfg = load_config(path=_write(tmp_path, text))
    assert [r.prefix for r in cfg.routes] == ["/openai", "/anthropic", "/gemini"]
    assert cfg.routes[1].dialect == "anthropic"
    assert cfg.routes[1].drop_client_auth is True
    assert dataclasses.replace(cfg, routes=()) == Config()  # the ui settings stayed put
    table = RouteTable.from_config(cfg, env={"ANTHROPIC_API_KEY": "ak-secret"})
    held = {r.prefix: dict(r.headers) for r in table.routes}
    assert held["/anthropic"] == {"x-api-key": "ak-secret"}
    assert held["/gemini"] == {"x-goog-api-key": "gk-secret"}


def test_a_setting_below_a_routes_table_is_explained(tmp_path: Path) -> None:
    """The old trap: a setting after [routes."/x"] lands in that route; the error says so."""
    text = '[sse-proxy]\nport = 1\n[routes."/x"]\nupstream = "http://127.0.0.1:9"\nui = true\n'
    with pytest.raises(ConfigError) as info:
        load_config(path=_write(tmp_path, text))
    assert "unknown key 'ui'" in str(info.value)
    assert "move it above" in str(info.value)


def test_the_dialect_comment_lists_every_dialect() -> None:
    """The file's dialect comment names every dialect the proxy accepts."""
    text = DOCUMENTED.read_text(encoding="utf-8")
    start = text.index("# Message dialect:")
    comment = text[start : text.index('dialect = "auto"', start)]
    for name in ("auto", "openai", "responses", "anthropic", "gemini", "text", "none"):
        assert f" {name}" in comment, name  # the contract's list


@pytest.mark.parametrize(
    ("text", "wanted"),
    [
        ("[sse-proxy]\nidle_timout = 5\n", "did you mean 'idle_timeout'?"),
        ("idle-timout = 5\n", "did you mean 'idle_timeout'?"),
        ('[sse-proxy]\nport = 1\n[route]\n"/a" = "http://127.0.0.1:9"\n', "did you mean 'routes'?"),
        ("[sse_proxy]\nport = 1\n", "settings go under [sse-proxy]"),
        ('[routes."/a"]\nupstrem = "http://127.0.0.1:9"\n', "did you mean 'upstream'?"),
    ],
)
def test_a_typo_in_the_file_gets_did_you_mean(tmp_path: Path, text: str, wanted: str) -> None:
    """Like the environment's unknown variables, a misspelt file key names the closest one."""
    with pytest.raises(ConfigError) as info:
        load_config(path=_write(tmp_path, text))
    assert wanted in str(info.value)
    assert "\n" not in str(info.value)


def test_sse_proxy_config_names_the_file(tmp_path: Path) -> None:
    """SSE_PROXY_CONFIG is the file when --config is not given; --config wins over it."""
    from_env = _write(tmp_path, "port = 1111\nmode = 'frames'\n", "env.toml")
    from_flag = _write(tmp_path, "port = 2222\n", "flag.toml")
    env = {"SSE_PROXY_CONFIG": str(from_env)}
    cfg = load_config(env=env)
    assert (cfg.port, cfg.mode) == (1111, "frames")
    assert load_config(env=env, path=from_flag).port == 2222
    # the environment still beats the file it names
    assert load_config(env={**env, "SSE_PROXY_PORT": "3333"}).port == 3333
    from sse_proxy.config import load_config_with_notes

    _, notes = load_config_with_notes(env=env)
    assert not [n for n in notes if n.event == "config.unknown_env"]  # not a misspelling
    with pytest.raises(ConfigError, match=r"nope\.toml"):
        load_config(env={"SSE_PROXY_CONFIG": str(tmp_path / "nope.toml")})


def test_nan_from_the_environment_and_the_file_is_refused(tmp_path: Path) -> None:
    """NaN and infinity are refused wherever they come from, naming the source."""
    with pytest.raises(ConfigError, match=r"environment SSE_PROXY_IDLE_TIMEOUT.*finite"):
        load_config(env={"SSE_PROXY_IDLE_TIMEOUT": "nan"})
    path = _write(tmp_path, "[sse-proxy]\nconnect_timeout = inf\n")
    with pytest.raises(ConfigError, match=r"c\.toml.*connect_timeout.*finite"):
        load_config(path=path)


def test_front_door_settings_from_flags_env_and_file(tmp_path: Path) -> None:
    """allowed_hosts and allow_origins: repeatable flags, a comma list in the environment,
    a list in the file (an origin's trailing slash, as copied from an address bar, dropped)."""
    flags = load_config(
        flags={"allowed_hosts": ["sidecar", ".corp.example"], "allow_origins": ["http://a:1/"]}
    )
    assert flags.allowed_hosts == ("sidecar", ".corp.example")
    assert flags.allow_origins == ("http://a:1",)
    env = load_config(
        env={
            "SSE_PROXY_ALLOWED_HOSTS": "sidecar, 10.0.0.7",
            "SSE_PROXY_ALLOW_ORIGINS": "http://localhost:5173 https://app.example",
        }
    )
    assert env.allowed_hosts == ("sidecar", "10.0.0.7")
    assert env.allow_origins == ("http://localhost:5173", "https://app.example")
    path = _write(tmp_path, '[sse-proxy]\nallowed_hosts = ["*"]\nallow_origins = []\n')
    assert load_config(path=path).allowed_hosts == ("*",)


# Every TOML type where a number, a flag or a string belongs: one line each, with its name.
_WRONG_TYPES = {
    "an array": "[1, 2]",
    "a table": "{ a = 1 }",
    "a date": "1979-05-27",
    "a date-time": "1979-05-27T07:32:00Z",
    "a time": "07:32:00",
}


def _serve_with(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SSE_PROXY), "serve", "--config", str(path), "--upstream", "http://127.0.0.1:1"],
        capture_output=True,
        text=True,
        env=_clean_env(),
        timeout=30,
        check=False,
    )


def _assert_wrong_type_line(stderr: str, path: Path, setting: str, kind: str) -> None:
    assert stderr.count("\n") == 1, stderr
    assert stderr.startswith(f"sse-proxy: error: config file {str(path)!r}: {setting} must")
    assert f"got {kind} (" in stderr, stderr


def test_a_wrong_toml_type_through_the_real_cli_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = _write(tmp_path, f"[sse-proxy]\nport = {_WRONG_TYPES['a table']}\n")
    proc = _serve_with(path)
    assert proc.returncode == 2, proc.stderr
    _assert_wrong_type_line(proc.stderr, path, "port", "a table")


@pytest.mark.parametrize("setting", ["shutdown_grace", "port", "log_text", "dialect", "seed"])
@pytest.mark.parametrize("kind", list(_WRONG_TYPES))
def test_a_wrong_toml_type_is_one_line_and_exit_2(
    tmp_path: Path,
    setting: str,
    kind: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CLI's entry point (in this process: the real one is the test above) with a config
    file holding an array, a table, a date, a date-time or a time where a number,
    true/false or a string belongs."""
    for name in [k for k in os.environ if k.startswith("SSE_PROXY_")]:
        monkeypatch.delenv(name)
    path = _write(tmp_path, f"[sse-proxy]\n{setting} = {_WRONG_TYPES[kind]}\n")
    code = cli.main(["serve", "--config", str(path), "--upstream", "http://127.0.0.1:1"])
    assert code == 2
    _assert_wrong_type_line(capsys.readouterr().err, path, setting, kind)


@pytest.mark.parametrize(
    ("how", "value"),
    [("file", "[::1"), ("file", "[::1]"), ("flag", "[::1"), ("env", "a b"), ("flag", "x:80")],
)
@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_host_that_is_no_address_is_one_line_and_exit_2(
    tmp_path: Path, how: str, value: str, workers: str
) -> None:
    args = ["serve", "--upstream", "http://127.0.0.1:1", "--port", "18999", "--workers", workers]
    env = _clean_env()
    if how == "file":
        args += ["--config", str(_write(tmp_path, f"[sse-proxy]\nhost = {json.dumps(value)}\n"))]
    elif how == "flag":
        args += ["--host", value]
    else:
        env["SSE_PROXY_HOST"] = value
    proc = subprocess.run(
        [str(SSE_PROXY), *args], capture_output=True, text=True, env=env, timeout=30, check=False
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert f"host: {value!r} is not an address or a host name to listen on" in proc.stderr
    if value.startswith("["):
        assert "without brackets: ::1" in proc.stderr
