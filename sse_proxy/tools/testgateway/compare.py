"""What the gateway changed: the upstream's stream against what reached the client, field by
field, as pure functions of the two :class:`~.meaning.Meaning` values.

The verdict is the worst finding: ``masked`` (a broken stream made to look whole), then
``broken`` (a whole stream broken on the way), ``wrong`` (the answer, its calls, finish
reasons, usage, error events or the dialect's shape changed), ``held`` (only the delivery:
deltas held back into bursts, a slow first chunk). Changes that mean nothing to a client
(an id or a model name rewritten, fields reordered) are listed, never failed.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from dataclasses import dataclass, field
from itertools import pairwise
from statistics import median
from typing import Any, Final

from sse_proxy.core.dialects.registry import DIALECTS as REGISTRY
from sse_proxy.tools.testclient.diagnose import first_difference
from sse_proxy.tools.testgateway.meaning import Meaning

__all__ = [
    "FIXES",
    "OUTCOMES",
    "Delivery",
    "Finding",
    "Judgement",
    "delivery_of",
    "judge",
]

OUTCOMES: Final = ("pass", "masked", "broken", "wrong", "held", "hang")
"""``hang``: the gateway did not end its response within the case's timeout."""
_RANK: Final = {"masked": 4, "hang": 4, "broken": 3, "wrong": 2, "held": 1}
HELD_MIN: Final = 0.25
"""Seconds output may lag behind the upstream beyond its least lag before it is held back
(and at least a quarter of the time the upstream took to send its output)."""
SLOW_FIRST: Final = 1.0
"""Seconds the gateway may add to the time to the first output before that is a finding."""

_HOW_ENDED: Final = {
    "cut": "ended without its terminal marker",
    "unterminated": "stopped inside a frame",
    "error": "ended with an error event",
    "transport": "was cut off mid-body (a reset, or a close inside the HTTP body)",
    "refused": "answered an HTTP error",
    "whole": "ended with its terminal marker",
    "abandoned": "was left unread",
}
_FINISH: Final = {
    "stop": "stop",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "completed": "stop",
    "length": "length",
    "max_tokens": "length",
    "max_output_tokens": "length",
    "incomplete": "length",
    "tool_calls": "tool_calls",
    "tool_use": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
    "refusal": "content_filter",
}
_RULES: Final = {
    "usage_chunk_choices": (
        "usage chunk choices",
        "the usage chunk carries choices where the API sends `choices: []`: a client that "
        "reads choices[0].delta of every chunk takes it for a delta (or, checking for the "
        "empty list the API promises, misses the usage)",
    ),
    "done_sentinel": (
        "foreign [DONE]",
        "a `data: [DONE]` event this API never sends: its clients parse every data line as "
        "JSON and fail on it",
    ),
    "event_name": (
        "event name",
        "an event whose `event:` field is not its data's `type`",
    ),
    "invalid_json": (
        "invalid JSON",
        "data lines that are not JSON in a JSON dialect",
    ),
}

