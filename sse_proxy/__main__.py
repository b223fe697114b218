"""`python -m sse_proxy` is the same as the `sse-proxy` console script."""

from __future__ import annotations

from sse_proxy.cli import main

raise SystemExit(main())
