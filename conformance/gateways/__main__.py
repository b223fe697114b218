"""`python -m conformance.gateways`: see the package's docstring."""

from __future__ import annotations

import argparse
import datetime
import json
import sys

from conformance.gateways import GATEWAYS, NOTES, OUT, PAGE, ROOT, ROWS, install, run_row, versions
from conformance.gateways.page import write_page


def main() -> int:
    parser = argparse.ArgumentParser(description="Regenerate docs/gateways.md.")
    parser.add_argument("--only", help="gateways or rows (e.g. litellm, portkey-openai)")
    parser.add_argument("--no-install", action="store_true", help="use what is installed")
    parser.add_argument("--page", action="store_true", help="only write the page from out/")
    args = parser.parse_args()
    wanted = args.only.split(",") if args.only else [g.name for g in GATEWAYS]
    rows = [r for g in GATEWAYS for r in g.rows if g.name in wanted or r.name in wanted]
    unknown = [w for w in wanted if w not in ROWS and all(g.name != w for g in GATEWAYS)]
    if unknown:
        parser.error(f"unknown gateway or row: {', '.join(unknown)}; rows: {', '.join(ROWS)}")
    if not args.page:
        if not args.no_install:
            install({r.gateway for r in rows})
        for row in rows:
            print(f"gateways: {row.name}", file=sys.stderr, flush=True)
            report = run_row(row)
            print(
                f"gateways: {row.name}: {report['cases_total']} cases, "
                f"{report['cases_failed']} failed",
                file=sys.stderr,
                flush=True,
            )
    reports = {
        name: json.loads((OUT / f"{name}.json").read_text())
        for name in ROWS
        if (OUT / f"{name}.json").is_file()
    }
    notes = write_page(
        PAGE, GATEWAYS, reports, versions(), datetime.date.today().isoformat(), NOTES
    )
    for path in [PAGE, *notes]:
        print(f"wrote {path.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
