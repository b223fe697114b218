"""docs/gateways.md and the bug notes in docs/gateways/, from the rows' JSON reports."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

_OUTCOMES = ("masked", "broken", "wrong", "held", "hang")

RELATED: dict[tuple[str, str], str] = {
    ("litellm", "shape (usage chunk choices)"): (
        "[BerriAI/litellm#28735](https://github.com/BerriAI/litellm/issues/28735) (closed as "
        "stale), the same as [#8450](https://github.com/BerriAI/litellm/issues/8450), whose "
        "fix [#8751](https://github.com/BerriAI/litellm/pull/8751) was not merged"
    ),
    ("litellm", "usage (invented)"): (
        "the mirror case: [BerriAI/litellm#36168](https://github.com/BerriAI/litellm/issues/"
        "36168) (the upstream's own usage replaced by a local estimate when its last chunk "
        "still has choices)"
    ),
    ("litellm", "text"): (
        "LiteLLM reads OpenAI streams with the openai Python SDK, which drops the first event "
        "after a BOM ([docs/bugs/openai-python.md](../bugs/openai-python.md))"
    ),
    ("litellm", "ending (stopped reading the upstream)"): (
        "LiteLLM reads OpenAI streams with the openai Python SDK, which crashes on data-less "
        "blocks ([docs/bugs/openai-python.md](../bugs/openai-python.md))"
    ),
    ("portkey", "delivery (held back)"): (
        "the stream splitter of 1.15.2 (`build/start-server.js`) splits the decoded text on "
        '`"\\n\\n"` only (`"\\r\\n\\r\\n"` for a few providers), so a stream framed with CRLF or '
        "bare CR line endings, which the SSE specification allows and Google's and many "
        "Java servers send, has no split point until it ends"
    ),
}


def _verdicts(report: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for group, counts in report["summary"].items():
        bad = [o for o in _OUTCOMES if counts.get(o)]
        out[group] = "pass" if not bad else "+".join(bad)
    return out


def _cell(verdict: str | None) -> str:
    if verdict is None:
        return "·"
    return "✓" if verdict == "pass" else f"**{verdict}**"


def _local(text: str, root: Path) -> str:
    """A reproduce line as it runs from the repository's root on any machine."""
    return text.replace(sys.executable, ".venv/bin/python").replace(f"{root}/", "")


def _direction(report: Mapping[str, Any]) -> str:
    client, upstream = report["dialect"], report["upstream_dialect"]
    return client if client == upstream else f"{client} ← {upstream}"


