"""Tests of sse_proxy.obs: redaction, log rendering, the alert sink, metrics."""
