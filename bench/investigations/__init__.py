"""One-off investigations kept for their method: each answered one question about the
proxy's cost once, and can answer it again on a later tree."""
