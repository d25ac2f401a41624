"""Single-node reference of the split and target stage (SPEC 3) in DuckDB, for the pipeline benchmark.

Reads the events as plain Parquet (one dataset's events table, exported by Spark) and computes,
in DuckDB SQL, what ``intent_spark.splitting.split_population`` computes: hash holdout, time
span, granularity, bucket histogram, cutoff, periods, seen items, the known_past sample, target
indexing and cells. It returns the cutoff and the per-cell user and target counts, so the
benchmark can time both engines on the same input and check they agree.

    .venv/bin/python bench/duckdb_split.py --events-parquet /tmp/rees46_events --dataset rees46
    .venv/bin/python bench/duckdb_split.py --events-parquet DIR --dataset rees46 --lake LAKE

With ``--lake`` it also reads Spark's ``splits`` and ``split_counts`` tables for the dataset and
prints every difference (exit status 1 when there is one).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import xxhash

from intent_spark.core import schema as S
from intent_spark.split.conf import SplitConf
from intent_spark.split.cutoff import Bucket, CutoffChoice, choose_cutoff, choose_granularity
from intent_spark.split.holdout import HASH_BUCKETS, holdout_salt

SPARK_HASH_SEED = 42  # Spark's xxhash64 starts every row from seed 42
UINT64 = 1 << 64
INT64_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class CellCount:
    n_users: int
    n_targets: int


@dataclass(frozen=True)
class DuckSplit:
    """One split's cutoff choice and its per-cell counts (cells without targets are absent)."""

    name: str
    choice: CutoffChoice
    cells: dict[str, CellCount]


def spark_xxhash64(values: list[str], salt: str) -> list[int]:
    """Spark's ``xxhash64(lit(salt), value)`` as a signed long: XXH64 chained from seed 42.

    Each column's hash seeds the next one's; Spark reads the 64 bits as a signed long.
    """
    salt_hash = xxhash.xxh64_intdigest(salt.encode(), SPARK_HASH_SEED)
    hashes = [xxhash.xxh64_intdigest(v.encode(), salt_hash) for v in values]
    return [h - UINT64 if h > INT64_MAX else h for h in hashes]


def _user_hashes(users: list[str], conf: SplitConf, dataset: str, split: str) -> pa.Table:
    """One row per distinct user: ``user_id, is_new, sample_hash`` (the only Python on the data,
    over distinct users, not events)."""
    holdout = spark_xxhash64(users, holdout_salt(conf.seed, dataset, split))
    # pmod(h, 2^30) of a signed long equals the low 30 bits of its two's complement.
    is_new = [(h % HASH_BUCKETS) / HASH_BUCKETS < conf.holdout_fraction for h in holdout]
    sample_hash = spark_xxhash64(users, f"intent-sample:{conf.seed}:{dataset}:{split}")
    return pa.table(
        {
            S.USER_ID: pa.array(users, pa.string()),
            S.IS_NEW: pa.array(is_new, pa.bool_()),
            "sample_hash": pa.array(sample_hash, pa.int64()),
        }
    )


