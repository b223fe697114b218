"""The pytest plugin: the ``sse_chaos_proxy`` fixture, its parameters, marker and entry point."""

from __future__ import annotations

import codecs
import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from sse_proxy.pytest_plugin import SSEChaosProxy, chaos_proxy, sse_chaos_strategies
from sse_proxy.rechunk.spec import REWRITES, STRATEGIES
from tests.support.cli import cli_env
from tests.tools.clients._sse import LineParser, delta_text

NOT_A_USERS_PLUGINS = ("-p", "no:cloudcoil", "-p", "no:hypothesispytest")
"""Plugins this repository's test environment installs and a user's project need not
have: loaded, they take three of a user run's four seconds of start-up."""


def _user_pytest(project: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """``pytest -q ARGS`` in a user's ``project`` with sse-proxy installed: the plugin
    comes in by its entry point, as it would there."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            *NOT_A_USERS_PLUGINS,
            *args,
        ],
        cwd=project,
        capture_output=True,
        timeout=120,
        check=False,
        env=cli_env(),
    )


def _read_text(proxy: SSEChaosProxy, dialect: str, **headers: str) -> tuple[str, httpx.Headers]:
    """Stream ``dialect`` with httpx and a spec-correct parser; return text and headers."""
    parts: list[str] = []
    parser = LineParser(lambda event, data: parts.append(delta_text(dialect, event, data)))
    decoder = codecs.getincrementaldecoder("utf-8")()
    with (
        httpx.Client(timeout=30) as client,
        client.stream(
            "POST", proxy.stream_url(dialect), json=proxy.stream_body(dialect), headers=headers
        ) as resp,
    ):
        for chunk in resp.iter_raw():
            parser.feed(decoder.decode(chunk))
        parser.feed(decoder.decode(b"", final=True))
        return "".join(parts), resp.headers


def test_strategy_list_covers_strategies_rewrites_and_seeds() -> None:
    """sse_chaos_strategies() lists every name; options trim it or multiply it by seeds."""
    assert sse_chaos_strategies() == [*STRATEGIES, *REWRITES]
    assert sse_chaos_strategies(rewrites=False) == list(STRATEGIES)
    assert "utf8+crlf" in sse_chaos_strategies(combos=True)
    assert sse_chaos_strategies(rewrites=False, seeds=[1, 2])[:2] == ["bytewise:1", "bytewise:2"]
    with_shapes = sse_chaos_strategies(rewrites=False, variants="anthropic")
    assert with_shapes[len(STRATEGIES) :][:2] == ["ping", "thinking"]
    assert "chars" in with_shapes
    assert "azure" not in with_shapes


@pytest.mark.parametrize(
    "sse_chaos_proxy", ["azure", "include_usage", "reasoning_content"], indirect=True
)
def test_the_openai_sdk_in_process_through_provider_shapes(
    sse_chaos_proxy: SSEChaosProxy,
) -> None:
    """The shape variants through the plugin's proxy: the SDK's own stream helper still
    assembles the exact answer from Azure's, include_usage's and DeepSeek's shapes (the
    include_usage chunk comes to a request that asks for it, as from the providers)."""
    client = OpenAI(base_url=sse_chaos_proxy.openai_base_url, api_key="test", max_retries=0)
    with client.chat.completions.stream(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "hi"}],
        stream_options={"include_usage": True},
    ) as stream:
        for _ in stream:
            pass
        done = stream.get_final_completion()
    assert done.choices[0].message.content == sse_chaos_proxy.expected_text("openai")
    client.close()
    marker = {
        "azure": b"prompt_filter_results",
        "include_usage": b'"choices":[],"usage":{',
        "reasoning_content": b'"content":null,"reasoning_content":',
    }[sse_chaos_proxy.strategy]
    asking = {**sse_chaos_proxy.stream_body(), "stream_options": {"include_usage": True}}
    body = httpx.post(sse_chaos_proxy.stream_url("openai"), json=asking, timeout=30).content
    assert marker in body


@pytest.mark.parametrize("sse_chaos_proxy", sse_chaos_strategies(rewrites=False), indirect=True)
def test_openai_sdk_in_process_under_every_rechunking_strategy(
    sse_chaos_proxy: SSEChaosProxy,
) -> None:
    """The synchronous openai client streams the exact text through each strategy."""
    client = OpenAI(base_url=sse_chaos_proxy.openai_base_url, api_key="test", max_retries=0)
    stream = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == sse_chaos_proxy.expected_text("openai")
    client.close()


@pytest.mark.parametrize(
    "sse_chaos_proxy", sse_chaos_strategies(combos=True, seeds=[3]), indirect=True
)
def test_a_correct_parser_survives_every_strategy_rewrite_and_combo(
    sse_chaos_proxy: SSEChaosProxy,
) -> None:
    """A spec-correct parser gets the exact raw-text answer whatever the proxy does."""
    text, headers = _read_text(sse_chaos_proxy, "text")
    assert text == sse_chaos_proxy.expected_text("text")
    assert headers["X-SSE-Proxy-Chaos-Seed"] == "3"
    assert sse_chaos_proxy.seed == 3


@pytest.mark.sse_chaos("utf8", seed=7)
def test_marker_sets_strategy_and_seed(sse_chaos_proxy: SSEChaosProxy) -> None:
    """@pytest.mark.sse_chaos picks the strategy and seed; the proxy announces the seed."""
    assert (sse_chaos_proxy.strategy, sse_chaos_proxy.seed) == ("utf8", 7)
    text, headers = _read_text(sse_chaos_proxy, "anthropic")
    assert text == sse_chaos_proxy.expected_text("anthropic")
    assert headers["X-SSE-Proxy-Chaos-Seed"] == "7"


def test_default_is_random_seed_1_and_a_header_overrides_one_request(
    sse_chaos_proxy: SSEChaosProxy,
) -> None:
    """Unparametrized it is random/1; chaos_header() switches a single request."""
    assert (sse_chaos_proxy.strategy, sse_chaos_proxy.seed) == ("random", 1)
    assert sse_chaos_proxy.anthropic_base_url == sse_chaos_proxy.url
    text, headers = _read_text(
        sse_chaos_proxy, "responses", **sse_chaos_proxy.chaos_header("bytewise+crlf", 99)
    )
    assert text == sse_chaos_proxy.expected_text("responses")
    assert headers["X-SSE-Proxy-Chaos-Seed"] == "99"
    body = sse_chaos_proxy.stream_body("openai")
    url = sse_chaos_proxy.stream_url("openai")
    plain = httpx.post(url, json=body, headers=sse_chaos_proxy.chaos_header("choices_n2", 1))
    assert b'"index":1' not in plain.content  # the request did not ask for n > 1
    forced = sse_chaos_proxy.chaos_header("choices_n2", 1, force=True)
    assert b'"index":1' in httpx.post(url, json=body, headers=forced).content


@pytest.mark.asyncio
@pytest.mark.parametrize("sse_chaos_proxy", ["boundaries:5"], indirect=True)
async def test_async_tests_can_use_the_fixture(sse_chaos_proxy: SSEChaosProxy) -> None:
    """The servers run on their own loop, so an async client in the test's loop works."""
    async with (
        httpx.AsyncClient(timeout=30) as client,
        client.stream(
            "POST", sse_chaos_proxy.stream_url("openai"), json=sse_chaos_proxy.stream_body()
        ) as resp,
    ):
        body = b"".join([chunk async for chunk in resp.aiter_raw()])
    assert resp.headers["X-SSE-Proxy-Chaos-Seed"] == "5"
    assert body.endswith(b"data: [DONE]\n\n")


