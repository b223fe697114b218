"""Running the cases: the router, the gateway, one probe, then every case through both.

The probe finds out three things before any case runs: that the gateway answers at all,
which of the router's channels carries a case to it (:mod:`.router`), and which API the
gateway speaks to the upstream (the path it calls). The cases are then planned for that
API, by test-client's own planner: the gateway is the upstream's client, so it gets the
streams test-client gives a client, from the same stacks
(:func:`sse_proxy.tools.testclient.run.case_stack`), and every group test-client has
(faults and time faults included) is a group here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

import aiohttp

from sse_proxy.core import dialect_for_path
from sse_proxy.errors import UsageError
from sse_proxy.names import DIALECT_BODIES, DIALECT_PATHS, MOCK_DELAY_HEADER
from sse_proxy.tools.testclient.fixture import Fixture, load_fixture
from sse_proxy.tools.testclient.plan import (
    BASELINE,
    Case,
    HarnessOptions,
    fault_kinds,
    plan_cases,
)
from sse_proxy.tools.testclient.run import case_stack
from sse_proxy.tools.testclient.shapes import variants_for
from sse_proxy.tools.testgateway.client import stream_once
from sse_proxy.tools.testgateway.compare import Judgement, judge
from sse_proxy.tools.testgateway.gateway import GatewayError, GatewayProcess, fill, free_port
from sse_proxy.tools.testgateway.meaning import DIALECTS, Meaning, Transport, read_meaning
from sse_proxy.tools.testgateway.options import GatewayOptions
from sse_proxy.tools.testgateway.router import (
    CASE_HEADER,
    CaseRouter,
    Route,
    UpstreamCall,
    model_key,
)
from sse_proxy.tools.testgateway.wire import ResponseDecoder, WireError

__all__ = [
    "GatewayCase",
    "GatewayRun",
    "Setup",
    "client_body",
    "harness_options",
    "parse_headers",
    "plan",
    "run_gateway",
    "upstream_transport",
]

WARM_UP_ROUNDS: Final = 2
"""Rounds of streams (as many at once as the cases run) before the first case."""
_GRACE: Final = 5.0
"""Seconds the upstream side of a case may go on after the client's side ended."""


@dataclass(frozen=True, slots=True)
class Setup:
    """What the probe found."""

    channel: str
    upstream_dialect: str
    upstream_path: str
    ready_s: float
    command: tuple[str, ...]
    router_url: str
    gateway_url: str


@dataclass(slots=True)
class GatewayCase:
    """One case through the gateway, judged."""

    case: Case
    outcome: str
    duration: float
    judgement: Judgement | None = None
    upstream: Meaning | None = None
    gateway: Meaning | None = None
    calls: int = 0
    channel: str | None = None
    upstream_path: str | None = None
    note: str | None = None

    @property
    def passed(self) -> bool:
        return self.outcome == "pass"


@dataclass(slots=True)
class GatewayRun:
    setup: Setup
    results: list[GatewayCase] = field(default_factory=list)


def parse_headers(lines: Sequence[str], values: dict[str, str]) -> dict[str, str]:
    """``--header 'Name: value'`` lines, placeholders filled."""
    out: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep or not name.strip() or " " in name.strip():
            raise UsageError(f"--header: expected 'Name: value', got {line!r}")
        out[name.strip()] = fill(value.strip(), values)
    return out


def client_body(options: GatewayOptions, model: str | None = None) -> dict[str, Any]:
    """What the client sends: the dialect's streaming request (with the fixture's tools),
    asking for usage where the API makes that optional."""
    if options.tools:
        from sse_proxy.tools.fixtures.tools import tool_request_body

        body = tool_request_body(options.dialect)
    else:
        body = dict(DIALECT_BODIES[options.dialect])
    if options.model:
        body["model"] = options.model
    if model is not None:
        body["model"] = model
    if options.dialect == "openai" and options.usage:
        body["stream_options"] = {"include_usage": True}
    return body


def harness_options(options: GatewayOptions, dialect: str) -> HarnessOptions:
    """The same cases as `test-client` would run for a client of ``dialect``."""
    return HarnessOptions(
        command=options.command,
        dialect=dialect,
        only=options.only,
        skip=options.skip,
        seeds=options.seeds,
        seed=options.seed,
        exhaustive=options.exhaustive,
        timeout=options.timeout,
        jobs=options.jobs,
        chaos_k=options.chaos_k,
        tools=options.tools,
    )


def plan(options: GatewayOptions, fixture: Fixture) -> list[Case]:
    seeds = [options.seed] if options.seed is not None else list(range(1, options.seeds + 1))
    shapes, tokens = variants_for(fixture.dialect, tools=options.tools)
    return plan_cases(
        only=options.only,
        skip=options.skip,
        seeds=seeds,
        cut_points=max(len(fixture.short) - 1, 0),
        exhaustive=options.exhaustive,
        faults=fault_kinds(fixture.dialect),
        variants=[*shapes, *tokens],
    )


