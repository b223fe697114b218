"""The published conformance matrix (docs/conformance.md) still holds for a small subset.

Five rows of the matrix (one browser client under Chromium, two Python and two Node
clients), a few groups each, run as conformance/run.py runs them; a verdict that differs
from the page's fails the test: regenerate the page (`python conformance/run.py`) or fix
the regression. The Python clients are the test extra's (httpx-sse, sseclient-py); the
Node ones come from conformance/package-lock.json (`npm ci` by scripts/js-deps.sh).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from conformance.page import published
from conformance.run import BY_NAME, HERE, PAGE
from sse_proxy.tools.testclient.harness import HarnessOptions, run_test_client

SUBSET = (
    "browser-fetch-chromium",
    "httpx-sse",
    "sseclient-py",
    "eventsource-parser",
    "fetch-event-source",
)
GROUPS = ("baseline", "utf8", "cr", "bom", "dataless")


@pytest.mark.parametrize("name", SUBSET)
def test_a_verdict_as_published(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    client = BY_NAME[name]
    want = published(PAGE.read_text("utf-8"), name)
    assert want, f"{name} is not on the published page"
    monkeypatch.chdir(HERE)  # the clients' paths, and node_modules, are relative to it
    report = tmp_path / "report.json"
    if client.browser is not None:
        options = HarnessOptions(command=(), browser=client.browser, script=client.script)
    else:
        words = list(client.run)
        if words[0] == "python":
            words[0] = sys.executable
        assert words[0] != "node" or (HERE / "node_modules").is_dir(), "run scripts/js-deps.sh"
        options = HarnessOptions(command=tuple(words))
    options = HarnessOptions(
        **{
            **{f: getattr(options, f) for f in ("command", "browser", "script")},
            "dialect": client.dialect,
            "only": GROUPS,
            "seeds": 1,
            "jobs": 2,
            "keep_going": True,
            "report": str(report),
        }
    )
    with open(os.devnull, "w", encoding="utf-8") as out:
        run_test_client(options, out=out)
    got = json.loads(report.read_text("utf-8"))["summary"]
    for group in GROUPS:
        counts = got[group]
        bad = [o for o in ("wrong", "crash", "hang", "silent", "undelivered") if counts.get(o)]
        verdict = "pass" if not bad else "+".join(bad)
        assert verdict == want[group], (
            f"{name} {group}: the page says {want[group]}, now {verdict}; regenerate "
            "docs/conformance.md (python conformance/run.py) if the change is intended"
        )