def test_chaos_proxy_context_manager_stops_its_thread() -> None:
    """Outside pytest, chaos_proxy() serves and leaves no thread behind."""
    with chaos_proxy("coalesce", seed=2) as proxy:
        text, _ = _read_text(proxy, "text")
        assert text == proxy.expected_text("text")
    assert not [t for t in threading.enumerate() if t.name == "sse-chaos-proxy"]


def test_importing_the_plugin_is_cheap() -> None:
    """The entry point module pulls in neither aiohttp nor the proxy server at import."""
    code = (
        "import sys, sse_proxy.pytest_plugin; "
        "print(sorted({'aiohttp', 'sse_proxy.server'} & set(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, check=True, env=cli_env(), timeout=30
    )
    assert out.stdout.decode().strip() == "[]"


@pytest.mark.parametrize("layout", ["module", "package"])
def test_a_project_with_its_own_proxy_module_runs_its_tests(tmp_path: Path, layout: str) -> None:
    """Apps that sit behind proxies often have a ``proxy.py`` or ``proxy/`` of their own: with
    sse-proxy installed (its plugin loaded by the entry point), their tests still import
    theirs, and the plugin's fixture still works beside it."""
    code = "def answer():\n    return 42\n"
    if layout == "module":
        (tmp_path / "proxy.py").write_text(code)
    else:
        (tmp_path / "proxy").mkdir()
        (tmp_path / "proxy" / "__init__.py").write_text(code)
    (tmp_path / "test_app.py").write_text(
        "import proxy\n\n\ndef test_own_module():\n    assert proxy.answer() == 42\n\n\n"
        "def test_fixture_beside_it(sse_chaos_proxy):\n"
        "    assert sse_chaos_proxy.expected_text('text')\n"
    )
    proc = _user_pytest(tmp_path, "test_app.py")
    out = proc.stdout.decode() + proc.stderr.decode()
    assert proc.returncode == 0, out
    assert "2 passed" in out, out


