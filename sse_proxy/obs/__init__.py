"""Observability shared by the server and the tools: redaction, logging, the alert sink,
metrics. Nothing here knows about requests; the server binds what it knows to a logger
and hands alerts to a sink."""

from __future__ import annotations
