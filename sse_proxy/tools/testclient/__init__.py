"""``sse-proxy test-client``: the harness (:mod:`.harness`), its plan, runs, diagnoses and
reports."""