FIXES: Final[dict[str, str]] = {
    "ending (made a cut stream look whole)": (
        "pass the upstream's end on as it is: when the upstream's stream ends without its "
        "terminal marker (or is reset), end the client's response with the dialect's error "
        "event or abort it; never synthesize the terminal marker"
    ),
    "ending (hid a reset)": (
        "when the upstream connection fails mid-stream, send the dialect's error event or "
        "abort the client's response (no clean end of the chunked body)"
    ),
    "ending (broke a whole stream)": (
        "relay events the gateway cannot parse instead of ending the stream on them"
    ),
    "ending (cut a whole stream)": "relay the stream to its end",
    "ending (stopped reading the upstream)": (
        "parse the stream as the SSE specification says (the case names the rule), and "
        "relay what it cannot interpret instead of giving up on the stream"
    ),
    "ending (refused a whole stream)": "stream what the upstream streams",
    "usage (invented)": (
        "report usage only when the upstream did; put a local token estimate in a field of its own"
    ),
    "usage (dropped)": "pass the upstream's usage on (the include_usage chunk, message_delta)",
    "usage (changed)": "pass the upstream's token counts on unchanged",
    "error event (reworded)": (
        "pass the upstream's error event on with its type, code and message, so that clients "
        "can tell an overload (retry) from a bad request (do not retry)"
    ),
    "error event (swallowed)": "pass the upstream's error event on to the client",
    "text": "relay every text delta, unchanged",
    "reasoning": "relay the reasoning deltas",
    "tool calls": "relay every tool-call delta (name, id, argument fragments) unchanged",
    "finish reason": "pass the upstream's finish reason on",
    "choices (dropped)": "relay every choice of the stream (by its index)",
    "delivery (held back)": "write each event to the client as soon as it is parsed",
    "delivery (slow relay)": "relay an event in less time than the upstream takes to send one",
    "delivery (coalesced)": "relay each upstream delta as its own event",
    "delivery (slow first chunk)": "forward the first event without waiting",
    "shape (content type)": "answer a stream with Content-Type: text/event-stream",
    "shape (usage chunk choices)": (
        'send the usage chunk with `choices: []`, as the API does (OpenAI: "an empty '
        'choices array" on the last chunk of a stream with include_usage)'
    ),
    "shape (foreign [DONE])": "end the stream the way its API does, without `data: [DONE]`",
    "shape (event name)": "give every event the `event:` field its data's `type` names",
    "shape (invalid JSON)": "relay each event's data as it came",
    "shape (event names dropped)": "keep the `event:` field of every event",
}


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing the gateway changed that a client can notice."""

    outcome: str
    family: str
    reason: str
    evidence: str = ""

    @property
    def fix(self) -> str:
        base = self.family.split(" (", 1)[0]
        return FIXES.get(self.family) or FIXES.get(base) or _shape_fix(self.family)


def _shape_fix(family: str) -> str:
    if family.startswith("shape ("):
        return "send every event in the shape the API documents"
    return ""


@dataclass(frozen=True, slots=True)
class Delivery:
    """When the output arrived, through the gateway against the upstream (seconds)."""

    added_first_byte: float | None
    added_first_output: float | None
    upstream_events: int
    gateway_events: int
    upstream_span: float
    lag_median: float | None
    lag_max: float | None
    lag_min: float | None = None
    gateway_span: float = 0.0
    """Seconds from the first output the client got to the last."""
    upstream_gap_max: float = 0.0
    gateway_gap_max: float = 0.0
    """The longest time between two output events, as the upstream sent them and as the
    client got them."""

    @property
    def held_back(self) -> float:
        """How much later than its quickest the gateway let output through."""
        if self.lag_max is None or self.lag_min is None:
            return 0.0
        return max(0.0, self.lag_max - self.lag_min)

    def fields(self) -> dict[str, Any]:
        return {
            "added_first_byte_s": self.added_first_byte,
            "added_first_output_s": self.added_first_output,
            "upstream_output_events": self.upstream_events,
            "gateway_output_events": self.gateway_events,
            "upstream_output_span_s": round(self.upstream_span, 4),
            "gateway_output_span_s": round(self.gateway_span, 4),
            "upstream_gap_max_s": round(self.upstream_gap_max, 4),
            "gateway_gap_max_s": round(self.gateway_gap_max, 4),
            "lag_min_s": self.lag_min,
            "lag_median_s": self.lag_median,
            "lag_max_s": self.lag_max,
            "held_back_s": round(self.held_back, 4),
        }


@dataclass(frozen=True, slots=True)
class Judgement:
    """The verdict on one case: its outcome, the findings (worst first), benign changes."""

    outcome: str
    findings: tuple[Finding, ...]
    changes: tuple[str, ...]
    delivery: Delivery | None = None
    translation: str | None = None

    @property
    def passed(self) -> bool:
        return self.outcome == "pass"

    @property
    def main(self) -> Finding | None:
        return self.findings[0] if self.findings else None


@dataclass
class _Notes:
    findings: list[Finding] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)

    def add(self, outcome: str, family: str, reason: str, evidence: str = "") -> None:
        self.findings.append(Finding(outcome, family, reason, evidence))


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def delivery_of(up: Meaning, gw: Meaning) -> Delivery:
    """Lag of each output event through the gateway behind the moment the upstream had
    sent as much output (output is counted in characters, so a translated or re-cut stream
    compares too)."""
    added_byte = None
    if up.first_byte is not None and gw.first_byte is not None:
        added_byte = gw.first_byte - up.first_byte
    added_out = None
    if up.first_output is not None and gw.first_output is not None:
        added_out = gw.first_output - up.first_output
    lags: list[float] = []
    if up.output and gw.output:
        cums = [c for _, c in up.output]
        total = cums[-1]
        for at, cum in gw.output:
            i = min(bisect_left(cums, min(cum, total)), len(cums) - 1)
            lags.append((gw.started + at) - (up.started + up.output[i][0]))
    span = (up.output[-1][0] - up.output[0][0]) if up.output else 0.0
    gw_span = (gw.output[-1][0] - gw.output[0][0]) if gw.output else 0.0
    return Delivery(
        added_first_byte=_r(added_byte),
        added_first_output=_r(added_out),
        upstream_events=len(up.output),
        gateway_events=len(gw.output),
        upstream_span=span,
        lag_median=_r(median(lags)) if lags else None,
        lag_max=_r(max(lags)) if lags else None,
        lag_min=_r(min(lags)) if lags else None,
        gateway_span=gw_span,
        upstream_gap_max=_gap_max(up.output),
        gateway_gap_max=_gap_max(gw.output),
    )


def _gap_max(output: tuple[tuple[float, int], ...]) -> float:
    return max((b[0] - a[0] for a, b in pairwise(output)), default=0.0)


def _json_equal(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return bool(json.loads(a) == json.loads(b))
    except ValueError:
        return False


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _usage_text(usage: tuple[int | None, int | None]) -> str:
    return f"{usage[0]} input and {usage[1]} output tokens"


def _marker(dialect: str) -> str:
    """The dialect's terminal marker, as a client sees it (``data: [DONE]``)."""
    described = REGISTRY.get(dialect)
    marker = described.terminal_marker if described is not None else None
    if marker is None:
        return "its terminal marker"
    return f"data: {marker}" if marker.startswith("[") else marker


