"""Every table that lists dialects is built from the core's registry, and covers all of it.

A dialect is added by writing its module (accumulator and :class:`Dialect`) and registering
it; these tests then fail until every table knows it: names and aliases, path hints, the
tracing provider, the stream metadata, the fixtures, the mock upstream, the test-client's
faults, the CLI. The last test fails when someone writes a new table of dialect names by
hand instead of reading the registry.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.trace import StatusCode

import sse_proxy
from sse_proxy.cli import build_parser
from sse_proxy.core import StreamReassembler, dialect_for_path, normalize_dialect
from sse_proxy.core.dialects.registry import DIALECTS, TEXT_DIALECTS, Dialect, DialectAccumulator
from sse_proxy.names import DIALECT_BODIES, DIALECT_PATHS, MOCK_FAULT_HEADER
from sse_proxy.server.tracing import RequestSpan
from sse_proxy.settings import Config
from sse_proxy.tools import fixtures
from sse_proxy.tools.fixtures.streams import SHAPES
from sse_proxy.tools.mock_upstream import mock_upstream
from sse_proxy.tools.testclient.diagnose import FAULT_RULES
from sse_proxy.tools.testclient.fixture import load_fixture
from sse_proxy.tools.testclient.plan import FAULT_KINDS, fault_kinds

GENERIC = {"text", "none"}
"""The dialects that are no LLM API: no provider, no terminal marker, no error event."""
RPC = {d.name for d in DIALECTS.values() if d.rpc}
"""The JSON-RPC dialects (MCP): a terminal marker and an error event, but no GenAI provider
and no model (a tool's result is no model's answer)."""
APIS = [d for d in DIALECTS.values() if d.name not in GENERIC]
TEXT = [DIALECTS[name] for name in TEXT_DIALECTS]


def _ids(dialects: list[Dialect]) -> list[str]:
    return [d.name for d in dialects]


def _reassemble(data: bytes, dialect: str | None = None, hint: str | None = None) -> Any:
    r = StreamReassembler(dialect, hint=hint, emit_events=False)
    alerts = [a.name for a in r.feed(data).alerts]
    alerts += [a.name for a in r.close().alerts]
    return r, alerts


def test_the_registry_is_consistent() -> None:
    """Names and aliases are unique and resolve; ``none`` is the only text-less dialect."""
    seen: dict[str, str] = {}
    for d in DIALECTS.values():
        for alias in (d.name, *d.aliases):
            assert alias not in seen, (alias, d.name, seen.get(alias))
            seen[alias] = d.name
            assert normalize_dialect(alias) == d.name
            assert normalize_dialect(alias.upper()) == d.name
            Config(upstream="http://127.0.0.1:1", dialect=alias)  # config validation
        assert d.title
    assert normalize_dialect("auto") is None
    assert [d.name for d in DIALECTS.values() if not d.carries_text] == ["none"]
    assert tuple(n for n in DIALECTS if n != "none") == TEXT_DIALECTS
    assert {d.name for d in DIALECTS.values() if not d.providers} == GENERIC | RPC


@pytest.mark.parametrize("described", DIALECTS.values(), ids=list(DIALECTS))
def test_every_accumulator_implements_the_protocol(described: Dialect) -> None:
    acc = described.accumulator([], keep_text=True)
    assert isinstance(acc, DialectAccumulator)
    assert acc.stream_meta().fields()["finish_reasons"] == []  # nothing seen yet


@pytest.mark.parametrize("described", APIS, ids=_ids(APIS))
def test_every_api_dialect_is_fully_described(described: Dialect) -> None:
    """Path hint, provider, terminal marker, error event: all there, and each true."""
    assert described.example_path is not None
    path = described.example_path.split("?")[0]
    assert dialect_for_path(path) == described.name
    assert dialect_for_path("/v1/models") is None
    provider = described.provider_for(path)
    if described.name in RPC:
        assert provider is None
        assert described.hint_headers
    else:
        assert provider is not None
        assert provider.name
        assert provider.system
        assert provider.operation
    assert described.terminal_marker
    assert described.terminal_frame
    assert described.error_frame
    assert described.json


@pytest.mark.parametrize("described", APIS, ids=_ids(APIS))
def test_the_terminal_frame_and_error_frame_are_the_dialects_own(described: Dialect) -> None:
    """The terminal frame marks the last frame of the clean fixture and no other; the error
    frame is reported as the dialect's error event, and ends the stream as described."""
    assert described.terminal_frame is not None
    assert described.error_frame is not None
    clean = fixtures.clean_stream(described.name)
    frames = [f for f in clean.split(b"\n\n") if f]
    marked = [i for i, f in enumerate(frames) if described.terminal_frame in f]
    assert marked == [len(frames) - 1]
    head = b"".join(f + b"\n\n" for f in frames[: len(frames) // 2])
    r, alerts = _reassemble(head + described.error_frame, described.name)
    expected = {"sse.error_event"} | (set() if described.error_ends_stream else {"sse.truncated"})
    assert set(alerts) == expected
    r, alerts = _reassemble(clean, None)
    assert (r.dialect, alerts) == (described.name, [])


@pytest.mark.parametrize("described", APIS, ids=_ids(APIS))
def test_every_api_dialect_reports_its_stream_meta(described: Dialect) -> None:
    """Model, response id and finish reasons from the fixture: what Gemini once lacked."""
    r, _ = _reassemble(fixtures.clean_stream(described.name), None)
    meta = r.stream_meta()
    assert (meta.response_model is None) == (described.name in RPC)
    assert meta.response_id is not None
    assert meta.finish_reasons


@pytest.mark.parametrize("described", DIALECTS.values(), ids=list(DIALECTS))
def test_trace_spans_name_every_api_provider(described: Dialect) -> None:
    span = TracerProvider().get_tracer("test").start_span("request")
    RequestSpan(span, StatusCode, described.example_path or "").stream(
        {"dialect": described.name, "model": "m"}
    )
    span.end()
    assert isinstance(span, ReadableSpan)  # the SDK's span: what it recorded can be read
    attributes = dict(span.attributes or {})
    provider = attributes.get("gen_ai.provider.name")
    assert (provider is None) == (described.name in GENERIC | RPC)
    if provider is not None:
        operation = attributes["gen_ai.operation.name"]
        assert attributes["gen_ai.system"]
        assert span.name == f"{operation} m"


def test_fixture_tables_cover_every_text_dialect() -> None:
    assert fixtures.DIALECTS == TEXT_DIALECTS
    assert set(SHAPES) == set(TEXT_DIALECTS)
    assert set(fixtures.FIRST_TEXT_DIALECTS) <= set(TEXT_DIALECTS)
    assert set(DIALECT_PATHS) == set(DIALECT_BODIES) == set(TEXT_DIALECTS)
    for name in TEXT_DIALECTS:
        r, alerts = _reassemble(fixtures.clean_stream(name), None, hint=name)
        assert (r.dialect, r.text, alerts) == (name, fixtures.MESSAGE, []), name
        for fault in fixtures.KINDS:
            data = fixtures.faulty_stream(fault, name)
            r, alerts = _reassemble(data, name)
            if fault != "oversized":  # megabytes: the reassembler drops the frame
                assert r.text == fixtures.expected_text(name, fault), (name, fault)
            assert set(alerts) == set(fixtures.expected_alerts(name, fault)), (name, fault)


@pytest.mark.asyncio
async def test_the_mock_upstream_streams_every_text_dialect() -> None:
    """Each dialect's example request streams its fixture, clean or broken."""
    async with mock_upstream(seed=2) as url, aiohttp.ClientSession() as session:
        for described in TEXT:
            assert described.example_path is not None
            for fault in (None, "error_event"):
                headers = {MOCK_FAULT_HEADER: fault} if fault else {}
                async with session.request(
                    described.example_method,
                    url + described.example_path,
                    json=described.example_body,
                    headers=headers,
                ) as resp:
                    assert resp.status == 200, described.name
                    body = await resp.read()
                want = (
                    fixtures.faulty_stream(fault, described.name)
                    if fault
                    else fixtures.clean_stream(described.name)
                )
                assert body == want, (described.name, fault)


@pytest.mark.parametrize("described", TEXT, ids=_ids(TEXT))
def test_the_test_client_breaks_every_dialect_its_own_way(described: Dialect) -> None:
    """Every fault of the faults group applies to every API, with its own error event and
    terminal marker; each broken stream raises the alert that names it."""
    kinds = fault_kinds(described.name)
    if described.name in GENERIC:
        assert kinds == ("reset",)
    else:
        assert kinds == tuple(FAULT_KINDS) == fixtures.ENDINGS
    fixture = load_fixture(described.name, None)
    raises = {
        "unterminated": "sse.unterminated_frame",
        "no_terminal": "sse.truncated",
        "error_event": "sse.error_event",
    }
    for kind in kinds:
        broken = fixture.fault(kind)
        assert broken.body != fixture.body, kind
        _, alerts = _reassemble(broken.body, described.name)
        if kind in raises:
            assert raises[kind] in alerts, (kind, alerts)


def test_the_cli_and_the_diagnoses_list_every_dialect(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    for name in TEXT_DIALECTS:
        args = parser.parse_args(["test-client", "--dialect", name, "--", "true"])
        assert args.dialect == name
    for command in ("check", "serve"):
        with pytest.raises(SystemExit):
            parser.parse_args([command, "--help"])
        help_text = capsys.readouterr().out
        for name in DIALECTS:
            assert name in help_text, (command, name)
    for described in APIS:
        assert f"{described.terminal_marker}" in FAULT_RULES["no_terminal"]


# Tables that must be written per dialect outside the core, each checked above to cover
# the registry: (module, the name it is bound to).
_ALLOWED_TABLES = {
    ("tools/fixtures/streams.py", "SHAPES"),
    ("tools/fixtures/streams.py", "FIRST_TEXT_DIALECTS"),
    # the dialects test-gateway reads, each with its own reading (a new dialect joins
    # test-gateway by an entry here, not by itself)
    ("tools/testgateway/meaning.py", "READINGS"),
}


def _bound_name(stmt: ast.stmt) -> str:
    if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return stmt.target.id
    return getattr(stmt, "name", "")


def test_no_table_of_dialect_names_is_written_by_hand() -> None:
    """Outside ``core/dialects``, no dict, tuple, list or set spells two dialect names:
    such a table goes stale when a dialect is added (as the tracing table once did)."""
    root = Path(sse_proxy.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        where = path.relative_to(root).as_posix()
        if where.startswith("core/dialects/"):
            continue
        for stmt in ast.parse(path.read_text(encoding="utf-8")).body:
            for node in ast.walk(stmt):
                if not isinstance(node, ast.Dict | ast.Tuple | ast.List | ast.Set):
                    continue
                items = node.keys if isinstance(node, ast.Dict) else node.elts
                names = [
                    i.value for i in items if isinstance(i, ast.Constant) and i.value in DIALECTS
                ]
                if len(names) >= 2 and (where, _bound_name(stmt)) not in _ALLOWED_TABLES:
                    found.append(f"{where}:{node.lineno} {names}")
    assert not found, "tables of dialect names outside the registry:\n" + "\n".join(found)
