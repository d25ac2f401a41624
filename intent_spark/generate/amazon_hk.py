"""Synthetic Amazon Reviews 2023 release, Home_and_Kitchen category: reviews and item metadata.

Why: Amazon reviews are the sparse source (few events per user, 23 years of history with most
activity after 2015) and the one with JSON Lines input. Real format: one JSON object per line
(`json.dumps` spacing, non-ASCII kept), keys in the release's order, `timestamp` in Unix ms,
`parent_asin` as the item, 28-character `user_id`; metadata one object per `parent_asin`.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from intent_spark.generate import GeneratedRelease
from intent_spark.generate.output import as_text, join_lines
from intent_spark.generate.release import open_event_log, release_of
from intent_spark.generate.world import (
    Activity,
    Catalogue,
    EventBlock,
    ScatteredIds,
    alnum_strings,
    coin_words,
    iter_event_blocks,
    side_rng,
    source_catalogue,
    unix_ms,
)

DATASET = "amazon_hk"
REVIEWS_FILE = "Home_and_Kitchen.jsonl"
META_FILE = "meta_Home_and_Kitchen.jsonl"
REVIEW_KEYS = (
    "rating",
    "title",
    "text",
    "images",
    "asin",
    "parent_asin",
    "user_id",
    "timestamp",
    "helpful_vote",
    "verified_purchase",
)
ACTIVITY = Activity(
    start_ms=unix_ms("2000-01-01T00:00:00"),
    end_ms=unix_ms("2023-09-15T00:00:00"),
    mean_events_per_user=3.0,
    max_events_per_user=2_000,
    session_continue=0.3,
    session_gap_ms=3_600_000.0,
    time_warp=0.35,
)
ITEMS_FACTOR = 3.0
ASIN_HALF_RANGE = 1_410_554_953_709  # prime, about 36**8 / 2: parents below, variants above
ASIN_DIGITS = np.frombuffer(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", dtype=np.uint8)
TEXT_VARIANTS = 3
SECOND_LEVEL = (
    "Kitchen & Dining",
    "Bedding",
    "Bath",
    "Furniture",
    "Home Décor Products",
    "Storage & Organization",
    "Cleaning Supplies",
    "Wall Art",
    "Vacuums & Floor Care",
    "Heating, Cooling & Air Quality",
    "Irons & Steamers",
    "Event & Party Supplies",
)
MOODS = {
    1: ("Broke after a week", "Do not buy", "Very disappointed"),
    2: ("Not great", "Cheap feel", "Meh, returned it"),
    3: ("It's okay", "Does the job", "Average, nothing special"),
    4: ("Pretty good", "Nice for the price", "Works well"),
    5: ("Love it!", "Perfect, just perfect", "Five stars"),
}
FLOURISHES = (
    "",
    " Bought it for my café corner.",
    ' My wife says it is "the best".',
    " Très bien.",
)


def asin_strings(numbers: np.ndarray) -> pa.Array:
    """ASIN-like ids: `B0` then 8 base-36 characters of the number."""
    digits = np.empty((numbers.shape[0], 10), dtype=np.uint8)
    digits[:, 0] = ord("B")
    digits[:, 1] = ord("0")
    rest = numbers.astype(np.int64)
    for column in range(9, 1, -1):
        digits[:, column] = ASIN_DIGITS[rest % 36]
        rest //= 36
    return pa.array(np.ascontiguousarray(digits).view("S10").ravel().astype("U10"))


def review_texts(catalogue: Catalogue, rng: np.random.Generator) -> tuple[pa.Array, pa.Array]:
    """JSON-encoded review titles and texts, TEXT_VARIANTS per (kind, rating)."""
    titles: list[str] = []
    texts: list[str] = []
    for kind in range(catalogue.n_kinds):
        words = catalogue.kind_words(kind)
        for rating in range(1, 6):
            for variant in range(TEXT_VARIANTS):
                mood = MOODS[rating][variant]
                first, second, third = (words[int(i)] for i in rng.integers(0, len(words), 3))
                flourish = FLOURISHES[int(rng.integers(0, len(FLOURISHES)))]
                titles.append(json.dumps(mood, ensure_ascii=False))
                texts.append(
                    json.dumps(
                        f"The {first} {second} is {mood.lower()}. Used it with my {third}, "
                        f"and it fits.{flourish}",
                        ensure_ascii=False,
                    )
                )
    return pa.array(titles), pa.array(texts)


def review_lines(
    block: EventBlock,
    catalogue: Catalogue,
    quality: np.ndarray,
    parent_asin: pa.Array,
    variant_asin: pa.Array,
    titles: pa.Array,
    texts: pa.Array,
) -> tuple[pa.Array, np.ndarray]:
    """The JSON lines of one block's reviews, and their ratings."""
    rng = block.rng
    n = block.n_events
    item = block.item
    rating = np.clip(np.rint(quality[item] + rng.normal(0, 1.0, n)), 1, 5).astype(np.int64)
    text_index = (catalogue.item_kind[item] * 5 + rating - 1) * TEXT_VARIANTS + rng.integers(
        0, TEXT_VARIANTS, n
    )
    asin = pa.concat_arrays([parent_asin, variant_asin]).take(
        pa.array(item + np.where(rng.random(n) < 0.4, len(parent_asin), 0))
    )
    prefixes = pa.array(["AE", "AF", "AG"]).take(pa.array(rng.integers(0, 3, block.n_users)))
    user_text = pc.binary_join_element_wise(prefixes, pa.array(alnum_strings(rng, block.n_users, 26)), "")
    local_user = block.user - block.first_user
    helpful = np.where(rng.random(n) < 0.75, 0, rng.geometric(0.3, n))
    verified = rng.random(n) < 0.88
    pieces: list[pa.Array | str] = [
        '{"rating": ',
        pa.array([f"{r}.0" for r in range(6)]).take(pa.array(rating)),
        ', "title": ',
        titles.take(pa.array(text_index)),
        ', "text": ',
        texts.take(pa.array(text_index)),
        ', "images": [], "asin": "',
        asin,
        '", "parent_asin": "',
        parent_asin.take(pa.array(item)),
        '", "user_id": "',
        user_text.take(pa.array(local_user)),
        '", "timestamp": ',
        as_text(block.time_ms),
        ', "helpful_vote": ',
        as_text(helpful),
        ', "verified_purchase": ',
        pa.array(["false", "true"]).take(pa.array(verified.astype(np.int64))),
        "}",
    ]
    return join_lines(pieces, ""), rating