def _client_end(gw: Meaning) -> str:
    """How the client's stream ended, in a few words."""
    if gw.end == "refused":
        return f"answered HTTP {gw.status}"
    if gw.end == "error" and gw.errors:
        return f"ended the client's stream with an error event ({gw.errors[0].kind})"
    return f"the client's stream {_HOW_ENDED[gw.end]}"


def _ending(up: Meaning, gw: Meaning, notes: _Notes) -> None:
    marker = _marker(gw.dialect)
    if up.end == "abandoned":
        notes.add(
            "broken",
            "ending (stopped reading the upstream)",
            f"the gateway stopped reading the upstream's stream after {up.events} events "
            f"({up.bytes} bytes) and {_client_end(gw)}",
            gw.body_preview if gw.end == "refused" else "\n".join(gw.tail[-2:]),
        )
        return
    if up.whole and not gw.whole:
        if gw.end == "refused":
            notes.add(
                "broken",
                "ending (refused a whole stream)",
                f"the upstream streamed a whole answer; the gateway answered HTTP {gw.status}",
                gw.body_preview,
            )
        elif gw.end == "error":
            err = gw.errors[0] if gw.errors else None
            said = f" ({err.kind}: {_short(err.message)})" if err else ""
            notes.add(
                "broken",
                "ending (broke a whole stream)",
                f"the upstream's stream was whole; the gateway ended it with an error event"
                f"{said} after {len(gw.text)} of {len(up.text)} characters",
                "\n".join(gw.tail[-2:]),
            )
        else:
            notes.add(
                "broken",
                "ending (cut a whole stream)",
                f"the upstream's stream was whole; through the gateway it "
                f"{_HOW_ENDED[gw.end]}, after {len(gw.text)} of {len(up.text)} characters",
                "\n".join(gw.tail[-2:]),
            )
        return
    if not up.whole and gw.whole:
        appended = gw.sentinels > up.sentinels and gw.dialect == "openai"
        what = "appended `data: [DONE]`" if appended else f"ended it with `{marker}`"
        notes.add(
            "masked",
            "ending (made a cut stream look whole)",
            f"the upstream's stream {_HOW_ENDED[up.end]}; the gateway {what}: the client "
            "takes the broken answer for a whole one",
            "\n".join(gw.tail[-2:]),
        )
        return
    if up.end == "error":
        _errors(up, gw, notes)
        return
    if up.end == "transport" and gw.end in ("cut", "unterminated"):
        notes.add(
            "wrong",
            "ending (hid a reset)",
            "the upstream's connection was cut off mid-stream; the gateway ended its response "
            "cleanly, without an error event: only a client that checks for the terminal "
            f"marker ({marker}) notices",
            "\n".join(gw.tail[-2:]),
        )
        return
    if up.end != gw.end and gw.end == "error" and gw.errors:
        err = gw.errors[0]
        notes.changes.append(
            f"the upstream's stream {_HOW_ENDED[up.end]}; the gateway reported it as an error "
            f"event ({err.kind}: {_short(err.message, 100)})"
        )
    elif up.end != gw.end:
        notes.changes.append(f"ending: {up.end} upstream, {gw.end} through the gateway")


