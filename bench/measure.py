"""Shared measurement helpers for the benchmark scripts (not part of the library)."""

from __future__ import annotations

import threading
import time

import psutil


class PeakMemory:
    """Largest resident set of this process tree seen while running."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.peak_driver = 0
        self.peak_python = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            children = me.children(recursive=True)
            self.peak_python = max(self.peak_python, me.memory_info().rss)
            jvm = sum(c.memory_info().rss for c in children if "java" in c.name())
            self.peak_driver = max(self.peak_driver, jvm)
            time.sleep(self.interval)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
