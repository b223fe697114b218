"""`sse-proxy test-gateway -- CMD`: what an LLM gateway does to a stream, case by case.

A gateway is a client of the upstream and a server to the app, and both halves can break
a stream. The harness starts a case router (:mod:`.router`) as the gateway's upstream, then
CMD (:mod:`.gateway`); it streams every case of `test-client`'s plan through the gateway as
a correct client (:mod:`.client`), each case served from the same stack test-client serves
it from, and reads both sides after the stream ended (:mod:`.meaning`): what the upstream
sent against what reached the client, field by field (:mod:`.compare`). Modules:
:mod:`.options`, :mod:`.run` (the probe and the cases), :mod:`.report` (text, JSON,
JUnit, HTML), :mod:`.wire` (HTTP/1.1 as the router reads it), :mod:`.command` (the CLI).
"""

from __future__ import annotations