def upstream_transport(call: UpstreamCall) -> Transport:
    """What the upstream sent the gateway, read from the router's record of it."""
    decoder = ResponseDecoder()
    reads: list[tuple[float, bytes]] = []
    broken: str | None = None
    try:
        for at, raw in call.reads:
            reads.append((at, decoder.feed(raw)))
    except (WireError, ValueError) as exc:
        broken = f"unreadable response: {exc}"
    abandoned = call.end == "gateway_left" and not decoder.complete
    if call.end == "reset":
        broken = "the connection was reset"
    elif broken is None and not abandoned and decoder.status is not None and not decoder.complete:
        broken = "the connection closed inside the body"
    return Transport(
        decoder.status,
        decoder.headers.get("content-type", ""),
        reads,
        call.arrived,
        broken,
        abandoned,
    )


class _Runner:
    def __init__(
        self,
        options: GatewayOptions,
        router: CaseRouter,
        gateway: GatewayProcess,
        session: aiohttp.ClientSession,
        url: str,
        headers: dict[str, str],
    ) -> None:
        self.options = options
        self.router = router
        self.gateway = gateway
        self.session = session
        self.url = url
        self.headers = headers
        self.channel = "header"
        self.fixture: Fixture | None = None
        self.harness: HarnessOptions | None = None
        self.keys = 0

    def _key(self) -> str:
        self.keys += 1
        return f"c{self.keys}"

    async def _send(self, key: str, channel: str) -> tuple[Transport, bool]:
        model = None
        if channel == "model":
            model = model_key(client_body(self.options)["model"], key)
        return await stream_once(
            self.session,
            self.url,
            client_body(self.options, model),
            {**self.headers, CASE_HEADER: key},
            self.options.timeout,
        )

    async def probe(self) -> tuple[str, UpstreamCall]:
        """Which channel carries a case to the router, and the gateway's first upstream call.

        Every probe request is served (the probe's case is armed), so the gateway always
        gets a whole stream; what matters is how the case arrived."""
        fixture = load_fixture(self.options.dialect, None, tools=self.options.tools)
        harness = harness_options(self.options, self.options.dialect)
        wanted = self.options.case_key
        tries = ["header", "model"] if wanted == "auto" else [wanted]
        first: UpstreamCall | None = None
        last: tuple[Transport, bool] | None = None
        async with case_stack(harness, fixture, Case(BASELINE, None, 1)) as stack:
            host, port = _address(stack.url)
            for channel in tries:
                key = self._key()
                route = Route(key, host, port)
                self.router.add(route)
                self.router.armed = key
                try:
                    last = await self._send(key, channel)
                    await _settle(route)
                finally:
                    self.router.remove(key)
                if not route.calls:
                    continue
                call = route.calls[-1]
                first = first or call
                if call.channel == channel or wanted == "order":
                    await self._warm_up(route, channel)
                    return channel, call
            if first is not None and wanted == "auto":
                await self._warm_up(Route(self._key(), host, port), "order")
        if first is not None:
            if wanted != "auto":
                raise GatewayError(
                    f"--case-key {wanted}: the case did not reach the upstream that way (it "
                    f"came by {first.channel}); try --case-key auto"
                )
            return "order", first
        raise self._no_call(last)

    async def _warm_up(self, route: Route, channel: str) -> None:
        """A few streams before the cases, as many at once as the cases run: a gateway's
        first requests pay for its lazy start-up, which is not what a case measures."""
        route.key = self._key()
        self.router.add(route)
        self.router.armed = route.key
        try:
            for _ in range(WARM_UP_ROUNDS):
                jobs = 1 if channel == "order" else self.options.parallel
                await asyncio.gather(*(self._send(route.key, channel) for _ in range(jobs)))
        finally:
            self.router.remove(route.key)

    def _no_call(self, last: tuple[Transport, bool] | None) -> GatewayError:
        said = "nothing"
        if last is not None and last[1]:
            said = f"nothing within {self.options.timeout:g} s"
        elif last is not None:
            transport = last[0]
            body = b"".join(p for _, p in transport.reads)[:300].decode("utf-8", "replace")
            if transport.status is not None:
                said = f"HTTP {transport.status} {body.strip()}".strip()
            if transport.broken:
                said += f" ({transport.broken})"
        tail = self.gateway.tail()
        shown = "\n".join(f"  | {line}" for line in tail.splitlines()) or "  | (nothing)"
        return GatewayError(
            f"the gateway never called the upstream ({self.router.url}) for a streaming "
            f"request to {self.url}; it answered {said}. Check that it sends requests to "
            "SSE_PROXY_UPSTREAM_URL ({upstream}) and give it the --header options it needs. "
            f"Its last output lines:\n{shown}"
        )

    async def run_case(self, case: Case, sem: asyncio.Semaphore) -> GatewayCase:
        assert self.fixture is not None
        assert self.harness is not None
        async with sem:
            started = time.monotonic()
            key = self._key()
            async with case_stack(self.harness, self.fixture, case) as stack:
                host, port = _address(stack.url)
                extra = {}
                if case.group == BASELINE and self.options.pace_ms > 0:
                    extra[MOCK_DELAY_HEADER] = f"{self.options.pace_ms / 1000:g}"
                route = Route(key, host, port, extra)
                self.router.add(route)
                if self.channel == "order":
                    self.router.armed = key
                try:
                    transport, hung = await self._send(key, self.channel)
                    await _settle(route)
                finally:
                    self.router.remove(key)
            return self._judge(case, route, transport, hung, time.monotonic() - started)

    def _judge(
        self, case: Case, route: Route, transport: Transport, hung: bool, duration: float
    ) -> GatewayCase:
        result = GatewayCase(case, "pass", round(duration, 3), calls=len(route.calls))
        gw = read_meaning(self.options.dialect, transport)
        result.gateway = gw
        if not route.calls:
            result.outcome = "hang" if hung else "broken"
            result.note = (
                f"the gateway did not answer within {self.options.timeout:g} s"
                if hung
                else f"the gateway never called the upstream (it answered HTTP {gw.status})"
            )
            return result
        call = route.calls[-1]
        result.channel, result.upstream_path = call.channel, call.path
        up_dialect = dialect_for_path(call.path) or (self.fixture.dialect if self.fixture else "")
        up = read_meaning(up_dialect, upstream_transport(call))
        result.upstream = up
        result.judgement = judge(up, gw, usage_asked=self.options.usage)
        result.outcome = result.judgement.outcome
        if hung:
            result.outcome = "hang"
            result.note = (
                f"the gateway did not end its response within {self.options.timeout:g} s "
                f"(the upstream's {'ended' if call.end != 'open' else 'was still open'})"
            )
        if len(route.calls) > 1:
            extra = f"the gateway called the upstream {len(route.calls)} times for this case"
            result.note = _join(result.note, extra)
        return result


