"""Spark's Python daemon, whose workers read each zip archive's directory once per process.

PySpark calls ``importlib.invalidate_caches()`` at the start of every task. On Python 3.11 each
``zipimporter`` on the worker's path then reads its archive's whole directory again: pyspark's
zip (once per package imported from it), py4j's, and spark-core's jar (5,261 entries). That is
~0.12 s of CPU per task, most of a small frame's cost (docs/bench/notes/test-session.md). Python 3.12 made the
re-read lazy. Here an archive is read again only when its size or modification time changed.

Opt-in: a session whose workers run on an interpreter where this package is importable may name
this module as ``spark.python.daemon.module`` (in a Spark profile or ``--spark-conf``); the test
suite's profile does (tests/conftest.py), no session of the package does on its own. The daemon
forks every worker from this process, so each inherits the change. Spark's own daemon does the
rest, and all of it from Python 3.12 on, where the change is not made.
"""

from __future__ import annotations

import os
import sys
import zipimport

_reread = zipimport.zipimporter.invalidate_caches


def _stamp(archive: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(archive)
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


def _invalidate_when_changed(self: zipimport.zipimporter) -> None:
    stamp = _stamp(self.archive)
    if stamp is not None and getattr(self, "_intent_read_at", None) == stamp:
        return
    _reread(self)
    self._intent_read_at = stamp  # type: ignore[attr-defined]


def read_archives_once() -> None:
    """Every ``zipimporter`` of this process re-reads its archive only when it changed."""
    if sys.version_info < (3, 12):
        zipimport.zipimporter.invalidate_caches = _invalidate_when_changed  # type: ignore[method-assign]


if __name__ == "__main__":
    from pyspark.daemon import manager

    read_archives_once()
    manager()
