"""Synthetic raw releases of the five public sources, file for file and byte for byte in format.

Why: the pipeline must run (and be benchmarked at any size) where the real releases cannot be
shipped. Each generator writes the same file names, columns, types, quoting and time formats as
the real release, so the ingest adapters read synthetic and real files through one code path.
The events come from a shared latent world (`world.py`) with planted structure: long-tailed
popularity, a hidden successor per item, repeats and items released over time.

Generation is seeded and deterministic (same seed and size give byte-identical files) and
streamed block by block, so any size fits in memory.

Example:
    >>> release = generate_release("rees46", Path("/tmp/raw"), events=10_000, seed=1)
    >>> sum(release.event_rows.values())
    10000
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

SOURCES = ("amazon_hk", "kuairand", "microlens", "hm", "rees46")  # the INTENT paper's five
EXTRA_SOURCES = ("cct",)  # card transactions (IBM TabFormer), the bank case
MIN_EVENTS = 50


@dataclass(frozen=True)
class GeneratedRelease:
    """What one generator wrote.

    `event_rows` and `bad_rows` are keyed by event-log file name; `event_rows` counts data rows
    (header excluded) including the injected bad rows, so raw rows = events + bad rows.
    """

    dataset: str
    root: Path
    files: tuple[Path, ...]
    event_rows: dict[str, int]
    bad_rows: dict[str, int]


def generate_release(
    dataset: str,
    out_dir: Path,
    events: int,
    seed: int = 0,
    dirty: bool = False,
    progress: Callable[[str], None] | None = None,
) -> GeneratedRelease:
    """Write a synthetic raw release of `dataset` with exactly `events` event rows under `out_dir`.

    With `dirty`, a handful of deliberately bad rows (one per kind of defect) are added on top,
    at seeded positions, to exercise the ingest rejects path.
    """
    if dataset not in (*SOURCES, *EXTRA_SOURCES):
        known = ", ".join((*SOURCES, *EXTRA_SOURCES))
        raise ValueError(f"unknown dataset {dataset!r}; expected one of {known}")
    if events < MIN_EVENTS:
        raise ValueError(f"events must be at least {MIN_EVENTS}, got {events}")
    module = importlib.import_module(f"{__name__}.{dataset}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    release: GeneratedRelease = module.generate(out_dir, events, seed, dirty, progress)
    return release


__all__ = ["EXTRA_SOURCES", "SOURCES", "GeneratedRelease", "generate_release"]
