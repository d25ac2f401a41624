"""Synthetic REES46 multi-category store release: monthly event files, Oct 2019 .. Apr 2020.

Why: REES46 is the largest source (411.7M events) and the only one with a view/cart/purchase
funnel and an amount per event. Format of the real files: unquoted CSV, LF,
`event_time` as `2019-10-01 00:00:00 UTC`, 19-digit `category_id`, dotted `category_code` or
empty, lowercase `brand` or empty, `price` with 2 decimals, 9-digit `user_id`, UUID sessions.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from intent_spark.generate import GeneratedRelease
from intent_spark.generate.output import as_text, csv_bad_lines, join_lines
from intent_spark.generate.release import open_event_logs, release_of
from intent_spark.generate.world import (
    Activity,
    Catalogue,
    ScatteredIds,
    coin_words,
    iter_event_blocks,
    side_rng,
    source_catalogue,
    unix_ms,
    uuid_strings,
)

DATASET = "rees46"
HEADER = "event_time,event_type,product_id,category_id,category_code,brand,price,user_id,user_session"
MONTH_FILES = (
    "2019-Oct.csv",
    "2019-Nov.csv",
    "2019-Dec.csv",
    "2020-Jan.csv",
    "2020-Feb.csv",
    "2020-Mar.csv",
    "2020-Apr.csv",
)
FIRST_MONTH = np.datetime64("2019-10", "M")
ACTIVITY = Activity(
    start_ms=unix_ms("2019-10-01T00:00:00"),
    end_ms=unix_ms("2020-05-01T00:00:00"),
    mean_events_per_user=27.0,
    max_events_per_user=20_000,
    session_continue=0.8,
    session_gap_ms=45_000.0,
    cart_rate=0.06,
    purchase_rate=0.4,
)
ITEMS_FACTOR = 0.5
EVENT_TYPES = pa.array(["view", "cart", "purchase"])
TOP_CATEGORIES = (
    "electronics",
    "appliances",
    "computers",
    "furniture",
    "apparel",
    "construction",
    "kids",
    "auto",
    "sport",
    "accessories",
    "country_yard",
    "medicine",
    "stationery",
)
USER_IDS_MODULUS = 99_999_989  # prime; ids 500,000,000 .. 599,999,988
PRODUCT_IDS_MODULUS = 98_999_009  # prime; ids 1,000,978 .. 99,999,986


def product_ids(n_items: int, seed: int) -> np.ndarray:
    """The product_id of each item index (a seeded bijection; tests use it to find items)."""
    scatter = ScatteredIds.draw(1_000_978, PRODUCT_IDS_MODULUS, side_rng(DATASET, seed, 4))
    return scatter(np.arange(n_items))


def item_columns(
    catalogue: Catalogue, product_id: np.ndarray, rng: np.random.Generator
) -> dict[str, pa.Array]:
    """Per-item strings of the item columns (stable per item, as in the real data)."""
    n_kinds = catalogue.n_kinds
    spread = np.sort(rng.integers(0, 50_000_000_000_000_000, n_kinds)) + np.arange(n_kinds)
    category_ids = 2_053_013_550_000_000_000 + rng.permutation(spread)
    codes: list[str | None] = []
    for kind in range(n_kinds):
        words = catalogue.kind_words(kind)
        top = TOP_CATEGORIES[int(rng.integers(0, len(TOP_CATEGORIES)))]
        if rng.random() < 0.3:
            codes.append(None)
        elif rng.random() < 0.5:
            codes.append(f"{top}.{words[4]}.{words[0]}")
        else:
            codes.append(f"{top}.{words[0]}")
    brands_per_kind = 4
    brand_words = coin_words(rng, n_kinds * brands_per_kind)
    brand_choice = rng.integers(0, brands_per_kind, catalogue.n_items)
    has_brand = rng.random(catalogue.n_items) >= 0.4
    brands = [
        brand_words[kind * brands_per_kind + choice] if present else None
        for kind, choice, present in zip(
            catalogue.item_kind.tolist(), brand_choice.tolist(), has_brand.tolist(), strict=True
        )
    ]
    kind_price = np.exp(rng.normal(3.6, 1.0, n_kinds))
    price = np.maximum(0.77, kind_price[catalogue.item_kind] * np.exp(rng.normal(0, 0.3, catalogue.n_items)))
    item_kind = catalogue.item_kind
    return {
        "product_id": as_text(product_id),
        "category_id": as_text(category_ids).take(pa.array(item_kind)),
        "category_code": pa.array(codes, type=pa.string()).take(pa.array(item_kind)),
        "brand": pa.array(brands, type=pa.string()),
        "price": pa.array([f"{p:.2f}" for p in price.tolist()]),
    }


def make_bad_lines(template: str) -> list[bytes]:
    """Eight bad rows: short row, two bad times, no user, no item, bad price, bad bytes, header."""
    return csv_bad_lines(
        template,
        HEADER,
        replacements=[
            (0, "2019-13-45 99:00:00 UTC"),
            (0, "not-a-date"),
            (7, ""),
            (2, ""),
            (6, "abc"),
        ],
        encoding_field=0,
    )


def generate(
    out_dir: Path,
    events: int,
    seed: int,
    dirty: bool,
    progress: Callable[[str], None] | None,
) -> GeneratedRelease:
    """Write the seven monthly files; each event goes to the file of its month."""
    catalogue = source_catalogue(DATASET, events, seed, ITEMS_FACTOR)
    items = item_columns(catalogue, product_ids(catalogue.n_items, seed), side_rng(DATASET, seed, 1))
    user_ids = ScatteredIds.draw(500_000_000, USER_IDS_MODULUS, side_rng(DATASET, seed, 2))
    fallback = (
        f"2019-10-01 00:00:00 UTC,view,{items['product_id'][0]},{items['category_id'][0]},,,"
        f"{items['price'][0]},{user_ids(np.zeros(1, dtype=np.int64))[0]},"
        "00000000-0000-4000-8000-000000000000"
    )
    paths = [out_dir / name for name in MONTH_FILES]
    bad_lines = make_bad_lines if dirty else None
    with open_event_logs(DATASET, seed, paths, HEADER, bad_lines, fallback) as logs:
        for block in iter_event_blocks(DATASET, catalogue, ACTIVITY, events, seed, progress=progress):
            order = np.argsort(block.time_ms, kind="stable")
            seconds = block.time_ms[order] // 1000
            item = block.item[order]
            sessions = pa.array(uuid_strings(block.rng, block.n_sessions))
            # A timestamp[s] cast to string prints "2019-10-01 00:00:00", far faster than strftime.
            event_time = pc.binary_join_element_wise(
                pa.array(seconds, type=pa.timestamp("s")).cast(pa.string()), " UTC", ""
            )
            lines = join_lines(
                [
                    event_time,
                    EVENT_TYPES.take(pa.array(block.action[order])),
                    items["product_id"].take(pa.array(item)),
                    items["category_id"].take(pa.array(item)),
                    items["category_code"].take(pa.array(item)),
                    items["brand"].take(pa.array(item)),
                    items["price"].take(pa.array(item)),
                    as_text(user_ids(block.user[order])),
                    sessions.take(pa.array(block.session[order])),
                ]
            )
            month = (seconds.astype("datetime64[s]").astype("datetime64[M]") - FIRST_MONTH).astype(np.int64)
            bounds = np.searchsorted(month, np.arange(len(MONTH_FILES) + 1))
            for index, log in enumerate(logs):
                log.write(lines.slice(bounds[index], bounds[index + 1] - bounds[index]))
    return release_of(DATASET, out_dir, paths, logs)