def _errors(up: Meaning, gw: Meaning, notes: _Notes) -> None:
    sent = up.errors[0] if up.errors else None
    said = f"{sent.kind}: {_short(sent.message)}" if sent else "an error"
    if gw.end != "error" or not gw.errors:
        notes.add(
            "wrong",
            "error event (swallowed)",
            f"the upstream sent an error event ({said}); through the gateway the stream "
            f"{_HOW_ENDED[gw.end]}, without it: the client cannot tell why the answer stopped",
            "\n".join(gw.tail[-2:]),
        )
        return
    got = gw.errors[0]
    same_kind = sent is not None and (got.kind == sent.kind or up.dialect != gw.dialect)
    kept = sent is not None and sent.message in got.message
    if same_kind and kept and (sent is None or got.message == sent.message):
        return
    if same_kind and kept:
        notes.changes.append(f"error message extended: {_short(got.message, 120)!r}")
        return
    notes.add(
        "wrong",
        "error event (reworded)",
        f"the upstream's error event ({said}) reached the client as "
        f"{got.kind}: {_short(got.message)}",
        f"upstream:        {sent.raw if sent else ''}\nthrough gateway: {got.raw}",
    )


def _answer(up: Meaning, gw: Meaning, notes: _Notes, translated: bool) -> None:
    if up.text != gw.text:
        if gw.text and up.text.startswith(gw.text):
            what = f"{len(gw.text)} of {len(up.text)} characters arrived (the end is missing)"
        elif gw.text and up.text.endswith(gw.text):
            lost = json.dumps(up.text[: len(up.text) - len(gw.text)][:40], ensure_ascii=False)
            what = f"the first {len(up.text) - len(gw.text)} characters ({lost}) are missing"
        else:
            what = f"the text differs {first_difference(up.text, gw.text)}"
        notes.add("wrong", "text", what)
    if up.reasoning and up.reasoning != gw.reasoning:
        what = "dropped" if not gw.reasoning else "changed"
        notes.add(
            "wrong",
            f"reasoning ({what})",
            f"the upstream streamed {len(up.reasoning)} characters of reasoning; "
            f"{len(gw.reasoning)} arrived",
        )
    _tool_calls(up, gw, notes)
    if not translated and gw.choices < up.choices:
        notes.add(
            "wrong",
            "choices (dropped)",
            f"the upstream streamed {up.choices} choices; {gw.choices} reached the client",
        )
    upf = tuple(_FINISH.get(f, f) for f in up.finish) if translated else up.finish
    gwf = tuple(_FINISH.get(f, f) for f in gw.finish) if translated else gw.finish
    if translated and up.calls and gw.calls:  # Responses says "completed" after calls too
        upf = tuple("tool_calls" if f == "stop" else f for f in upf)
        gwf = tuple("tool_calls" if f == "stop" else f for f in gwf)
    if upf and upf != gwf and up.whole:
        how = "dropped" if not gwf else "changed"
        notes.add(
            "wrong",
            f"finish reason ({how})",
            f"the upstream finished with {list(up.finish)}, the client got {list(gw.finish)}",
        )


def _tool_calls(up: Meaning, gw: Meaning, notes: _Notes) -> None:
    if not up.calls and not gw.calls:
        return
    if len(gw.calls) < len(up.calls):
        notes.add(
            "wrong",
            "tool calls (dropped)",
            f"the upstream streamed {len(up.calls)} tool calls; {len(gw.calls)} arrived",
            ", ".join(name for name, _ in up.calls),
        )
        return
    if len(gw.calls) > len(up.calls):
        notes.add(
            "wrong",
            "tool calls (added)",
            f"the upstream streamed {len(up.calls)} tool calls; {len(gw.calls)} arrived",
        )
        return
    for i, ((name, args), (gname, gargs)) in enumerate(zip(up.calls, gw.calls, strict=True)):
        if name != gname or not _json_equal(args, gargs):
            notes.add(
                "wrong",
                "tool calls (changed)",
                f"call {i}: the upstream sent {name} {_short(args)}, the client got "
                f"{gname} {_short(gargs)}",
            )
            return


def _usage(up: Meaning, gw: Meaning, notes: _Notes, asked: bool) -> None:
    if up.usage is None and gw.usage is not None:
        notes.add(
            "wrong",
            "usage (invented)",
            f"the upstream sent no usage; the gateway reported {_usage_text(gw.usage)}",
            gw.usage_raw or "",
        )
    elif up.usage is not None and gw.usage is None and asked:
        notes.add(
            "wrong",
            "usage (dropped)",
            f"the upstream reported {_usage_text(up.usage)}; the client got no usage",
            up.usage_raw or "",
        )
    elif up.usage is not None and gw.usage is not None and up.usage != gw.usage:
        notes.add(
            "wrong",
            "usage (changed)",
            f"the upstream reported {_usage_text(up.usage)}, the client got "
            f"{_usage_text(gw.usage)}",
            gw.usage_raw or "",
        )