def test_entry_point_registers_the_fixture_in_any_project(tmp_path: Path) -> None:
    """In a bare project the fixture just works; a bad parameter fails with one clear line."""
    (tmp_path / "test_user.py").write_text(
        textwrap.dedent(
            """
            import urllib.request

            import pytest

            @pytest.mark.parametrize("sse_chaos_proxy", ["utf8:4", "nope"], indirect=True)
            def test_stream(sse_chaos_proxy):
                req = urllib.request.Request(
                    sse_chaos_proxy.stream_url("text"), data=b"{}", method="POST"
                )
                with urllib.request.urlopen(req) as resp:
                    assert resp.headers["X-SSE-Proxy-Chaos-Seed"] == "4"

            @pytest.mark.sse_chaos("bytewise")
            def test_marker_is_registered(sse_chaos_proxy):
                assert sse_chaos_proxy.strategy == "bytewise"
            """
        )
    )
    proc = _user_pytest(tmp_path, "--strict-markers", "test_user.py")
    out = proc.stdout.decode()
    assert "2 passed, 1 error" in out, out
    assert "During handling" not in out
    assert "sse_chaos_proxy: unknown chaos strategy 'nope'" in out
    disabled = _user_pytest(tmp_path, "-p", "no:sse_proxy", "test_user.py")
    assert "fixture 'sse_chaos_proxy' not found" in disabled.stdout.decode()


def test_a_failing_test_is_quiet_and_the_proxy_logs_to_a_file(tmp_path: Path) -> None:
    """A user's failing test shows its own failure, no proxy log line (in its captured
    stderr, or between the progress dots); the proxy's lines are JSON, as the contract
    has them, in a file in pytest's base temporary directory."""
    (tmp_path / "test_user.py").write_text(
        textwrap.dedent(
            """
            import urllib.request

            def test_stream(sse_chaos_proxy):
                req = urllib.request.Request(
                    sse_chaos_proxy.stream_url("openai") + "?fault=no_terminal",
                    data=b'{"stream": true}', method="POST",
                )
                with urllib.request.urlopen(req) as resp:
                    resp.read()
                assert False, "the user's own failure"

            def test_after(sse_chaos_proxy):
                pass
            """
        )
    )
    base = tmp_path / "base"
    proc = _user_pytest(tmp_path, f"--basetemp={base}", "test_user.py")
    out = proc.stdout.decode() + proc.stderr.decode()
    assert "1 failed, 1 passed" in out, out
    assert "the user's own failure" in out
    assert "stream.summary" not in out
    assert "Captured stderr" not in out
    assert "Captured stdout call" not in out  # nothing on the user's stdout
    lines = (base / "sse-chaos-proxy.log").read_text().splitlines()
    events = [json.loads(ln) for ln in lines]
    (summary,) = [e for e in events if e["event"] == "stream.summary"]
    assert summary["verdict"] == "broken"
    assert summary["client_request_id"] is None  # JSON null, not the repr None
    for repr_only in ("=None", "=False", "=True", "{'"):
        assert all(repr_only not in ln for ln in lines), repr_only


