"""Hand-run reliability probes: each starts real processes and prints what it saw."""
