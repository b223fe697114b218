"""Seeing a stream: the byte-strip model, the live inspector and the HTML reports.

:mod:`sse_proxy.inspect.strip` is pure (bytes in, a model out) so the pages and their tests
share one source of truth; :mod:`sse_proxy.inspect.registry` holds recent streams in bounded
memory; :mod:`sse_proxy.inspect.web` serves the inspector; :mod:`sse_proxy.inspect.report` writes
the self-contained HTML reports of ``check --html`` and ``test-client --html``.
"""

from __future__ import annotations
