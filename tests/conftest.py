"""Suite-wide isolation: every test starts and ends with structlog's defaults.

Tests that configure logging (JSON to a StringIO, capture_logs) must not leak that
configuration into the next test, and a proxy started without configuration must not
print to the test runner's stdout.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import structlog


@pytest.fixture(autouse=True)
def _structlog_defaults() -> Iterator[None]:
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()
