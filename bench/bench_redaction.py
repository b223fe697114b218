"""Hand-run benchmark: the log scrubber (``redact_text``) stays linear on hostile input.

Not a test (the suite only checks what the scrubber removes): run it by hand and read the
figures::

    .venv/bin/python -m bench.bench_redaction [--size 200000] [--repeats 5]

For each input shape it times ``redact_text`` at n, 2n, 4n and 8n characters (best of
``--repeats``) and prints the time per doubling: about 2x is linear, about 4x quadratic.
The shapes: a long key-like word before a long secret (what once made the scrubber
quadratic), a long run of ``key=`` pairs, a typical log line repeated.
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable

from sse_proxy.obs.redact import redact_text

SHAPES: dict[str, Callable[[int], str]] = {
    "key-like word + secret": lambda n: "k" * (n // 2) + " token=" + "a" * (n // 2),
    "many key=value pairs": lambda n: "api_key=SECRET&" * (n // 15),
    "typical log lines": lambda n: (
        ("GET https://api.example.com/v1/chat?model=x failed: Authorization: Bearer sk-abc ")
        * (n // 80)
    ),
}


def _best(text: str, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        redact_text(text)
        best = min(best, time.perf_counter() - started)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=200_000, help="n, in characters")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    sizes = [args.size * k for k in (1, 2, 4, 8)]
    print(f"{'shape':<24} " + " ".join(f"{n:>12,}" for n in sizes) + "   per doubling")
    for name, make in SHAPES.items():
        times = [_best(make(n), args.repeats) for n in sizes]
        ratios = [b / a for a, b in itertools.pairwise(times) if a > 0]
        cells = " ".join(f"{t * 1000:>10.2f}ms" for t in times)
        print(f"{name:<24} {cells}   " + " ".join(f"{r:.1f}x" for r in ratios))
    print("about 2x per doubling is linear; about 4x is quadratic")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
