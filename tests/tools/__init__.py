"""Tests of sse_proxy.tools: check, replay, demo, the mock upstream and its fixtures,
test-client, and real clients under the harness."""