@pytest.mark.sse_chaos("utf8", seed=2)
def test_every_cut_of_a_stream_reaches_the_client_apart(sse_chaos_proxy: SSEChaosProxy) -> None:
    """httpx reading the stream: each character's cut is read apart, and the fixture says
    how many (the count the assertion helper prints)."""
    text, _ = _read_text(sse_chaos_proxy, "openai")
    sse_chaos_proxy.assert_text(text, "openai")
    got = sse_chaos_proxy.delivery
    assert got is not None
    assert got.cuts >= 90
    assert got.read_apart == got.cuts
    assert str(got) == f"{got.cuts} of {got.cuts} cuts read apart"


def test_the_assertion_helper_fails_with_the_diagnosis_fix_and_rerun(tmp_path: Path) -> None:
    """A client that decodes each read on its own, in a user's suite: the failure names the
    bug family, the fix, the cuts read apart and the command that reruns it, not a diff."""
    (tmp_path / "test_user.py").write_text(
        textwrap.dedent(
            """
            import httpx
            import pytest

            @pytest.mark.parametrize("sse_chaos_proxy", ["utf8:3"], indirect=True)
            def test_stream(sse_chaos_proxy):
                text = ""
                body = sse_chaos_proxy.stream_body("text")
                with httpx.stream("POST", sse_chaos_proxy.stream_url("text"), json=body) as r:
                    buf = ""
                    for chunk in r.iter_raw():
                        buf += chunk.decode("utf-8", "replace")  # the bug: per read
                    for line in buf.splitlines():
                        if line.startswith("data: "):
                            text += line[6:]
                sse_chaos_proxy.assert_text(text, "text")
            """
        )
    )
    proc = _user_pytest(tmp_path, "test_user.py")
    out = proc.stdout.decode() + proc.stderr.decode()
    assert "1 failed" in out, out
    assert "diagnosis: character boundary:" in out
    assert "stream.summary" not in out  # the proxy logs to a file, named here:
    assert "proxy log: " in out
    assert "sse-chaos-proxy.log" in out
    assert "fix (python): decode with one codecs.getincrementaldecoder" in out
    assert "reproduce: pytest 'test_user.py::test_stream[utf8:3]'" in out
    assert "cuts read apart" in out
    assert "assert '" not in out  # no string diff from pytest


def test_the_fixtures_rewrites_carry_text_in_their_first_event(tmp_path: Path) -> None:
    """As test-client plans them: under ``bom`` the first event carries text, so a client
    that drops the first event after a BOM (its first line reads ``\\ufeffdata:``) fails,
    with the diagnosis; the same client passes a strategy that only cuts."""
    (tmp_path / "test_user.py").write_text(
        textwrap.dedent(
            """
            import codecs, json

            import httpx
            import pytest

            @pytest.mark.parametrize("sse_chaos_proxy", ["bom", "utf8"], indirect=True)
            def test_stream(sse_chaos_proxy):
                body = sse_chaos_proxy.stream_body("openai")
                decoder = codecs.getincrementaldecoder("utf-8")()  # not utf-8-sig: the bug
                buf = ""
                with httpx.stream("POST", sse_chaos_proxy.stream_url("openai"), json=body) as r:
                    for chunk in r.iter_raw():
                        buf += decoder.decode(chunk)
                text = ""
                for line in buf.split("\\n"):
                    if line.startswith("data: ") and line != "data: [DONE]":
                        for c in json.loads(line[6:])["choices"]:
                            text += c["delta"].get("content") or ""
                sse_chaos_proxy.assert_text(text, "openai")
            """
        )
    )
    proc = _user_pytest(tmp_path, "test_user.py")
    out = proc.stdout.decode()
    assert "1 failed, 1 passed" in out, out
    assert "FAILED test_user.py::test_stream[bom]" in out
    assert "diagnosis: spec conformance (bom): 3 of " in out  # "The", the first token
    assert "must be skipped once" in out