async def _settle(route: Route) -> None:
    """Wait (bounded) until every upstream call of the case has ended."""
    deadline = time.monotonic() + _GRACE
    for call in list(route.calls):
        left = deadline - time.monotonic()
        if left <= 0:
            return
        try:
            await asyncio.wait_for(call.done.wait(), left)
        except TimeoutError:
            return


async def _confirm_held(
    runner: _Runner, results: list[GatewayCase], sem: asyncio.Semaphore
) -> list[GatewayCase]:
    """Run each case held back (and nothing worse) once more: a delivery finding stands
    only when the rerun shows it too (a gateway's one-off pause is not its design)."""
    held = [i for i, r in enumerate(results) if r.outcome == "held"]
    again = await asyncio.gather(*(runner.run_case(results[i].case, sem) for i in held))
    out = list(results)
    for i, rerun in zip(held, again, strict=True):
        first = results[i]
        main = first.judgement.main if first.judgement is not None else None
        seen = f"{main.family}: {main.reason}" if main is not None else first.outcome
        if rerun.outcome == "held":
            first.note = _join(first.note, "held back on a rerun too")
        else:
            rerun.note = _join(rerun.note, f"on a first run, not on a rerun: {seen}")
            out[i] = rerun
    return out


def _join(note: str | None, more: str) -> str:
    return f"{note}; {more}" if note else more


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 80


async def run_gateway(options: GatewayOptions) -> GatewayRun:
    """Start the router and the gateway, probe, run every case; stop both."""
    router = CaseRouter()
    await router.start()
    port = free_port()
    values = {"upstream": router.url, "port": str(port)}
    command = tuple(fill(word, values) for word in options.command)
    headers = parse_headers(options.headers, values)
    env = {"SSE_PROXY_UPSTREAM_URL": router.url, "SSE_PROXY_GATEWAY_PORT": str(port)}
    gateway = GatewayProcess(command, env, options.gateway_log)
    try:
        await gateway.start()
        ready = await gateway.wait_ready(port, options.ready_path, options.ready_timeout)
        path = options.path or DIALECT_PATHS[options.dialect]
        url = f"http://127.0.0.1:{port}{path}"
        connector = aiohttp.TCPConnector(force_close=True, limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            runner = _Runner(options, router, gateway, session, url, headers)
            channel, call = await runner.probe()
            upstream = dialect_for_path(call.path)
            if upstream is None or upstream not in DIALECTS:
                raise GatewayError(
                    f"the gateway called {call.method} {call.path} on the upstream, which is "
                    "not the streaming endpoint of OpenAI Chat, OpenAI Responses or Anthropic"
                )
            runner.channel = channel
            runner.fixture = load_fixture(upstream, None, tools=options.tools)
            runner.harness = harness_options(options, upstream)
            cases = plan(options, runner.fixture)
            setup = Setup(channel, upstream, call.path, round(ready, 3), command, router.url, url)
            jobs = 1 if channel == "order" else options.parallel
            sem = asyncio.Semaphore(jobs)
            tasks = [asyncio.ensure_future(runner.run_case(c, sem)) for c in cases]
            try:
                results = list(await asyncio.gather(*tasks))
            except BaseException:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise
            results = await _confirm_held(runner, results, sem)
            gateway.check_alive()
            return GatewayRun(setup, results)
    finally:
        await gateway.stop()
        await router.stop()
