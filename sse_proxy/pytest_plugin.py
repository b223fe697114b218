"""pytest plugin (entry point ``pytest11``): run a Python client's own tests under chaos.

The fixture ``sse_chaos_proxy`` starts the built-in mock LLM upstream and a chaos proxy in
front of it, for one test, and hands the test the URLs to point its client at::

    import pytest
    from openai import OpenAI
    from sse_proxy.pytest_plugin import sse_chaos_strategies

    @pytest.mark.parametrize(
        "sse_chaos_proxy", sse_chaos_strategies(rewrites=False), indirect=True
    )
    def test_streaming_survives(sse_chaos_proxy):
        client = OpenAI(base_url=sse_chaos_proxy.openai_base_url, api_key="test")
        stream = client.chat.completions.create(model="m", messages=[], stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        sse_chaos_proxy.assert_text(text, "openai")  # fails with the diagnosis

``assert_text`` fails the test with test-client's diagnosis (the bug family, the fix, how
to rerun it) and says how many of the stream's cuts reached the client as reads of their
own; ``.delivery`` holds that count. The proxy's log goes to a file
(``sse-chaos-proxy.log`` in pytest's base temporary directory, named in each failure),
not into the test's captured output: a failure shows the diagnosis, not log lines.

The streams are planned as test-client plans them: a strategy that rewrites the syntax
(``bom``, ``crlf``, ``keepalive``...) gets the mock's stream whose first event carries text,
so a client that drops the first event (after a BOM, a leading comment) loses text and
fails. A shape variant that providers send only when the request asks for it (``n > 1``,
``include_usage``, tools) comes only to a request that asks, as from the proxy.

A parameter is ``"utf8"``, ``"random:7"`` (strategy and seed) or ``"utf8+crlf:3"``; the
marker ``@pytest.mark.sse_chaos("bytewise", seed=7)`` sets the same without parametrizing.
The servers run on their own event loop in a background thread, so synchronous clients
(``openai``, ``requests``, ``httpx.Client``) and async tests (pytest-asyncio, anyio) both
work. This module imports only pytest and the standard library at import time, so it
never slows down or breaks pytest start-up; the proxy is imported when a test asks for it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import shlex
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from sse_proxy.rechunk.spec import ChaosSpec
    from sse_proxy.tools.stack import Stack
    from sse_proxy.tools.testclient.watch import CaseWatch, Delivered

__all__ = ["SSEChaosProxy", "chaos_proxy", "sse_chaos_proxy", "sse_chaos_strategies"]

DEFAULT_STRATEGY = "random"
DEFAULT_SEED = 1
_START_TIMEOUT = 30.0


def sse_chaos_strategies(
    *,
    rewrites: bool = True,
    combos: bool = False,
    seeds: Sequence[int] | None = None,
    variants: str | None = None,
) -> list[str]:
    """Every strategy name, for ``parametrize(..., indirect=True)``.

    ``rewrites=False`` keeps only the re-chunking strategies (bytes unchanged), ``combos``
    adds the combinations `sse-proxy test-client` runs, ``seeds`` multiplies each name
    into ``name:seed`` entries. ``variants="openai"`` (a dialect) adds that dialect's shape
    variants (Azure's first chunk, ``include_usage``...) and the token variants.
    """
    from sse_proxy.rechunk.shapes.rewriter import VARIANT_DIALECTS
    from sse_proxy.rechunk.spec import REWRITES, STRATEGIES, VARIANTS

    names = list(STRATEGIES)
    if rewrites:
        names += REWRITES
    if variants is not None:
        names += [n for n in VARIANTS if VARIANT_DIALECTS[n] in (None, variants)]
    if combos:
        from sse_proxy.tools.testclient.plan import DEFAULT_COMBOS

        names += DEFAULT_COMBOS
    if seeds is None:
        return names
    return [f"{name}:{seed}" for name in names for seed in seeds]


def _parse_param(value: object) -> tuple[str, int | None]:
    """``"utf8"``, ``"random:7"``, ``("random", 7)`` or a ChaosSpec -> (strategy, seed)."""
    from sse_proxy.rechunk.spec import ChaosSpec

    if isinstance(value, ChaosSpec):
        return value.strategy, value.seed
    if isinstance(value, tuple) and len(value) == 2:
        strategy, seed = value
        if isinstance(strategy, str) and (seed is None or isinstance(seed, int)):
            return strategy, seed
    if isinstance(value, str):
        strategy, sep, seed_text = value.partition(":")
        if not sep:
            return strategy, None
        if seed_text.strip().isdigit():
            return strategy, int(seed_text)
    raise ValueError(
        f"sse_chaos_proxy parameter {value!r}: use 'STRATEGY' or 'STRATEGY:SEED' "
        "(e.g. 'utf8', 'random:7', 'utf8+crlf:3')"
    )


@dataclass
class SSEChaosProxy:
    """A running mock upstream and chaos proxy; point a client at :attr:`url`."""

    url: str
    upstream_url: str
    spec: ChaosSpec
    _server: _ServerThread | None = field(default=None, repr=False)
    nodeid: str | None = None
    """The test using it (the fixture sets it): the rerun command names it."""
    log_path: Path | None = None
    """Where the proxy's JSON log lines go (None: warnings only, on stderr)."""

    @property
    def strategy(self) -> str:
        return self.spec.strategy

    @property
    def seed(self) -> int:
        return self.spec.seed

    @property
    def openai_base_url(self) -> str:
        """For ``OpenAI(base_url=...)``: the proxy URL with ``/v1``."""
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """For ``Anthropic(base_url=...)``: the proxy URL without ``/v1``."""
        return self.url

    def stream_url(self, dialect: str = "openai") -> str:
        """The streaming endpoint of ``dialect`` (openai, responses, anthropic, text)."""
        from sse_proxy.names import DIALECT_PATHS

        if dialect not in DIALECT_PATHS:
            raise ValueError(f"dialect must be one of {', '.join(DIALECT_PATHS)}")
        return self.url + DIALECT_PATHS[dialect]

    def stream_body(self, dialect: str = "openai") -> dict[str, Any]:
        """A JSON request body that makes :meth:`stream_url` stream."""
        from sse_proxy.names import DIALECT_BODIES

        return dict(DIALECT_BODIES[dialect])

    def expected_text(self, dialect: str = "openai") -> str:
        """The exact text a correct client must print for this dialect's stream."""
        from sse_proxy.tools import fixtures

        return fixtures.expected_text(dialect)

    @property
    def delivery(self) -> Delivered | None:
        """The cuts of the streams so far, and how many reached the client as reads of
        their own (``str()``: "115 of 115 cuts read apart"); None before any stream."""
        watch = self._server.watch if self._server is not None else None
        return None if watch is None else watch.delivered()

    def assert_text(self, text: str, dialect: str = "openai", *, exit_code: int = 0) -> None:
        """Fail the test unless ``text`` is the exact expected text, with test-client's
        diagnosis: the bug family and why, the spec rule, the fix, and how to rerun it.

        ``exit_code``: give a non-zero value when the code under test reported an error.
        """
        expected = self.expected_text(dialect)
        if text == expected and exit_code == 0:
            return
        pytest.fail(self._failure(text, expected, exit_code), pytrace=False)

    def _failure(self, text: str, expected: str, exit_code: int) -> str:
        from sse_proxy.tools.testclient.diagnose import diagnose, first_difference
        from sse_proxy.tools.testclient.hints import hint_for

        watch = self._server.watch if self._server is not None else None
        found = diagnose(
            expected,
            text,
            exit_code=exit_code,
            timed_out=False,
            strategy="+".join(self.spec.strategies) or None,
            final_bytes=None if watch is None else watch.final_bytes(),
        )
        got = self.delivery
        lines = [
            f"sse_chaos_proxy: the text is not the expected one ({self.strategy} "
            f"seed={self.seed}{f'; {got}' if got is not None else ''})"
        ]
        if found is not None:
            lines.append(f"  diagnosis: {found.family}: {found.reason}")
            if found.rule:
                lines.append(f"  spec rule: {found.rule}")
            hint = hint_for(found.family, "python")
            if hint:
                lines.append(f"  fix (python): {hint}")
        if self.nodeid:
            lines.append(f"  reproduce: pytest {shlex.quote(self.nodeid)}")
        lines.append(
            f'  by hand:   with chaos_proxy("{self.strategy}", seed={self.seed}) as p: ...'
        )
        lines.append(f"  first difference {first_difference(expected, text)}")
        if self.log_path is not None:
            lines.append(f"  proxy log: {self.log_path}")
        return "\n".join(lines)

    def chaos_header(
        self, strategy: str, seed: int | None = None, *, force: bool = False
    ) -> dict[str, str]:
        """Headers that switch one request to another strategy (and seed); ``force``
        serves the shape variants the request does not ask for too (``n > 1``, tools)."""
        from sse_proxy.names import CHAOS_HEADER

        value = f"strategy={strategy}" + (f"; seed={seed}" if seed is not None else "")
        return {CHAOS_HEADER: value + ("; force=1" if force else "")}


class _ServerThread:
    """The mock upstream and the proxy on an event loop of their own, in a daemon thread,
    logging to ``log`` (JSON lines, appended; None: warnings and worse, on stderr)."""

    def __init__(self, spec: ChaosSpec, log: Path | None = None) -> None:
        self.spec = spec
        self.log = log
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stack: Stack | None = None
        self.watch: CaseWatch | None = None

    async def _up(self) -> tuple[str, str]:
        from sse_proxy.server.keys import STREAM_TAPS
        from sse_proxy.tools.lockstep import Lockstep
        from sse_proxy.tools.stack import start_stack
        from sse_proxy.tools.testclient.fixture import uses_first_text
        from sse_proxy.tools.testclient.watch import CaseWatch

        self._stack = await start_stack(
            mock_seed=self.spec.seed,
            # as test-client plans it: a rewrite gets a stream whose first event has text
            first_text=uses_first_text(self.spec.strategy),
            lockstep=Lockstep(),  # the proxy reads the mock's writes apart: same seed, same cuts
            mode="chaos",
            chaos=self.spec.strategy,
            seed=self.spec.seed,
            chaos_k=self.spec.k,
            delay_ms=self.spec.delay_ms,
            allow_chaos_header=True,
        )
        if self._stack._proxy is not None:
            self.watch = CaseWatch()
            self._stack._proxy.app[STREAM_TAPS].append(self.watch.tap)
        return self._stack.url, self._stack.upstream_url

    async def _down(self) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.stop()

    def start(self) -> tuple[str, str]:
        ready: concurrent.futures.Future[tuple[str, str]] = concurrent.futures.Future()

        def main() -> None:
            from sse_proxy.obs.logs import log_this_thread

            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            log_file = None
            try:
                if self.log is not None:
                    log_file = open(self.log, "a", encoding="utf-8")  # noqa: SIM115
                    log_this_thread(log_file, "info")
                else:
                    log_this_thread(sys.stderr, "warning")
                try:
                    urls = loop.run_until_complete(self._up())
                except Exception as exc:  # noqa: BLE001 - handed to the waiting test thread
                    loop.run_until_complete(self._down())
                    ready.set_exception(exc)
                    return
                ready.set_result(urls)
                loop.run_forever()
                loop.run_until_complete(self._down())
                pending = asyncio.all_tasks(loop)
                for task in pending:
                    task.cancel()
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                asyncio.set_event_loop(None)
                loop.close()
                log_this_thread(None)
                if log_file is not None:
                    log_file.close()

        self._thread = threading.Thread(target=main, name="sse-chaos-proxy", daemon=True)
        self._thread.start()
        return ready.result(timeout=_START_TIMEOUT)

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):  # already closed
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=_START_TIMEOUT)
        self._loop = self._thread = None


