"""Synthetic card transactions in the format of IBM TabFormer's ``card_transaction.v1.csv``.

Why: the benchmark exists for banks and payment networks, and TabFormer is the public release
closest to a card ledger (used by the PANTHER evaluation). Format of the real file: one CSV with
a header, LF; ``Year,Month,Day`` as numbers and ``Time`` as ``HH:MM``; ``Amount`` as ``$134.09``
with a minus for refunds (``$-77.00``); ``Use Chip`` one of three transaction kinds; a numeric
merchant name; an ``ONLINE`` city with no state or zip for online payments; a 4-digit MCC;
``Errors?`` empty or a reason; ``Is Fraud?`` ``No``/``Yes``.

User = card holder, item = merchant; a merchant's kind fixes its MCC, so the coarser label of
the paper ("the merchant of the next transaction or its category") is the MCC.
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
    iter_event_blocks,
    side_rng,
    source_catalogue,
    unix_ms,
)

DATASET = "cct"
FILE = "card_transaction.v1.csv"
HEADER = (
    "User,Card,Year,Month,Day,Time,Amount,Use Chip,Merchant Name,Merchant City,Merchant State,Zip,"
    "MCC,Errors?,Is Fraud?"
)
ACTIVITY = Activity(
    start_ms=unix_ms("2015-01-01T00:00:00"),
    end_ms=unix_ms("2020-03-01T00:00:00"),
    mean_events_per_user=60.0,
    max_events_per_user=20_000,
    session_continue=0.2,
    session_gap_ms=3_600_000.0,
)
ITEMS_FACTOR = 0.3
USE_CHIP = ("Swipe Transaction", "Chip Transaction", "Online Transaction")
ERRORS = ("Insufficient Balance", "Bad PIN", "Technical Glitch", "Bad Card Number")
ERROR_RATE = 0.015
REFUND_RATE = 0.01
FRAUD_RATE = 0.001
CITIES = (
    ("La Verne", "CA", "91750.0"),
    ("Monterey Park", "CA", "91754.0"),
    ("Mira Loma", "CA", "91752.0"),
    ("Houston", "TX", "77002.0"),
    ("Brooklyn", "NY", "11201.0"),
    ("Chicago", "IL", "60601.0"),
    ("Orlando", "FL", "32801.0"),
    ("Seattle", "WA", "98101.0"),
)
MCCS = (5411, 5812, 5541, 5300, 5912, 4829, 5311, 7538, 5651, 4121, 5499, 5814, 4784, 5719, 5942, 7832)


def merchant_columns(catalogue: Catalogue, rng: np.random.Generator) -> dict[str, pa.Array]:
    """Per-merchant strings: name (a signed 19-digit number), city, state, zip, MCC, price level."""
    n = catalogue.n_items
    names = rng.integers(-(2**62), 2**62, n, dtype=np.int64)
    kind_mcc = np.array(MCCS)[rng.integers(0, len(MCCS), catalogue.n_kinds)]
    online = rng.random(n) < 0.15
    place = rng.integers(0, len(CITIES), n)
    city = ["ONLINE" if o else CITIES[p][0] for o, p in zip(online.tolist(), place.tolist(), strict=True)]
    state = ["" if o else CITIES[p][1] for o, p in zip(online.tolist(), place.tolist(), strict=True)]
    zips = ["" if o else CITIES[p][2] for o, p in zip(online.tolist(), place.tolist(), strict=True)]
    level = np.exp(rng.normal(3.2, 1.0, catalogue.n_kinds))[catalogue.item_kind]
    return {
        "name": as_text(names),
        "city": pa.array(city),
        "state": pa.array(state),
        "zip": pa.array(zips),
        "mcc": as_text(kind_mcc[catalogue.item_kind]),
        "online": pa.array(online),
        "level": pa.array(level),
    }


def amount_text(values: np.ndarray) -> pa.Array:
    """``$134.09``, ``$-77.00``: TabFormer writes the minus after the dollar sign."""
    return pa.array([f"${v:.2f}" for v in values.tolist()])


def make_bad_lines(template: str) -> list[bytes]:
    """Bad rows: short row, bad time, bad day, no user, no merchant, bad amount, bad bytes, header."""
    return csv_bad_lines(
        template,
        HEADER,
        replacements=[(5, "25:61"), (4, "32"), (0, ""), (8, ""), (6, "$12.3.4")],
        encoding_field=9,
    )


def generate(
    out_dir: Path,
    events: int,
    seed: int,
    dirty: bool,
    progress: Callable[[str], None] | None,
) -> GeneratedRelease:
    """Write ``card_transaction.v1.csv``, rows ordered by user, card and time as in the release."""
    catalogue = source_catalogue(DATASET, events, seed, ITEMS_FACTOR)
    merchants = merchant_columns(catalogue, side_rng(DATASET, seed, 1))
    fallback = "0,0,2015,1,1,00:00,$1.00,Swipe Transaction,1,La Verne,CA,91750.0,5300,,No"
    path = out_dir / FILE
    bad_lines = make_bad_lines if dirty else None
    with open_event_logs(DATASET, seed, [path], HEADER, bad_lines, fallback) as logs:
        for block in iter_event_blocks(DATASET, catalogue, ACTIVITY, events, seed, progress=progress):
            order = np.lexsort((block.time_ms, block.user))
            user, item = block.user[order], block.item[order]
            minutes = block.time_ms[order] // 60_000 * 60
            when = pa.array(minutes, type=pa.timestamp("s"))
            rng = block.rng
            n = user.shape[0]
            level = np.asarray(merchants["level"].take(pa.array(item)))
            amount = np.round(level * np.exp(rng.normal(0, 0.5, n)), 2)
            amount = np.where(rng.random(n) < REFUND_RATE, -amount, amount)
            online = np.asarray(merchants["online"].take(pa.array(item)))
            chip = np.where(online, 2, rng.integers(0, 2, n))
            error = np.where(rng.random(n) < ERROR_RATE, rng.integers(0, len(ERRORS), n), -1)
            errors = pa.array([ERRORS[e] if e >= 0 else "" for e in error.tolist()])
            fraud = np.where(rng.random(n) < FRAUD_RATE, "Yes", "No")
            lines = join_lines(
                [
                    as_text(user),
                    as_text(user % 3 * (rng.random(n) < 0.3)),
                    pc.year(when).cast(pa.string()),
                    pc.month(when).cast(pa.string()),
                    pc.day(when).cast(pa.string()),
                    pc.strftime(when, format="%H:%M"),
                    amount_text(amount),
                    pa.array(USE_CHIP).take(pa.array(chip)),
                    merchants["name"].take(pa.array(item)),
                    merchants["city"].take(pa.array(item)),
                    merchants["state"].take(pa.array(item)),
                    merchants["zip"].take(pa.array(item)),
                    merchants["mcc"].take(pa.array(item)),
                    errors,
                    pa.array(fraud),
                ]
            )
            logs[0].write(lines)
    return release_of(DATASET, out_dir, [path], logs)
