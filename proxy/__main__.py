"""`python -m proxy` is the same as the `sse-proxy` console script."""

from __future__ import annotations

from proxy.cli import main

raise SystemExit(main())
