"""deploy/: the Prometheus alerting rules pass their promtool unit tests, the Grafana
dashboard's queries are valid PromQL, and every metric and label they query is one that a
real proxy exports.

promtool comes from Debian's ``prometheus`` package; .ci/run installs it. Without it these
tests fail (they must run in CI), with the command that installs it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio
import yaml

from sse_proxy.server.run import start_proxy, stop_proxy
from sse_proxy.settings import Config
from sse_proxy.tools import fixtures
from sse_proxy.tools.mock_upstream import start_mock_upstream
from tests.support.cli import ROOT
from tests.support.logs import metric_sum

RULES_DIR = ROOT / "deploy" / "prometheus"
RULES = RULES_DIR / "sse-proxy-rules.yml"
RULE_TESTS = RULES_DIR / "sse-proxy-rules.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "sse-proxy-dashboard.json"
_GRAFANA_VARS = {"$__rate_interval": "5m", "$job": ".*", "$model": ".*"}
_SELECTOR = re.compile(r"\b(sse_proxy_[a-z_]+)\b(\{[^}]*\})?")
_GROUPING = re.compile(r"\bby \(([^)]*)\)")


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            "promtool not found: install it (Debian: apt-get install prometheus); "
            ".ci/run does this in CI"
        )
    return path


def _run(*args: str, cwd: Path = RULES_DIR) -> str:
    proc = subprocess.run(
        [_promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _rule_exprs() -> list[str]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule["expr"] for group in doc["groups"] for rule in group["rules"]]


def _dashboard_exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            exprs.append(var["definition"])
    return exprs


def _promql(expr: str) -> str:
    for name, value in _GRAFANA_VARS.items():
        expr = expr.replace(name, value)
    return expr


def test_alerting_rules_pass_their_unit_tests() -> None:
    """promtool checks the rules and runs their unit tests (firing and quiet cases)."""
    assert "SUCCESS: 9 rules found" in _run("check", "rules", RULES.name)
    assert "SUCCESS" in _run("test", "rules", RULE_TESTS.name)


def test_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    """Every panel query parses (promtool checks it as a recording rule)."""
    exprs = [e for e in _dashboard_exprs() if not e.startswith("label_values(")]
    assert len(exprs) >= 10
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query_{i}", "expr": _promql(e)}
                    for i, e in enumerate(exprs)
                ],
            }
        ]
    }
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump(rules), encoding="utf-8")
    assert f"SUCCESS: {len(exprs)} rules found" in _run("check", "rules", str(path))


def test_dashboard_shows_what_the_issue_asks_for() -> None:
    """Streams/s, verdicts, alerts by kind, TTFT p50/p99 by model, stalls (kept alive by
    comments too), lingering bodies, truncations, errors."""
    joined = "\n".join(_dashboard_exprs())
    for needle in (
        "sum by (verdict) (rate(sse_proxy_streams_total",
        "sum by (event) (rate(sse_proxy_alerts_total",
        "histogram_quantile(0.5, sum by (model, le) (rate(sse_proxy_time_to_first_token",
        "histogram_quantile(0.99, sum by (model, le) (rate(sse_proxy_time_to_first_token",
        'event="sse.stall"',
        "sse_proxy_stalls_kept_alive_total",
        'event="sse.linger"',
        'event="sse.truncated"',
        "sse_proxy_upstream_errors_total",
    ):
        assert needle in joined, needle


@pytest_asyncio.fixture
async def scrape() -> AsyncIterator[str]:
    """A real proxy's /metrics after clean, faulty and slow streams of every JSON dialect."""
    upstream, upstream_url = await start_mock_upstream()
    runner, url = await start_proxy(Config(upstream=upstream_url, port=0))
    try:
        async with aiohttp.ClientSession() as session:
            for path in ("/v1/chat/completions", "/v1/responses", "/v1/messages"):
                for headers in (
                    {"X-Mock-Delay": "0.001"},  # reads apart: inter-event gaps
                    {"X-Mock-Fault": "truncated"},
                    {"X-Mock-Fault": "invalid_utf8"},
                ):
                    async with session.post(
                        url + path, json={"model": "m", "stream": True}, headers=headers
                    ) as resp:
                        await resp.read()
            clean = fixtures.clean_stream("openai")
            async with session.post(url + "/sse/raw?close_early=1", data=clean) as resp:
                with pytest.raises(aiohttp.ClientPayloadError):
                    await resp.read()  # an upstream that dies mid-stream
            # each stream's summary (and so its metrics) lands just after its response
            deadline = time.monotonic() + 10
            while True:
                async with session.get(url + "/_sse-proxy/metrics") as resp:
                    text = await resp.text()
                if metric_sum(text, "sse_proxy_streams_total") == 10:
                    break
                assert time.monotonic() < deadline, "10 streams never counted"
            yield text
    finally:
        await stop_proxy(runner)
        await upstream.cleanup()


