"""Hand-run fuzzers for sse-proxy (not part of the test suite); see fuzz/README.md."""

from __future__ import annotations
