"""Progress lines for long jobs: elapsed time and a message, on stderr."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def reporter(prefix: str = "intent") -> Callable[[str], None]:
    """A function that prints ``[prefix  12.3s] message`` to stderr, flushed at once."""
    start = time.monotonic()

    def report(message: str) -> None:
        print(f"[{prefix} {time.monotonic() - start:7.1f}s] {message}", file=sys.stderr, flush=True)

    return report


@contextmanager
def spark_progress(
    spark: SparkSession, report: Callable[[str], None], label: str, every: float = 15.0
) -> Iterator[None]:
    """While the block runs, report the running Spark stages every ``every`` seconds: tasks done
    of all, elapsed, and an estimate of what is left from the tasks' pace so far. Silent for
    blocks shorter than ``every``; reads only the scheduler's task counts, never the data."""
    tracker = spark.sparkContext.statusTracker()
    finished = threading.Event()
    started = time.monotonic()

    first_seen: dict[int, tuple[float, int]] = {}  # stage -> (when, tasks done then)

    def watch() -> None:
        while not finished.wait(every):
            now = time.monotonic()
            stages = [s for s in map(tracker.getStageInfo, tracker.getActiveStageIds()) if s is not None]
            if not stages:
                report(f"{label}: {now - started:.0f}s elapsed, between Spark jobs")
                continue
            for stage in stages:
                first_seen.setdefault(stage.stageId, (now, stage.numCompletedTasks))
            done = sum(s.numCompletedTasks for s in stages)
            total = sum(s.numTasks for s in stages)
            since = min(first_seen[s.stageId][0] for s in stages)
            pace = (done - sum(first_seen[s.stageId][1] for s in stages)) / max(now - since, 1e-9)
            left = f", about {(total - done) / pace:.0f}s left in these" if pace > 0 else ""
            ids = ",".join(str(s.stageId) for s in stages)
            report(
                f"{label}: Spark stage {ids}: {done:,}/{total:,} tasks, {now - started:.0f}s elapsed{left}"
            )

    thread = threading.Thread(target=watch, name=f"progress {label}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        finished.set()
        thread.join()
