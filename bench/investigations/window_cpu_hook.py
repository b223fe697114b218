"""The proxy's CPU in a burst's window, measured inside the proxy (``burst_pair --window-cpu``).

Not imported: ``burst_pair`` copies this file as ``sitecustomize.py`` into a directory put
first on the contenders' ``PYTHONPATH``, so that it runs in every process they start and
acts in the proxies only (the bare aiohttp proxy, ``sse-proxy serve``). Written against
aiohttp's public classes, so it times any aiohttp proxy alike: a window opens at a burst's
first request (``Application._handle``) and closes at its ``BURST_WINDOW_STREAMS``-th
first byte (a response's first body write, or its handler's end without one); the
process's CPU time over the window, per request, is appended to
``$BURST_WINDOW_DIR/<pid>.txt``. This is the figure a burst's TTFB follows: whatever the
proxy spends in the window, on the starts or on anything else, the last starts wait for.

With ``BURST_WINDOW_MARKS=1`` (``bench.investigations.instructions --window``) a window's
start also calls ``os.getppid()`` and its end ``os.getpgrp()``: two C functions nothing
else in an aiohttp proxy calls, which callgrind is told to zero its counters before and to
dump them before (``--zero-before=os_getppid --dump-before=os_getpgrp``), so that each dump
is one window.

With ``BURST_WINDOW_OPCODES=1`` (``burst_pair --window-opcodes``) every bytecode run in a
window is counted by the function it ran in (``sys.settrace`` with opcode events: tens of
times slower, so the window's CPU figure means nothing then), and the counts so far are
written to ``<pid>.opcodes.json`` (``[[file, first line, name], count]`` rows, and the
windows and streams per window they are over): which code a burst's first bytes wait
for, function by function.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from typing import Any


def _install(out: str, streams: int) -> None:
    from aiohttp import web_app, web_response

    state = {"open": False, "n": 0, "cpu0": 0.0}
    marks = os.environ.get("BURST_WINDOW_MARKS") == "1"
    census = os.environ.get("BURST_WINDOW_OPCODES") == "1"
    path = os.path.join(out, f"{os.getpid()}.txt")
    owed = "_burst_window_owed"
    opcodes: Counter[tuple[str, int, str]] = Counter()
    windows = [0]

    def count(frame: Any, event: str, _arg: Any) -> Any:
        if event == "opcode":
            code = frame.f_code
            opcodes[(code.co_filename, code.co_firstlineno, code.co_name)] += 1
        return count

    def trace(frame: Any, _event: str, _arg: Any) -> Any:
        frame.f_trace_opcodes = True
        return count

    def started() -> None:
        if not state["open"]:
            state["open"] = True
            state["n"] = 0
            state["cpu0"] = time.process_time()
            if marks:
                os.getppid()  # callgrind: zero the counters (the window starts)
            if census:
                sys.settrace(trace)

    def first_byte() -> None:
        state["n"] += 1
        if state["open"] and state["n"] >= streams:
            state["open"] = False
            if marks:
                os.getpgrp()  # callgrind: dump the counters (the window ends)
            if census:
                sys.settrace(None)
                windows[0] += 1
                rows = [[list(key), n] for key, n in opcodes.items()]
                with open(os.path.join(out, f"{os.getpid()}.opcodes.json"), "w") as f:
                    json.dump({"windows": windows[0], "streams": streams, "rows": rows}, f)
            per_request = (time.process_time() - state["cpu0"]) / streams
            with open(path, "a") as f:
                f.write(f"{per_request * 1e6:.1f}\n")

    handle = web_app.Application._handle

    async def _handle(self: Any, request: Any) -> Any:
        started()
        request[owed] = True
        try:
            return await handle(self, request)
        finally:
            if request.get(owed):
                request[owed] = False
                first_byte()

    write = web_response.StreamResponse.write

    async def _write(self: Any, data: Any) -> None:
        request = self._req
        try:
            await write(self, data)
        finally:
            if request is not None and request.get(owed):
                request[owed] = False
                first_byte()

    web_app.Application._handle = _handle  # type: ignore[method-assign]
    web_response.StreamResponse.write = _write  # type: ignore[method-assign]


_argv = " ".join(getattr(sys, "orig_argv", sys.argv))
_out = os.environ.get("BURST_WINDOW_DIR")
if _out and ("_bare" in _argv or " serve " in f"{_argv} "):
    _install(_out, int(os.environ.get("BURST_WINDOW_STREAMS", "50")))
