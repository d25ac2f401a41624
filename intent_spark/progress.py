"""Progress lines for long jobs: elapsed time and a message, on stderr."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable


def reporter(prefix: str = "intent") -> Callable[[str], None]:
    """A function that prints ``[prefix  12.3s] message`` to stderr, flushed at once."""
    start = time.monotonic()

    def report(message: str) -> None:
        print(f"[{prefix} {time.monotonic() - start:7.1f}s] {message}", file=sys.stderr, flush=True)

    return report
