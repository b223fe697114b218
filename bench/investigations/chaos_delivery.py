"""Hand-run check that chaos reaches every client: every cut read apart, verdicts to rerun.

1. A Node ``fetch`` client with a fresh ``TextDecoder`` per read (docs/javascript's
   reference client with that one line changed) must fail ``utf8`` and ``random`` on
   every one of ``--seeds`` seeds each, with every cut read apart.
2. The reference client must pass the default run ``--runs`` times with the same table.

It takes minutes, so it is not a test; it prints what it saw and exits 1 when a claim
fails::

    .venv/bin/python -m bench.investigations.chaos_delivery              # 10 seeds, 2 default runs
    .venv/bin/python -m bench.investigations.chaos_delivery --seeds 3 --runs 0
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import ROOT

CLIENT = ROOT / "docs" / "javascript" / "sse-client.mjs"
CORRECT = "pending += decoder.decode(chunk, { stream: true });"
BUGGY = "pending += new TextDecoder().decode(chunk);"


def _test_client(args: list[str], report: Path) -> tuple[int, str, dict[str, Any], float]:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "sse_proxy", "test-client", "--report", str(report), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    took = time.monotonic() - started
    return proc.returncode, proc.stdout, json.loads(report.read_text()), took


def _table(stdout: str) -> str:
    """The report's tables, without the lines that vary by nature (none should)."""
    return stdout.split("\n\n== ", 1)[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--runs", type=int, default=2)
    opts = parser.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        source = CLIENT.read_text()
        assert source.count(CORRECT) == 1
        buggy = where / "buggy-client.mjs"
        buggy.write_text(source.replace(CORRECT, BUGGY))
        _, _, report, took = _test_client(
            ["--only", "utf8,random", "--seeds", str(opts.seeds), "--", "node", str(buggy)],
            where / "buggy.json",
        )
        print(f"fresh TextDecoder per read, utf8 and random x {opts.seeds} seeds ({took:.0f} s):")
        for case in report["cases"]:
            d = case["delivery"] or {}
            fffd = case.get("output", "").count("\ufffd")
            family = (case.get("diagnosis") or {}).get("family")
            caught = case["outcome"] != "pass" and family == "character boundary"
            apart = d.get("read_apart") == d.get("cuts")
            ok &= caught and apart
            print(
                f"  {case['name']:<18} {case['outcome']:<6} {family or '':<20} "
                f"{d.get('read_apart')}/{d.get('cuts')} cuts read apart, {fffd} U+FFFD"
                + ("" if caught and apart else "   <-- NOT CAUGHT OR NOT DELIVERED")
            )
        tables = []
        for run in range(opts.runs):
            code, out, report, took = _test_client(
                ["--", "node", str(CLIENT)], where / f"good{run}.json"
            )
            tables.append(_table(out))
            print(f"reference client, default run {run + 1}: exit {code}, {took:.0f} s")
            print(report["delivery"])
            ok &= code == 0
        if tables:
            same = all(t == tables[0] for t in tables)
            ok &= same
            print("the same table every run" if same else "THE TABLES DIFFER")
            print(tables[0])
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
