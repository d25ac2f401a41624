"""Synthetic MicroLens-1M release: user-item view pairs and English video titles.

Why: MicroLens is the content-driven source (titles are the item's only metadata). Real
format: `MicroLens-1M_pairs.csv` with integer `user,item,timestamp` (13-digit Unix ms) and
`MicroLens-1M_titles.csv` with `item,title`, every title double-quoted, English phrases with
commas and `# hashtag` runs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from intent_spark.generate import GeneratedRelease
from intent_spark.generate.output import as_text, csv_bad_lines, join_lines
from intent_spark.generate.release import open_event_log, release_of
from intent_spark.generate.world import (
    Activity,
    Catalogue,
    iter_event_blocks,
    side_rng,
    source_catalogue,
    unix_ms,
)

DATASET = "microlens"
PAIRS_FILE = "MicroLens-1M_pairs.csv"
TITLES_FILE = "MicroLens-1M_titles.csv"
PAIRS_HEADER = "user,item,timestamp"
TITLES_HEADER = "item,title"
ACTIVITY = Activity(
    start_ms=unix_ms("2022-06-01T00:00:00"),
    end_ms=unix_ms("2023-06-01T00:00:00"),
    mean_events_per_user=9.0,
    max_events_per_user=5_000,
    session_continue=0.6,
    session_gap_ms=90_000.0,
)
ITEMS_FACTOR = 1.2
PHRASES = (
    "you can't guess the ending until you see the end",
    "even three hundred years old are not let go",
    "super hot, super fun, really",
    "this is so satisfying to watch",
    "wait for it, the last second is the best",
    "my heart is melting",
    "who else wants to try this",
    'the "secret" nobody tells you',
    "do it once and you will love it",
    "a thousand likes for this",
)


def item_title(catalogue: Catalogue, item: int, rng: np.random.Generator) -> str:
    """A title built from the item's words, with hashtags from its kind's vocabulary."""
    words = catalogue.words_of(item)
    kind_words = catalogue.kind_words(int(catalogue.item_kind[item]))
    phrase = PHRASES[int(rng.integers(0, len(PHRASES)))]
    tags = rng.choice(len(kind_words), int(rng.integers(1, 4)), replace=False)
    hashtags = " ".join(f"# {kind_words[t]}" for t in tags.tolist())
    return f"{words[0]} {words[1]} {words[2]} {words[3]}, {phrase}. {hashtags}"


def write_titles(path: Path, catalogue: Catalogue, rng: np.random.Generator) -> None:
    """One row per item id, titles always double-quoted as in the real file."""
    with path.open("w", encoding="utf-8", newline="") as handle:
        handle.write(TITLES_HEADER + "\n")
        for item in range(catalogue.n_items):
            title = item_title(catalogue, item, rng).replace('"', '""')
            handle.write(f'{item + 1},"{title}"\n')


def make_bad_lines(template: str) -> list[bytes]:
    """Eight bad rows: short row, two bad times, no user, no item, no time, bad bytes, header.

    MicroLens ids are plain tokens to ingest, so a non-numeric id is not a bad row.
    """
    return csv_bad_lines(
        template,
        PAIRS_HEADER,
        replacements=[(2, "not-a-date"), (2, "2022-13-45 99:00:00"), (0, ""), (1, ""), (2, "")],
        encoding_field=2,
    )


def generate(
    out_dir: Path,
    events: int,
    seed: int,
    dirty: bool,
    progress: Callable[[str], None] | None,
) -> GeneratedRelease:
    """Write the pairs (streamed, grouped by user in time order) and the titles."""
    catalogue = source_catalogue(DATASET, events, seed, ITEMS_FACTOR)
    bad_lines = make_bad_lines if dirty else None
    fallback = f"1,1,{ACTIVITY.start_ms}"
    with open_event_log(DATASET, seed, out_dir / PAIRS_FILE, PAIRS_HEADER, bad_lines, fallback) as pairs:
        for block in iter_event_blocks(DATASET, catalogue, ACTIVITY, events, seed, progress=progress):
            pairs.write(
                join_lines([as_text(block.user + 1), as_text(block.item + 1), as_text(block.time_ms)])
            )
    write_titles(out_dir / TITLES_FILE, catalogue, side_rng(DATASET, seed, 1))
    return release_of(DATASET, out_dir, (pairs.path, out_dir / TITLES_FILE), [pairs])