def _exported(text: str) -> tuple[set[str], dict[str, set[str]]]:
    """Sample names (from the TYPE lines, so empty families count) and labels seen."""
    names: set[str] = set()
    labels: dict[str, set[str]] = {}
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split()
            family = family.removesuffix("_total")  # the text format names counters so
            names.update(family + s for s in suffixes.get(kind, ("",)))
        elif line and not line.startswith("#"):
            name, _, rest = line.partition("{")
            keys = set(re.findall(r'(\w+)="', rest)) if rest else set()
            labels.setdefault(name.split()[0], set()).update(keys)
    return names, labels


@pytest.mark.asyncio
async def test_every_queried_metric_and_label_is_exported(scrape: str) -> None:
    """Each series in a rule or a panel exists in a real scrape, with the labels used."""
    names, labels = _exported(scrape)
    used = 0
    for raw in (*_rule_exprs(), *_dashboard_exprs()):
        expr = _promql(raw)
        found = _SELECTOR.findall(expr)
        assert found, expr
        in_expr: set[str] = {"le", "job", "instance"}  # job, instance: added at scrape
        for name, selector in found:
            assert name in names, f"{name} (in {expr!r}) is not exported"
            used += 1
            in_expr |= labels.get(name, set())
            for key in re.findall(r"(\w+)\s*(?:=~|!=|!~|=)", selector):
                if key not in ("job", "instance"):  # added by Prometheus at scrape time
                    assert key in labels.get(name, set()), f"{name} has no label {key}"
        for group in _GROUPING.findall(expr):
            for key in (k.strip() for k in group.split(",")):
                assert key in in_expr, f"by ({key}) in {expr!r}"
    assert used >= 20


@pytest.mark.asyncio
async def test_one_bad_stream_with_many_alerts_counts_once_among_streams() -> None:
    """50 invalid bytes in one stream: 50 U+FFFD alerts, but one stream with the alert.
    The rules divide streams by streams, so this is 1 in 2, not 5000%."""
    upstream, upstream_url = await start_mock_upstream()
    runner, url = await start_proxy(Config(upstream=upstream_url, port=0))
    try:
        async with aiohttp.ClientSession() as session:
            bad = b'data: {"x": "' + b"\xff " * 50 + b'"}\n\ndata: [DONE]\n\n'
            for body in (bad, fixtures.clean_stream("openai")):
                async with session.post(url + "/sse/raw", data=body) as resp:
                    await resp.read()
            deadline = time.monotonic() + 10
            while True:
                async with session.get(url + "/_sse-proxy/metrics") as resp:
                    text = await resp.text()
                if metric_sum(text, "sse_proxy_streams_total") == 2:
                    break
                assert time.monotonic() < deadline, "2 streams never counted"
    finally:
        await stop_proxy(runner)
        await upstream.cleanup()
    event = {"event": "sse.replacement_char"}
    assert metric_sum(text, "sse_proxy_alerts_total", **event) == 50
    assert metric_sum(text, "sse_proxy_streams_with_alert_total", **event) == 1
