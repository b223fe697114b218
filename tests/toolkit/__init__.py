"""Tests of the client-testing toolkit: replay, test-client, the pytest plugin, real clients."""