def write_meta(
    path: Path,
    catalogue: Catalogue,
    parent_asin: pa.Array,
    rating_sum: np.ndarray,
    rating_count: np.ndarray,
    quality: np.ndarray,
    rng: np.random.Generator,
) -> None:
    """One metadata object per parent_asin, ratings summarised from the generated reviews."""
    stores = coin_words(rng, catalogue.n_kinds * 3)
    kind_second = rng.integers(0, len(SECOND_LEVEL), catalogue.n_kinds)
    has_price = rng.random(catalogue.n_items) >= 0.3
    price = np.round(np.exp(rng.normal(3.0, 0.8, catalogue.n_items)), 2)
    has_store = rng.random(catalogue.n_items) >= 0.05
    store_choice = rng.integers(0, 3, catalogue.n_items)
    first_day = np.datetime64("2000-01-01", "D")
    span_days = (ACTIVITY.end_ms - ACTIVITY.start_ms) // 86_400_000
    with path.open("w", encoding="utf-8", newline="\n") as handle:
        for item in range(catalogue.n_items):
            kind = int(catalogue.item_kind[item])
            words = catalogue.words_of(item)
            kind_words = catalogue.kind_words(kind)
            store = stores[kind * 3 + int(store_choice[item])].capitalize()
            count = int(rating_count[item])
            average = rating_sum[item] / count if count else float(quality[item])
            available = first_day + int(catalogue.release[item] * span_days)
            available_text = available.astype(datetime.date).strftime("%B %-d, %Y")
            cafe = " for Café" if item % 17 == 0 else ""
            record = {
                "main_category": "Amazon Home",
                "title": f"{store} {words[0].capitalize()} {words[1]} {words[2]}, "
                f'{words[3]} "{words[4]}" Set of {2 + item % 5}{cafe}',
                "average_rating": round(min(5.0, max(1.0, average)), 1),
                "rating_number": count,
                "features": [f"{w.capitalize()} design, easy to clean" for w in words[1:4]],
                "description": [f"The {words[0]} {words[5]} for every {kind_words[6]}."] if item % 3 else [],
                "price": float(price[item]) if has_price[item] else None,
                "images": [],
                "videos": [],
                "store": store if has_store[item] else None,
                "categories": [
                    "Home & Kitchen",
                    SECOND_LEVEL[kind_second[kind]],
                    f"{kind_words[0].capitalize()} {kind_words[4].capitalize()}",
                ],
                "details": {
                    "Brand": store,
                    "Material": kind_words[5].capitalize(),
                    "Date First Available": available_text,
                },
                "parent_asin": str(parent_asin[item]),
                "bought_together": None,
            }
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")