def _shape(up: Meaning, gw: Meaning, notes: _Notes, translated: bool) -> None:
    if gw.status == 200 and "text/event-stream" not in gw.content_type.lower():
        notes.add(
            "wrong",
            "shape (content type)",
            f"the stream came as Content-Type {gw.content_type or '(none)'!r}",
        )
    had = {rule for rule, _ in up.violations} if not translated else set()
    seen: set[str] = set()
    for rule, event in gw.violations:
        if rule in had or rule in seen:
            continue
        seen.add(rule)
        name, why = _RULES.get(rule, (rule, rule))
        notes.add("wrong", f"shape ({name})", why, event)
    named = gw.unnamed - (up.unnamed if not translated else 0)
    if named > 0:
        notes.add(
            "wrong",
            "shape (event names dropped)",
            f"{named} events lost their `event:` field: listeners and parsers that dispatch "
            "on the event name miss them",
        )


def _delivery(d: Delivery, notes: _Notes) -> None:
    limit = max(HELD_MIN, d.upstream_span / 4)
    if d.held_back >= limit and d.upstream_span > 0:
        lags = (
            f"its lag behind the upstream: {d.lag_min or 0:.3f} s at least, "
            f"{d.lag_median or 0:.3f} s median, {d.lag_max or 0:.2f} s at most"
        )
        if d.gateway_span >= d.upstream_span + d.held_back / 2:
            # the output came as steadily as it was sent, only later and later: the
            # gateway relays more slowly than the upstream sends
            notes.add(
                "held",
                "delivery (slow relay)",
                f"the upstream sent its output in {d.upstream_span:.2f} s, the client got it "
                f"over {d.gateway_span:.2f} s: the gateway fell behind by up to "
                f"{d.held_back:.2f} s ({lags})",
            )
        else:
            notes.add(
                "held",
                "delivery (held back)",
                f"output reached the client up to {d.held_back:.2f} s later than the "
                f"gateway's quickest, then in a burst ({lags}; the upstream took "
                f"{d.upstream_span:.2f} s to send it, the client got it within "
                f"{d.gateway_span:.2f} s)",
            )
    if d.upstream_events >= 8 and d.gateway_events * 2 < d.upstream_events:
        notes.add(
            "held",
            "delivery (coalesced)",
            f"the upstream sent its output in {d.upstream_events} events; the client got "
            f"{d.gateway_events}",
        )
    if d.added_first_output is not None and d.added_first_output >= SLOW_FIRST:
        notes.add(
            "held",
            "delivery (slow first chunk)",
            f"the first output reached the client {d.added_first_output:.2f} s after the "
            "upstream sent it",
        )


def _benign(up: Meaning, gw: Meaning, notes: _Notes) -> None:
    if up.model and gw.model and up.model != gw.model:
        notes.changes.append(f"model: {up.model!r} -> {gw.model!r}")
    if up.response_id and gw.response_id and up.response_id != gw.response_id:
        notes.changes.append("response id rewritten")
    if up.events != gw.events:
        notes.changes.append(f"events: {up.events} -> {gw.events}")
    if up.bytes != gw.bytes:
        notes.changes.append(f"bytes: {up.bytes} -> {gw.bytes}")


def judge(
    up: Meaning, gw: Meaning, *, usage_asked: bool = True, delivery: bool = True
) -> Judgement:
    """Everything the gateway changed between ``up`` (what the upstream sent) and ``gw``
    (what reached the client), and the case's outcome."""
    translated = up.dialect != gw.dialect
    notes = _Notes()
    _ending(up, gw, notes)
    if gw.end != "refused":
        _answer(up, gw, notes, translated)
        _usage(up, gw, notes, usage_asked)
        _shape(up, gw, notes, translated)
    timing = delivery_of(up, gw)
    if delivery and gw.end != "refused":
        _delivery(timing, notes)
    _benign(up, gw, notes)
    findings = sorted(notes.findings, key=lambda f: -_RANK[f.outcome])
    outcome = findings[0].outcome if findings else "pass"
    return Judgement(
        outcome=outcome,
        findings=tuple(findings),
        changes=tuple(notes.changes),
        delivery=timing,
        translation=f"{gw.dialect} <- {up.dialect}" if translated else None,
    )
