"""Security: an attacker's requests over real loopback sockets must never reach what they
should not, and secrets must never surface. Helpers live in :mod:`tests.support`."""