def make_bad_lines(template: str) -> list[bytes]:
    """Eight bad lines: truncated JSON, string and null timestamps, empty user, empty item,
    non-numeric rating, invalid UTF-8 bytes, a JSON array instead of an object."""
    record = json.loads(template)

    def changed(key: str, value: object) -> bytes:
        return (json.dumps({**record, key: value}, ensure_ascii=False) + "\n").encode("utf-8")

    encoded = json.dumps(record, ensure_ascii=False)
    stamp = f'"timestamp": {record["timestamp"]}'.encode()
    broken = encoded.encode("utf-8").replace(stamp, stamp[:16] + b"\xff\xfe" + stamp[16:], 1)
    return [
        encoded[: len(encoded) // 2].encode("utf-8") + b"\n",
        changed("timestamp", "not-a-date"),
        changed("timestamp", None),
        changed("user_id", ""),
        changed("parent_asin", ""),
        changed("rating", "abc"),
        broken + b"\n",
        (json.dumps(list(REVIEW_KEYS)) + "\n").encode("utf-8"),
    ]


def generate(
    out_dir: Path,
    events: int,
    seed: int,
    dirty: bool,
    progress: Callable[[str], None] | None,
) -> GeneratedRelease:
    """Write the reviews (streamed, grouped by user) and the metadata of every item."""
    catalogue = source_catalogue(DATASET, events, seed, ITEMS_FACTOR)
    item_rng = side_rng(DATASET, seed, 1)
    index = np.arange(catalogue.n_items)
    parent_asin = asin_strings(ScatteredIds.draw(0, ASIN_HALF_RANGE, item_rng)(index))
    variant_asin = asin_strings(ScatteredIds.draw(ASIN_HALF_RANGE, ASIN_HALF_RANGE, item_rng)(index))
    quality = np.clip(item_rng.normal(4.1, 0.6, catalogue.n_items), 1.5, 5.0)
    titles, texts = review_texts(catalogue, item_rng)
    fallback = json.dumps(
        dict(
            zip(
                REVIEW_KEYS,
                (
                    5.0,
                    "Nice",
                    "Nice.",
                    [],
                    str(parent_asin[0]),
                    str(parent_asin[0]),
                    "AE" + "A" * 26,
                    ACTIVITY.start_ms,
                    0,
                    True,
                ),
                strict=True,
            )
        )
    )
    rating_sum = np.zeros(catalogue.n_items)
    rating_count = np.zeros(catalogue.n_items, dtype=np.int64)
    bad_lines = make_bad_lines if dirty else None
    with open_event_log(DATASET, seed, out_dir / REVIEWS_FILE, None, bad_lines, fallback) as reviews:
        for block in iter_event_blocks(DATASET, catalogue, ACTIVITY, events, seed, progress=progress):
            lines, rating = review_lines(block, catalogue, quality, parent_asin, variant_asin, titles, texts)
            reviews.write(lines)
            rating_sum += np.bincount(block.item, weights=rating, minlength=catalogue.n_items)
            rating_count += np.bincount(block.item, minlength=catalogue.n_items)
    write_meta(
        out_dir / META_FILE,
        catalogue,
        parent_asin,
        rating_sum,
        rating_count,
        quality,
        side_rng(DATASET, seed, 2),
    )
    return release_of(DATASET, out_dir, (reviews.path, out_dir / META_FILE), [reviews])
