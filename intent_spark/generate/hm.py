"""Synthetic H&M Personalized Fashion Recommendations release (Kaggle raw form).

Why: H&M has only purchase dates (many purchases of a customer share one `t_dat`), a price
per transaction and rich article and customer tables. Real raw format: `transactions_train.csv`
(`t_dat` as `2018-09-20`, 64-hex `customer_id`, 10-character zero-padded `article_id`, price as
a long float, channel 1 or 2), `articles.csv` without an index column, with quoted free text
(some with embedded newlines), and `customers.csv` with `1.0`/empty flags and integer ages.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

from intent_spark.generate import GeneratedRelease
from intent_spark.generate.output import EventLogFile, as_text, csv_bad_lines, join_lines
from intent_spark.generate.release import open_event_log, release_of
from intent_spark.generate.world import (
    Activity,
    Catalogue,
    EventBlock,
    hex_strings,
    iter_event_blocks,
    side_rng,
    source_catalogue,
    unix_ms,
)

DATASET = "hm"
TRANSACTIONS_FILE = "transactions_train.csv"
ARTICLES_FILE = "articles.csv"
CUSTOMERS_FILE = "customers.csv"
TRANSACTIONS_HEADER = "t_dat,customer_id,article_id,price,sales_channel_id"
CUSTOMERS_HEADER = "customer_id,FN,Active,club_member_status,fashion_news_frequency,age,postal_code"
ARTICLES_COLUMNS = (
    "article_id",
    "product_code",
    "prod_name",
    "product_type_no",
    "product_type_name",
    "product_group_name",
    "graphical_appearance_no",
    "graphical_appearance_name",
    "colour_group_code",
    "colour_group_name",
    "perceived_colour_value_id",
    "perceived_colour_value_name",
    "perceived_colour_master_id",
    "perceived_colour_master_name",
    "department_no",
    "department_name",
    "index_code",
    "index_name",
    "index_group_no",
    "index_group_name",
    "section_no",
    "section_name",
    "garment_group_no",
    "garment_group_name",
    "detail_desc",
)
ACTIVITY = Activity(
    start_ms=unix_ms("2018-09-20T00:00:00"),
    end_ms=unix_ms("2020-09-23T00:00:00"),
    mean_events_per_user=23.0,
    max_events_per_user=5_000,
    session_continue=0.7,
    session_gap_ms=240_000.0,
)
ITEMS_FACTOR = 0.6
PRICE_SCALE = 590.0
SEK_PRICES = (9.99, 12.99, 14.99, 17.99, 19.99, 24.99, 29.99, 34.99, 39.99, 49.99, 59.99, 79.99)

GARMENTS = (
    "top",
    "trousers",
    "dress",
    "sweater",
    "t-shirt",
    "shorts",
    "skirt",
    "blouse",
    "shirt",
    "jacket",
    "bra",
    "briefs",
    "socks",
    "cardigan",
    "hoodie",
    "leggings",
    "coat",
    "bikini top",
    "swimsuit",
    "pyjama set",
    "hat",
    "scarf",
    "bag",
    "earrings",
    "boots",
    "sneakers",
)
PRODUCT_GROUPS = (
    "Garment Upper body",
    "Garment Lower body",
    "Garment Full body",
    "Accessories",
    "Underwear",
    "Shoes",
    "Swimwear",
    "Socks & Tights",
    "Nightwear",
    "Unknown",
    "Cosmetic",
    "Bags",
)
APPEARANCES = (
    (1010016, "Solid"),
    (1010017, "Stripe"),
    (1010001, "All over pattern"),
    (1010010, "Melange"),
    (1010004, "Check"),
    (1010008, "Front print"),
    (1010014, "Placement print"),
    (1010023, "Denim"),
    (1010005, "Colour blocking"),
    (1010021, "Lace"),
)
COLOUR_GROUPS = (
    (9, "Black"),
    (10, "White"),
    (11, "Off White"),
    (73, "Dark Blue"),
    (13, "Beige"),
    (12, "Light Beige"),
    (7, "Grey"),
    (72, "Blue"),
    (8, "Dark Grey"),
    (43, "Dark Red"),
    (52, "Pink"),
    (6, "Light Grey"),
    (93, "Dark Green"),
    (19, "Greenish Khaki"),
)
COLOUR_VALUES = (
    (1, "Dusty Light"),
    (2, "Light"),
    (3, "Medium Dusty"),
    (4, "Dark"),
    (5, "Bright"),
    (6, "Medium"),
    (7, "Undefined"),
)
COLOUR_MASTERS = (
    (5, "Black"),
    (9, "White"),
    (2, "Blue"),
    (11, "Beige"),
    (12, "Grey"),
    (4, "Pink"),
    (18, "Red"),
    (19, "Khaki green"),
    (20, "Brown"),
    (3, "Lilac Purple"),
)
INDEXES = (
    ("A", "Ladieswear", 1, "Ladieswear"),
    ("B", "Lingeries/Tights", 1, "Ladieswear"),
    ("C", "Ladies Accessories", 1, "Ladieswear"),
    ("D", "Divided", 2, "Divided"),
    ("F", "Menswear", 3, "Menswear"),
    ("G", "Baby Sizes 50-98", 4, "Baby/Children"),
    ("H", "Children Sizes 92-140", 4, "Baby/Children"),
    ("I", "Children Sizes 134-170", 4, "Baby/Children"),
    ("J", "Children Accessories, Swimwear", 4, "Baby/Children"),
    ("S", "Sport", 26, "Sport"),
)
GARMENT_GROUPS = (
    (1002, "Jersey Basic"),
    (1017, "Under-, Nightwear"),
    (1005, "Jersey Fancy"),
    (1009, "Trousers"),
    (1013, "Dresses Ladies"),
    (1019, "Accessories"),
    (1010, "Blouses"),
    (1003, "Knitwear"),
    (1011, "Shirts"),
    (1021, "Socks and Tights"),
    (1025, "Shorts"),
    (1023, "Special Offers"),
)


def article_ids(catalogue: Catalogue, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Product codes and article ids: a product is a run of 1-4 articles of one kind."""
    n_items = catalogue.n_items
    in_kind = catalogue.cycle_position[catalogue.cycle_items]
    new_product = (in_kind == 0) | (rng.random(n_items) < 0.45)
    product_number = np.cumsum(new_product) - 1
    n_products = int(product_number[-1]) + 1
    run_start = np.maximum.accumulate(np.where(new_product, np.arange(n_items), 0))
    variant = np.arange(n_items) - run_start
    step = max(1, 850_000 // n_products)
    codes = 108_775 + np.cumsum(rng.integers(1, 2 * step + 1, n_products)) - 1
    product_code = np.empty(n_items, dtype=np.int64)
    article_id = np.empty(n_items, dtype=np.int64)
    product_code[catalogue.cycle_items] = codes[product_number]
    article_id[catalogue.cycle_items] = codes[product_number] * 1000 + 1 + (variant * 11) % 999
    return product_code, article_id


def item_prices(catalogue: Catalogue, rng: np.random.Generator) -> tuple[pa.Array, pa.Array]:
    """Full and sale price per article, in the real file's scaled units (SEK / 590)."""
    kind_level = rng.integers(0, len(SEK_PRICES) - 3, catalogue.n_kinds)
    level = kind_level[catalogue.item_kind] + rng.integers(0, 4, catalogue.n_items)
    full = np.asarray(SEK_PRICES)[level] / PRICE_SCALE
    sale = full * rng.choice([0.5, 0.6, 0.7], catalogue.n_items)
    return (
        pa.array([repr(round(p, 16)) for p in full.tolist()]),
        pa.array([repr(round(p, 16)) for p in sale.tolist()]),
    )


def write_articles(
    path: Path,
    catalogue: Catalogue,
    product_code: np.ndarray,
    article_id: np.ndarray,
    rng: np.random.Generator,
) -> None:
    """One row per article (bought or not), Kaggle raw columns, minimal quoting."""
    kind_garment = rng.integers(0, len(GARMENTS), catalogue.n_kinds)
    kind_group = rng.integers(0, len(PRODUCT_GROUPS), catalogue.n_kinds)
    kind_index = rng.integers(0, len(INDEXES), catalogue.n_kinds)
    kind_garment_group = rng.integers(0, len(GARMENT_GROUPS), catalogue.n_kinds)
    appearance = rng.integers(0, len(APPEARANCES), catalogue.n_items)
    colour = rng.integers(0, len(COLOUR_GROUPS), catalogue.n_items)
    colour_value = rng.integers(0, len(COLOUR_VALUES), catalogue.n_items)
    colour_master = rng.integers(0, len(COLOUR_MASTERS), catalogue.n_items)
    description_style = rng.random(catalogue.n_items)
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(ARTICLES_COLUMNS)
        for item in np.argsort(article_id, kind="stable").tolist():
            kind = int(catalogue.item_kind[item])
            words = catalogue.words_of(item)
            kind_words = catalogue.kind_words(kind)
            garment = GARMENTS[kind_garment[kind]]
            index_code, index_name, index_group_no, index_group_name = INDEXES[kind_index[kind]]
            garment_group_no, garment_group_name = GARMENT_GROUPS[kind_garment_group[kind]]
            style = description_style[item]
            description = f"{words[1].capitalize()} {garment} in {words[2]} {words[3]}"
            if style < 0.5:
                description += f", {words[0]} details and {words[4]} {words[5]} trims."
            elif style < 0.98:
                description += f" with {words[0]} {words[4]}."
            else:
                description += f".\n{words[0].capitalize()} {words[5]} fit."
            writer.writerow(
                (
                    f"{article_id[item]:010d}",
                    f"{product_code[item]:07d}",
                    f"{words[0].capitalize()} {words[1]} {garment}",
                    200 + kind,
                    f"{kind_words[0].capitalize()} {garment}",
                    PRODUCT_GROUPS[kind_group[kind]],
                    *APPEARANCES[appearance[item]],
                    *COLOUR_GROUPS[colour[item]],
                    *COLOUR_VALUES[colour_value[item]],
                    *COLOUR_MASTERS[colour_master[item]],
                    1000 + 7 * kind,
                    f"{kind_words[4].capitalize()} {kind_words[0]}",
                    index_code,
                    index_name,
                    index_group_no,
                    index_group_name,
                    2 + kind % 90,
                    f"{index_group_name} {kind_words[5].capitalize()}",
                    garment_group_no,
                    garment_group_name,
                    description,
                )
            )


def customer_lines(customer_ids: np.ndarray, rng: np.random.Generator) -> pa.Array:
    """customers.csv rows for the given customers (flags `1.0` or empty, integer ages)."""
    count = customer_ids.shape[0]
    fn = rng.random(count) < 0.35
    active = fn & (rng.random(count) < 0.97)
    status = rng.choice(4, count, p=[0.93, 0.064, 0.002, 0.004])
    news = rng.choice(4, count, p=[0.63, 0.35, 0.01, 0.01])
    age = np.clip(np.round(rng.gamma(6.0, 6.0, count) + 10), 16, 99).astype(np.int64)
    has_age = rng.random(count) >= 0.01
    postal_pool = pa.array(hex_strings(rng, max(1, count // 3), 64))
    one = pa.array(["1.0"])
    return join_lines(
        [
            pa.array(customer_ids),
            one.take(pa.array(np.zeros(count, dtype=np.int64), mask=~fn)),
            one.take(pa.array(np.zeros(count, dtype=np.int64), mask=~active)),
            pa.array(["ACTIVE", "PRE-CREATE", "LEFT CLUB", None]).take(pa.array(status)),
            pa.array(["NONE", "Regularly", "Monthly", None]).take(pa.array(news)),
            as_text(pa.array(age, mask=~has_age)),
            postal_pool.take(pa.array(rng.integers(0, len(postal_pool), count))),
        ]
    )


def transaction_lines(
    block: EventBlock,
    customer_ids: np.ndarray,
    article_text: pa.Array,
    full_price: pa.Array,
    sale_price: pa.Array,
) -> pa.Array:
    """transactions_train.csv rows of one block, in date order."""
    rng = block.rng
    order = np.argsort(block.time_ms // 86_400_000, kind="stable")
    local_user = block.user[order] - block.first_user
    item = block.item[order]
    days = (block.time_ms[order] // 86_400_000).astype(np.int32)
    on_sale = rng.random(block.n_events) < 0.15
    price_index = item + np.where(on_sale, len(full_price), 0)
    user_channel = np.where(rng.random(block.n_users) < 0.7, 2, 1)
    channel = user_channel[local_user]
    channel = np.where(rng.random(block.n_events) < 0.1, 3 - channel, channel)
    return join_lines(
        [
            pa.array(days, type=pa.date32()).cast(pa.string()),
            pa.array(customer_ids).take(pa.array(local_user)),
            article_text.take(pa.array(item)),
            pa.concat_arrays([full_price, sale_price]).take(pa.array(price_index)),
            as_text(channel),
        ]
    )


def make_bad_lines(template: str) -> list[bytes]:
    """Eight bad rows: short row, two bad dates, no customer, no article, bad price, bad bytes,
    header."""
    return csv_bad_lines(
        template,
        TRANSACTIONS_HEADER,
        replacements=[(0, "2019-13-45"), (0, "not-a-date"), (1, ""), (2, ""), (3, "n/a")],
        encoding_field=0,
    )


def generate(
    out_dir: Path,
    events: int,
    seed: int,
    dirty: bool,
    progress: Callable[[str], None] | None,
) -> GeneratedRelease:
    """Write transactions (streamed), customers (streamed alongside) and articles."""
    catalogue = source_catalogue(DATASET, events, seed, ITEMS_FACTOR)
    product_code, article_id = article_ids(catalogue, side_rng(DATASET, seed, 1))
    article_text = pa.array([f"{a:010d}" for a in article_id.tolist()])
    full_price, sale_price = item_prices(catalogue, side_rng(DATASET, seed, 2))
    fallback = f"2018-09-20,{'0' * 64},{article_text[0]},{full_price[0]},2"
    bad_lines = make_bad_lines if dirty else None
    with (
        open_event_log(
            DATASET, seed, out_dir / TRANSACTIONS_FILE, TRANSACTIONS_HEADER, bad_lines, fallback
        ) as transactions,
        EventLogFile(out_dir / CUSTOMERS_FILE, CUSTOMERS_HEADER, side_rng(DATASET, seed, 4)) as customers,
    ):
        for block in iter_event_blocks(DATASET, catalogue, ACTIVITY, events, seed, progress=progress):
            n_idle = max(1, block.n_users // 20)
            customer_ids = hex_strings(block.rng, block.n_users + n_idle, 64)
            transactions.write(
                transaction_lines(block, customer_ids[: block.n_users], article_text, full_price, sale_price)
            )
            customers.write(customer_lines(customer_ids, block.rng))
    write_articles(out_dir / ARTICLES_FILE, catalogue, product_code, article_id, side_rng(DATASET, seed, 5))
    files = (transactions.path, out_dir / ARTICLES_FILE, customers.path)
    return release_of(DATASET, out_dir, files, [transactions])