def _first_cases(report: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The first failing case of each family (a case counts under each of its findings)."""
    out: dict[str, dict[str, Any]] = {}
    for case in report["cases"]:
        for finding in case.get("findings") or ([case["diagnosis"]] if "diagnosis" in case else []):
            if case["outcome"] != "pass":
                out.setdefault(finding["family"], {**case, "finding": finding})
    return out


def _evidence(text: str) -> list[str]:
    lines = [line for line in text.splitlines() if line.strip()]
    return ["  ```", *(f"  {line}" for line in lines), "  ```"] if lines else []


def write_page(
    page: Path,
    gateways: Sequence[Any],
    reports: Mapping[str, Mapping[str, Any]],
    versions: Mapping[str, str],
    date: str,
    notes: Path,
) -> list[Path]:
    """Write the page; return the bug notes written beside it."""
    from sse_proxy import __version__

    root = page.parent.parent
    rows = [r for g in gateways for r in g.rows if r.name in reports]
    by_gw = {g.name: g for g in gateways}
    table = {r.name: _verdicts(reports[r.name]) for r in rows}
    groups: list[str] = []
    for r in rows:
        groups += [g for g in table[r.name] if g not in groups]
    out = [
        "# Gateway matrix: what LLM gateways do to a stream",
        "",
        "This page answers: what do LiteLLM and Portkey's AI gateway change in a streamed answer "
        "on its way from the API to the app (the text, tool calls, finish reasons, usage, how "
        "the stream ends, error events, the API's shape rules, when the deltas arrive), at "
        "which version, with a bug note ready to file for each change.",
        "",
        f"Generated on {date} with sse-proxy {__version__}: every case of "
        "[`sse-proxy test-gateway`](test-gateway.md) (every group of `test-client`, one seed "
        "each), each gateway between the built-in mock upstream and a correct client, per API "
        "the client speaks. nginx and sse-proxy are the controls: a proxy that changes nothing "
        "passes every case. Regenerate it with one command, which installs the pinned gateways "
        "(LiteLLM from PyPI into `conformance/gateways/litellm/.venv`, Portkey's from npm into "
        "`conformance/gateways/portkey/node_modules`; both git-ignored) and reruns every row "
        "(half an hour on two cores):",
        "",
        "```sh",
        ".venv/bin/python -m conformance.gateways",
        "```",
        "",
        "This run shared its two cores with other jobs (a load average of 7 to 9): the "
        "delivery findings (**held**) of a gateway that needs much CPU per event (LiteLLM) "
        "come and go from run to run with the load, every other finding does not.",
        "",
        "`--only NAME,...` reruns some gateways or rows; the reports land in "
        "`conformance/out/gateways/`. A cell is ✓ (every case of the group passed) or the "
        "failures' outcome: **masked** (a broken stream made to look whole), **broken** (a "
        "whole stream broken on the way), **wrong** (the meaning changed: text, tool calls, "
        "finish reasons, usage, error events, the API's shape rules), **held** (only the "
        "delivery: deltas held back into bursts, seen on a rerun too), **hang**. `·`: the group "
        "does not apply to that row. `openai ← anthropic`: the client speaks OpenAI Chat, the "
        "gateway an Anthropic upstream (compared by meaning).",
        "",
        "Portkey's gateway runs with `@hono/node-server` held at 1.14.1 (an npm override in "
        "`conformance/gateways/portkey/package.json`): with the version npm resolves by "
        "itself (1.19.19) and already with 1.14.2, every streaming request through a custom host "
        'fails with HTTP 500 `{"status":"failure","message":"Something went '
        "wrong\"}` (a `TypeError: immutable` in its header handling: the stream's Response "
        "keeps the upstream's immutable headers, which the gateway then appends to). "
        "`npx @portkey-ai/gateway` cannot apply an override, so it always gets the failing "
        "combination.",
        "",
        "## The gateways",
        "",
        "| # | gateway | version | client ← upstream | case groups passed | failures |",
        "|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(rows, 1):
        report = reports[r.name]
        verdict = table[r.name]
        passed = sum(v == "pass" for v in verdict.values())
        families = ", ".join(sorted(report.get("families", {}))) or "none"
        gw = by_gw[r.gateway]
        title = f"{gw.title}{' (control)' if gw.control else ''}"
        out.append(
            f"| {i} | [{title}](#{r.name}) | {versions.get(r.gateway, '?')} | "
            f"{_direction(report)} | {passed} of {len(verdict)} | {families} |"
        )
    out += [
        "",
        "## Every group",
        "",
        "The columns are the rows of the table above, by number.",
        "",
        "| group | " + " | ".join(str(i) for i in range(1, len(rows) + 1)) + " |",
        "|---|" + "---|" * len(rows),
    ]
    for group in groups:
        cells = " | ".join(_cell(table[r.name].get(group)) for r in rows)
        out.append(f"| `{group}` | {cells} |")
    out += ["", "## Each row's failures", ""]
    written: list[Path] = []
    per_gateway: dict[str, list[tuple[Any, dict[str, Any]]]] = {}
    for i, r in enumerate(rows, 1):
        report = reports[r.name]
        gw = by_gw[r.gateway]
        out += [f"### {r.name}", ""]
        delivery = _baseline_delivery(report)
        out.append(
            f"{i}. {gw.title} {versions.get(r.gateway, '?')}; the client speaks "
            f"{report['dialect']}, the gateway calls `{report['upstream_path']}` "
            f"({report['upstream_dialect']}); the case reached the upstream by "
            f"{report['case_key']}; ready in {report['ready_s']:g} s.{delivery}"
        )
        firsts = _first_cases(report)
        if not firsts:
            out += ["", "Every case passed.", ""]
            continue
        if not gw.control:
            out += [
                "",
                f"Bug notes ready to file: [gateways/{r.gateway}.md](gateways/{r.gateway}.md).",
            ]
        out.append("")
        for family, case in firsts.items():
            f = case["finding"]
            groups_of = report.get("families", {}).get(family, [])
            out.append(
                f"- **{family}** ({f['outcome']}, {len(groups_of)} "
                f"group{'s' if len(groups_of) != 1 else ''}: "
                f"{', '.join(f'`{g}`' for g in groups_of[:6])}"
                f"{' ...' if len(groups_of) > 6 else ''}): {f['reason']}"
            )
            out.append(f"  - reproduce: `{_local(str(case.get('reproduce', '')), root)}`")
            per_gateway.setdefault(r.gateway, []).append((r, case))
        out.append("")
    out += [
        "## The verdicts as data",
        "",
        "```json verdicts",
        json.dumps(table, indent=1, sort_keys=True, ensure_ascii=False),
        "```",
        "",
    ]
    page.write_text("\n".join(out), encoding="utf-8")
    notes.mkdir(exist_ok=True)
    for name, found in per_gateway.items():
        gw = by_gw[name]
        if gw.control:
            continue
        path = notes / f"{name}.md"
        path.write_text(_note(gw, versions.get(name, "?"), found, reports, root), encoding="utf-8")
        written.append(path)
    return written


def _baseline_delivery(report: Mapping[str, Any]) -> str:
    for case in report["cases"]:
        d = case.get("delivery")
        if case["group"] == "baseline" and d and d.get("added_first_output_s") is not None:
            return (
                f" Baseline (paced upstream): {d['added_first_output_s'] * 1000:.0f} ms added to "
                f"the first output, output held back at most "
                f"{d['held_back_s'] * 1000:.0f} ms beyond its least lag."
            )
    return ""


_MOCK, _CASE, _GATEWAY = 8788, 8789, 4000


def _case_server(case: Mapping[str, Any], paced: bool = False) -> list[str]:
    """The commands that serve ``case`` on port _CASE, as test-gateway serves it;
    ``paced``: the upstream pauses between its writes, so that a delay shows by hand."""
    if case.get("fault"):
        # the mock's own fault streams keep the whole text; test-client's cut it halfway
        return [f"sse-proxy mock-upstream --port {_CASE} --fault {case['fault']} &"]
    from sse_proxy.tools.testclient.fixture import uses_first_text

    group, strategy, seed = case["group"], case.get("strategy"), case.get("seed") or 1
    # a rewrite is served with text in the first event, so that losing it shows
    first = " --first-text" if uses_first_text(strategy) else ""
    delay = " --delay 0.005" if paced else ""
    up = [f"sse-proxy mock-upstream --port {_MOCK} --seed {seed}{first}{delay} &"]
    if group == "baseline":
        mode = "--mode frames"
    else:
        mode = f"--mode chaos --chaos {strategy} --seed {seed}"
    return [
        *up,
        f"sse-proxy serve --upstream http://127.0.0.1:{_MOCK} --port {_CASE} {mode} &",
    ]


def _gateway_start(name: str, upstream_path: str) -> list[str]:
    case = f"http://127.0.0.1:{_CASE}"
    if name == "litellm":
        return [
            "cd conformance/gateways/litellm",
            "export LITELLM_MASTER_KEY=sk-gwtest-0123456789abcdef0123456789abcdef "
            "LITELLM_LOCAL_MODEL_COST_MAP=True",
            f"LITELLM_OPENAI_BASE={case}/v1 SSE_PROXY_UPSTREAM_URL={case} "
            f".venv/bin/litellm --config config.yaml --port {_GATEWAY} &",
        ]
    if name == "portkey":
        return [
            "node conformance/gateways/portkey/node_modules/@portkey-ai/gateway/build/"
            f"start-server.js --port={_GATEWAY} --headless &",
        ]
    return []


def _by_hand(gw: Any, row: Any, case: Mapping[str, Any], report: Mapping[str, Any]) -> list[str]:
    """The case with the real commands and curl, for a maintainer without test-gateway."""
    from sse_proxy.names import DIALECT_PATHS
    from sse_proxy.tools.testgateway.options import GatewayOptions
    from sse_proxy.tools.testgateway.run import client_body

    body = client_body(
        GatewayOptions(command=("x",), dialect=row.dialect, model=row.model, tools=row.tools)
    )
    headers = [
        h.replace("{upstream}", f"http://127.0.0.1:{_CASE}")
        for h in row.headers
        if not h.lower().startswith("x-portkey-forward-headers")
    ]
    curl = [f"curl -sN http://127.0.0.1:{_GATEWAY}{DIALECT_PATHS[row.dialect]}"]
    curl += ["-H 'content-type: application/json'"] + [f"-H '{h}'" for h in headers]
    curl.append(f"-d '{json.dumps(body, ensure_ascii=False)}'")
    return [
        "```sh",
        "# the upstream: the case's stream",
        *_case_server(case, paced=str(case["finding"]["family"]).startswith("delivery")),
        "# the gateway, calling it",
        *_gateway_start(gw.name, report["upstream_path"]),
        "# the client",
        " \\\n  ".join(curl),
        "```",
    ]


def _note(
    gw: Any,
    version: str,
    found: Sequence[tuple[Any, dict[str, Any]]],
    reports: Mapping[str, Mapping[str, Any]],
    root: Path,
) -> str:
    """One gateway's bug notes: one section per family, ready to paste into an issue."""
    families: dict[str, list[tuple[Any, dict[str, Any]]]] = {}
    for row, case in found:
        families.setdefault(case["finding"]["family"], []).append((row, case))
    out = [
        f"# {gw.title} {version}: what it changes in a stream",
        "",
        f"Bug notes ready to file at {gw.home}, one per finding of the "
        "[gateway matrix](../gateways.md). Each was found by `sse-proxy test-gateway`: the "
        "gateway between the sse-proxy mock upstream and a correct client, and what the "
        "upstream sent compared with what reached the client, field by field. Every "
        "reproduce line runs from the sse-proxy repository's root after "
        "`.venv/bin/python -m conformance.gateways --only "
        f"{gw.name}` installed the pinned gateway (the LiteLLM config and the Portkey "
        "package.json are in `conformance/gateways/`).",
        "",
    ]
    for family, items in families.items():
        row, case = items[0]
        f = case["finding"]
        report = reports[row.name]
        dialects = sorted({_direction(reports[r.name]) for r, _ in items})
        out += [f"## {family}", ""]
        reason = str(f["reason"]).rstrip(".")
        out.append(f"**Summary.** {reason[:1].upper()}{reason[1:]}.")
        out += [
            "",
            f"**Where.** {gw.title} {version}, client API: {', '.join(dialects)}; the first "
            f"case: `{case['name']}` (a {case['severity']} stream: "
            f"{'seen from real providers and networks' if case['severity'] == 'real' else 'allowed by the specification, rarely sent'}"
            f"); groups: {', '.join(f'`{g}`' for g in report.get('families', {}).get(family, []))}.",
            "",
            "**Reproduce** with sse-proxy's harness (from a checkout of sse-proxy):",
            "",
            "```sh",
            _local(str(case.get("reproduce", "")), root),
            "```",
            "",
            "or by hand (sse-proxy installed, for the upstream):",
            "",
            *_by_hand(gw, row, case, report),
            "",
        ]
        up, gwside = case.get("upstream") or {}, case.get("gateway") or {}
        out += [
            "**Upstream sent / client got.** "
            f"ending {up.get('end')} / {gwside.get('end')}; usage {up.get('usage')} / "
            f"{gwside.get('usage')}; finish reasons {up.get('finish_reasons')} / "
            f"{gwside.get('finish_reasons')}; text {up.get('text_length')} / "
            f"{gwside.get('text_length')} characters; events {up.get('events')} / "
            f"{gwside.get('events')}.",
            "",
        ]
        if f.get("evidence"):
            out += ["**Evidence** (the events as the client got them, cut at 240 characters):", ""]
            out += [line[2:] for line in _evidence(f["evidence"])]
            out.append("")
        fix = str(f["fix"]).rstrip(".")
        out += [f"**Expected.** {fix[:1].upper()}{fix[1:]}.", ""]
        related = RELATED.get((gw.name, family))
        if related:
            out += [f"**Related.** {related}.", ""]
    return "\n".join(out)