@contextlib.contextmanager
def chaos_proxy(
    strategy: str = DEFAULT_STRATEGY,
    seed: int | None = DEFAULT_SEED,
    *,
    k: int = 3,
    delay_ms: float = 0.0,
    log: str | os.PathLike[str] | None = None,
) -> Iterator[SSEChaosProxy]:
    """``with chaos_proxy("utf8", seed=7) as p:`` -- the fixture, outside pytest too.

    ``log``: a file the proxy's JSON log lines are appended to (default: only warnings and
    worse, on stderr)."""
    from sse_proxy.rechunk.spec import ChaosSpec

    spec = ChaosSpec.from_options(strategy, seed, k=k, delay_ms=delay_ms)
    path = None if log is None else Path(log)
    server = _ServerThread(spec, path)
    url, upstream = server.start()
    try:
        yield SSEChaosProxy(
            url=url, upstream_url=upstream, spec=spec, _server=server, log_path=path
        )
    finally:
        server.stop()


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker, so ``--strict-markers`` suites may use it."""
    config.addinivalue_line(
        "markers",
        "sse_chaos(strategy='random', seed=1, k=3, delay_ms=0): chaos settings for the "
        "sse_chaos_proxy fixture (sse-proxy)",
    )


@pytest.fixture
def sse_chaos_proxy(request: pytest.FixtureRequest) -> Iterator[SSEChaosProxy]:
    """A mock LLM upstream behind a chaos proxy, for this test only.

    Settings, first found wins: an indirect parameter (``"utf8"``, ``"random:7"``), the
    ``sse_chaos`` marker, else ``random`` with seed 1.
    """
    from sse_proxy.errors import ProxyError

    options: dict[str, Any] = {}
    marker = request.node.get_closest_marker("sse_chaos")
    strategy, seed = DEFAULT_STRATEGY, DEFAULT_SEED
    if marker is not None:
        if marker.args:
            strategy = marker.args[0]
        if len(marker.args) > 1:
            seed = marker.args[1]
        seed = marker.kwargs.get("seed", seed)
        strategy = marker.kwargs.get("strategy", strategy)
        options = {k: v for k, v in marker.kwargs.items() if k in ("k", "delay_ms")}
    param = getattr(request, "param", None)
    problem = None
    try:
        if param is not None:
            strategy, param_seed = _parse_param(param)
            seed = param_seed if param_seed is not None else seed
        base = request.getfixturevalue("tmp_path_factory").getbasetemp()
        cm = chaos_proxy(strategy, seed, **options, log=base / "sse-chaos-proxy.log")
        proxy = cm.__enter__()
        proxy.nodeid = request.node.nodeid
    except (ProxyError, ValueError) as exc:
        problem = f"sse_chaos_proxy: {exc}"
    if problem is not None:
        pytest.fail(problem, pytrace=False)
    try:
        yield proxy
    finally:
        cm.__exit__(None, None, None)
