"""`sse-proxy test-client --dialect gemini` with the real google-genai SDK as the client."""

from __future__ import annotations

from pathlib import Path

from tests.tools.test_e2e_clients import client, run_test_client


def test_google_genai_sdk_streams_gemini_through_rechunking(tmp_path: Path) -> None:
    """google-genai survives character cuts and CRLF; it crashes on a BOM and
    on data-less blocks (observed with google-genai 3.6: its line parser takes the first
    field as JSON)."""
    run = run_test_client(
        tmp_path,
        client("gemini_sdk"),
        "--dialect",
        "gemini",
        "--only",
        "baseline,utf8,crlf,dataless",
        "--seeds",
        "1",
    )
    for group in ("baseline", "utf8", "crlf"):
        assert run.outcomes(group) == {"pass": 1}, (group, run.stdout)
    assert run.outcomes("dataless") == {"crash": 1}, run.stdout
    assert run.code == 1
    assert "dialect gemini" in run.stdout