def connect(threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection in UTC (Spark's session time zone in this project)."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    if threads is not None:
        con.execute(f"SET threads = {int(threads)}")
    return con


def register_events(con: duckdb.DuckDBPyConnection, events_parquet: str | Path, dataset: str) -> None:
    """View ``events`` (user_id, item_id, ts as UTC wall time, seq) over a Parquet folder.

    A ``dataset`` column, when the export kept it, restricts the rows to ``dataset``.
    """
    source = f"read_parquet('{Path(events_parquet) / '**' / '*.parquet'}', hive_partitioning = true)"
    columns = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
    where = f"WHERE {S.DATASET} = '{dataset}'" if S.DATASET in columns else ""
    con.execute(
        f"""CREATE OR REPLACE TEMP VIEW events AS
        SELECT {S.USER_ID}, {S.ITEM_ID}, CAST({S.TS} AS TIMESTAMP) AS {S.TS}, {S.SEQ}
        FROM {source} {where}"""
    )


def split_population(
    con: duckdb.DuckDBPyConnection,
    population: str,
    *,
    dataset: str,
    split: str,
    conf: SplitConf,
    manual: datetime | None,
) -> DuckSplit:
    """The split of the events in table or view ``population`` (user_id, item_id, ts, seq).

    Leaves ``{split}_labelled`` (population with is_new and is_past) for the next split.
    """
    users = con.execute(f"SELECT DISTINCT {S.USER_ID} FROM {population}").fetchnumpy()[S.USER_ID].tolist()
    hashes = _user_hashes(users, conf, dataset, split)
    con.register(f"{split}_users", hashes)

    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE {split}_flagged AS
        SELECT p.*, u.{S.IS_NEW} FROM {population} p JOIN {split}_users u USING ({S.USER_ID})"""
    )
    first, last = con.execute(f"SELECT min({S.TS}), max({S.TS}) FROM {split}_flagged").fetchone()
    if first is None:
        raise ValueError(f"{dataset} {split}: no events to split")
    granularity = choose_granularity(first, last, conf.rule)
    # One row per month or day, like Spark's collect_buckets.
    rows = con.execute(
        f"""SELECT date_trunc('{granularity}', {S.TS}) AS start, count(*) AS n_events,
               count(*) FILTER (WHERE NOT {S.IS_NEW}) AS n_known
        FROM {split}_flagged GROUP BY 1"""
    ).fetchall()
    buckets = [Bucket(start, int(n_events), int(n_known)) for start, n_events, n_known in rows]
    manual_share = None
    if manual is not None:
        before, total = con.execute(
            f"""SELECT count(*) FILTER (WHERE NOT {S.IS_NEW} AND {S.TS} < $cutoff), count(*)
            FROM {split}_flagged""",
            {"cutoff": manual},
        ).fetchone()
        manual_share = before / total
    choice = choose_cutoff(
        buckets,
        granularity,
        conf.rule,
        dataset=dataset,
        split=split,
        manual=manual,
        manual_share=manual_share,
    )
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE {split}_labelled AS
        SELECT *, {S.TS} < $cutoff AS is_past FROM {split}_flagged""",
        {"cutoff": choice.cutoff},
    )
    cells = con.execute(
        _TARGET_COUNTS_SQL.format(split=split),
        {"n_sample": conf.known_past_users, "max_per_period": conf.max_targets_per_period},
    ).fetchall()
    return DuckSplit(
        split, choice, {cell: CellCount(int(n_users), int(n_targets)) for cell, n_users, n_targets in cells}
    )


# Targets (SPEC 3.5) as in intent_spark.targets.index_events: past events precede future ones in
# (ts, seq), so a future event's index is its position minus the user's past events (or minus 1
# when the user's history starts in the future); the very first event gets index 0.
_TARGET_COUNTS_SQL = """
WITH seen AS (
    SELECT DISTINCT item_id FROM {split}_labelled WHERE NOT is_new AND is_past
),
known_past_sample AS (
    SELECT user_id FROM {split}_users WHERE NOT is_new
    ORDER BY sample_hash, user_id LIMIT $n_sample
),
indexed AS (
    SELECT user_id, item_id, is_new, is_past,
        row_number() OVER (PARTITION BY user_id ORDER BY ts, seq) AS position,
        count(*) FILTER (WHERE is_past) OVER (PARTITION BY user_id) AS n_past
    FROM {split}_labelled
),
candidates AS (
    SELECT *, CASE WHEN is_past THEN position - 1 ELSE position - greatest(n_past, 1) END AS index_in_period
    FROM indexed
),
targets AS (
    SELECT c.user_id,
        CASE WHEN NOT c.is_new AND c.is_past THEN 'known_past'
        ELSE concat_ws('_',
            CASE WHEN c.is_new THEN 'new' ELSE 'known' END,
            CASE WHEN c.is_past THEN 'past' ELSE 'future' END,
            CASE WHEN s.item_id IS NOT NULL THEN 'seen' ELSE 'new' END)
        END AS cell
    FROM candidates c
    LEFT JOIN seen s ON c.item_id = s.item_id
    LEFT JOIN known_past_sample k ON c.user_id = k.user_id
    WHERE c.index_in_period BETWEEN 1 AND $max_per_period
        AND (c.is_new OR NOT c.is_past OR k.user_id IS NOT NULL)
)
SELECT cell, count(DISTINCT user_id) AS n_users, count(*) AS n_targets
FROM targets GROUP BY cell ORDER BY cell
"""


def split_events(
    con: duckdb.DuckDBPyConnection, *, dataset: str, conf: SplitConf, with_validation: bool = True
) -> list[DuckSplit]:
    """Test split over view ``events``, then the validation split over the test split's
    training events (known users before the test cutoff), as ``run_split`` does."""
    test = split_population(
        con, "events", dataset=dataset, split=S.TEST, conf=conf, manual=conf.manual_cutoff
    )
    if not with_validation:
        return [test]
    con.execute(
        f"""CREATE OR REPLACE TEMP VIEW {S.VAL}_population AS
        SELECT {S.USER_ID}, {S.ITEM_ID}, {S.TS}, {S.SEQ} FROM {S.TEST}_labelled
        WHERE NOT {S.IS_NEW} AND is_past"""
    )
    val = split_population(
        con, f"{S.VAL}_population", dataset=dataset, split=S.VAL, conf=conf, manual=conf.manual_val_cutoff
    )
    return [test, val]


def run_duckdb_split(
    events_parquet: str | Path,
    dataset: str,
    conf: SplitConf,
    *,
    with_validation: bool = True,
    threads: int | None = None,
) -> tuple[list[DuckSplit], float]:
    """The splits of one dataset's Parquet events and the wall seconds DuckDB took (reading included)."""
    started = time.monotonic()
    con = connect(threads)
    try:
        register_events(con, events_parquet, dataset)
        splits = split_events(con, dataset=dataset, conf=conf, with_validation=with_validation)
    finally:
        con.close()
    return splits, time.monotonic() - started


def summarize(splits: list[DuckSplit]) -> dict[str, Any]:
    """JSON-ready: per split, the cutoff, how it was chosen and the per-cell counts."""
    return {
        s.name: {
            "cutoff": s.choice.cutoff.isoformat(),
            "granularity": s.choice.granularity,
            "rule": s.choice.rule,
            "train_share": s.choice.share,
            "cells": {cell: {"n_users": c.n_users, "n_targets": c.n_targets} for cell, c in s.cells.items()},
        }
        for s in splits
    }


def spark_split_summary(spark: Any, lake: str, dataset: str) -> dict[str, Any]:
    """Spark's stored outcome in the same shape as ``summarize``: cutoffs from ``splits``, counts
    from ``split_counts`` (both a few rows per dataset)."""
    from intent_spark.lake.tables import read_table

    found: dict[str, Any] = {}
    for row in read_table(spark, lake, S.SPLITS, dataset).collect():
        found[row[S.SPLIT]] = {
            "cutoff": row[S.CUTOFF].isoformat(),
            "granularity": row["granularity"],
            "rule": row["rule"],
            "train_share": row["train_share"],
            "cells": {},
        }
    for row in read_table(spark, lake, S.SPLIT_COUNTS, dataset).collect():
        found[row[S.SPLIT]]["cells"][row[S.CELL]] = {"n_users": row["n_users"], "n_targets": row["n_targets"]}
    return found


def summarize_spark_outcomes(outcomes: list[Any]) -> dict[str, Any]:
    """``run_split``'s (or ``split_population``'s) outcomes in the shape of ``summarize``.

    Counting the lazy targets runs Spark's split again without the Delta writes, which is the
    like-for-like timing against DuckDB; the result is one row per cell.
    """
    from intent_spark.split.split_tables import cell_counts

    found: dict[str, Any] = {}
    for outcome in outcomes:
        counts = cell_counts(outcome.targets, floor_users=0).collect()  # one row per cell
        found[outcome.name] = {
            "cutoff": outcome.choice.cutoff.isoformat(),
            "granularity": outcome.choice.granularity,
            "rule": outcome.choice.rule,
            "train_share": float(outcome.choice.share),
            "cells": {r[S.CELL]: {"n_users": r["n_users"], "n_targets": r["n_targets"]} for r in counts},
        }
    return found


def compare_summaries(duck: dict[str, Any], spark: dict[str, Any]) -> list[str]:
    """Every difference in cutoff, granularity, rule or per-cell counts (empty when they agree).

    Train shares are compared to 1e-12: both divide the same two integer counts.
    """
    differences = []
    for split in sorted(set(duck) | set(spark)):
        if split not in duck or split not in spark:
            differences.append(f"{split}: only in {'duckdb' if split in duck else 'spark'}")
            continue
        d, s = duck[split], spark[split]
        for key in ("cutoff", "granularity", "rule"):
            if d[key] != s[key]:
                differences.append(f"{split} {key}: duckdb {d[key]} spark {s[key]}")
        if not abs(d["train_share"] - s["train_share"]) <= 1e-12:
            differences.append(f"{split} train_share: duckdb {d['train_share']} spark {s['train_share']}")
        for cell in sorted(set(d["cells"]) | set(s["cells"])):
            if d["cells"].get(cell) != s["cells"].get(cell):
                differences.append(
                    f"{split} {cell}: duckdb {d['cells'].get(cell)} spark {s['cells'].get(cell)}"
                )
    return differences


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events-parquet", required=True, help="folder of one dataset's events as Parquet")
    parser.add_argument("--dataset", default="rees46")
    parser.add_argument("--split-conf", default=None, help="split.yaml (default: the shipped conf)")
    parser.add_argument("--test-only", action="store_true", help="skip the validation split")
    parser.add_argument("--threads", type=int, default=None, help="DuckDB threads (default: all cores)")
    parser.add_argument("--lake", default=None, help="compare with Spark's splits and split_counts here")
    args = parser.parse_args(argv)

    from intent_spark.core.conf import CONF_DIR
    from intent_spark.split.conf import load_split_conf

    conf = load_split_conf(args.split_conf or CONF_DIR / "split.yaml", args.dataset)
    splits, seconds = run_duckdb_split(
        args.events_parquet, args.dataset, conf, with_validation=not args.test_only, threads=args.threads
    )
    report: dict[str, Any] = {
        "dataset": args.dataset,
        "duckdb_s": round(seconds, 3),
        "splits": summarize(splits),
    }
    if args.lake:
        from intent_spark.lake.session import build_session

        spark = build_session("intent-duckdb-compare", {"spark.ui.enabled": "false"})
        stored = spark_split_summary(spark, args.lake, args.dataset)
        if args.test_only:
            stored = {k: v for k, v in stored.items() if k == S.TEST}
        report["differences"] = compare_summaries(report["splits"], stored)
    print(json.dumps(report, indent=2))
    return 1 if report.get("differences") else 0


if __name__ == "__main__":
    raise SystemExit(main())
