"""The vendors' SDKs assemble the same message from every shape and token variant.

openai (Chat Completions and Responses), anthropic and google-genai, each through a real
proxy on loopback that applies the variant per request (the chaos header, as a user's own
test suite would: ``X-SSE-Proxy-Chaos: strategy=azure``), over the tool-call fixture, so
that the text and the calls are both checked. Each SDK assembles with its own helpers
(``stream().get_final_completion()``, ``get_final_response()``, ``get_final_message()``,
the chunks' parts), not with code of ours.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest
from google import genai
from google.genai import types

from sse_proxy.rechunk.shapes.rewriter import VARIANT_DIALECTS
from sse_proxy.rechunk.spec import VARIANTS
from sse_proxy.recording import Recording
from sse_proxy.tools.fixtures.content import TOOL_SCHEMAS
from sse_proxy.tools.fixtures.streams import tool_stream
from sse_proxy.tools.fixtures.tools import canonical_output, tool_output
from sse_proxy.tools.replay import make_replay_app
from tests.rechunk.test_shapes import SAMPLE, SAMPLE_TEXT
from tests.support.stack import StartApp, StartProxy

KEY = "sk-sse-proxy-test-not-a-real-key"
EXPECTED = tool_output(SAMPLE_TEXT)


def _header(name: str) -> dict[str, str]:
    """Every variant forced: the SDKs must assemble those their requests do not ask for
    (n > 1, thinking, include_usage...) too, as they do when a request asks."""
    return {"X-SSE-Proxy-Chaos": f"strategy={name}; seed=1; force=1"}


async def _openai_chat(url: str, name: str) -> str:
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0)
    tools: Any = [
        {"type": "function", "function": {"name": n, "parameters": s}}
        for n, s in TOOL_SCHEMAS.items()
    ]
    async with (
        client,
        client.chat.completions.stream(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "hi"}],
            tools=tools,
            extra_headers=_header(name),
        ) as stream,
    ):
        async for _ in stream:
            pass
        done = await stream.get_final_completion()
    message = done.choices[0].message
    calls = [(c.function.name, c.function.arguments) for c in message.tool_calls or []]
    return tool_output(message.content or "", calls)


async def _openai_responses(url: str, name: str) -> str:
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0)
    tools: Any = [
        {"type": "function", "name": n, "parameters": s, "strict": False}
        for n, s in TOOL_SCHEMAS.items()
    ]
    async with (
        client,
        client.responses.stream(
            model="gpt-4o-mini", input="hi", tools=tools, extra_headers=_header(name)
        ) as stream,
    ):
        async for _ in stream:
            pass
        done = await stream.get_final_response()
    calls = [(o.name, o.arguments) for o in done.output if o.type == "function_call"]
    return tool_output(done.output_text, calls)


async def _anthropic(url: str, name: str) -> str:
    client = anthropic.AsyncAnthropic(base_url=url, api_key=KEY, max_retries=0)
    tools: Any = [{"name": n, "input_schema": s} for n, s in TOOL_SCHEMAS.items()]
    async with (
        client,
        client.messages.stream(
            model="claude-sonnet-4-5",
            max_tokens=100,
            messages=[{"role": "user", "content": "hi"}],
            tools=tools,
            extra_headers=_header(name),
        ) as stream,
    ):
        async for _ in stream:
            pass
        message = await stream.get_final_message()
    text = "".join(b.text for b in message.content if b.type == "text")
    calls = [(b.name, json.dumps(b.input)) for b in message.content if b.type == "tool_use"]
    return tool_output(text, calls)


async def _gemini(url: str, name: str) -> str:
    client = genai.Client(api_key=KEY, http_options=types.HttpOptions(base_url=url))
    config = types.GenerateContentConfig(
        http_options=types.HttpOptions(headers=_header(name)),
        tools=[
            types.Tool(
                function_declarations=[
                    types.FunctionDeclaration(name=n, parameters_json_schema=s)
                    for n, s in TOOL_SCHEMAS.items()
                ]
            )
        ],
    )
    text: list[str] = []
    calls: list[tuple[str, str]] = []
    async for chunk in await client.aio.models.generate_content_stream(
        model="gemini-2.5-flash", contents="hi", config=config
    ):
        for cand in chunk.candidates or []:
            for part in (cand.content.parts if cand.content else None) or []:
                if part.text and not part.thought:
                    text.append(part.text)
                if part.function_call:
                    args = json.dumps(part.function_call.args or {})  # none: takes none
                    calls.append((part.function_call.name or "", args))
    return tool_output("".join(text), calls)


SDKS = {
    "openai": _openai_chat,
    "responses": _openai_responses,
    "anthropic": _anthropic,
    "gemini": _gemini,
}


@pytest.mark.asyncio
@pytest.mark.parametrize("dialect", list(SDKS))
# google-genai's async client subclasses aiohttp.ClientSession, which aiohttp discourages
@pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession:DeprecationWarning")
async def test_the_sdk_assembles_the_same_message_from_every_variant(
    dialect: str, start: StartProxy, start_app: StartApp
) -> None:
    body = tool_stream(dialect, SAMPLE)
    recording = Recording(
        request={"path": "/"},
        response={"status": 200, "headers": {"Content-Type": "text/event-stream"}},
        reads=((0.0, body),),
        end="upstream_eof",
    )
    upstream = await start_app(make_replay_app(recording, timing=False))
    url = await start(upstream, allow_chaos_header=True, log_level="error")
    names = [n for n in VARIANTS if VARIANT_DIALECTS[n] in (None, dialect)]
    wrong = {}
    for name in ["baseline", *names]:
        got = await SDKS[dialect](url, name if name != "baseline" else "coalesce")
        if canonical_output(got) != EXPECTED:
            wrong[name] = got[:200]
    assert not wrong, wrong
