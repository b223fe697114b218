"""Offline tools and the test tooling that ships: check, replay, demo, the mock upstream and
its fixtures, the stack that starts them, and the client-test harness. The product shell
(the server) imports none of this."""

from __future__ import annotations
