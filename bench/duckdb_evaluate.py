"""Single-node reference of the evaluate stage's metrics in DuckDB, for the pipeline benchmark.

From the same ``ranks`` Parquet files Spark's ``evaluate`` reads (the Delta table's current
files), DuckDB SQL computes what ``intent_spark.evaluate.metrics`` computes (SPEC 5): per
target NDCG, HR, recall, precision and MRR at K = 1, 5, 10, 20, 50, 100 from the tie-aware rank;
one row per user and cell with the means over the user's targets and the share of them ranked
inside a tie; then per cell the mean over users with the normal 95% interval, the users and
targets, and the tie rate (a share of targets, k = 0). Both tables are written as Parquet.

    .venv/bin/python bench/duckdb_evaluate.py --lake LAKE --dataset rees46 --out DIR

It compares every cell's value with Spark's ``metrics`` table (equal to 1e-12; users and targets
exactly) and prints the largest differences (exit status 1 when they disagree).

Not mirrored: the ``comparisons`` table (paired model differences, memorization gaps,
retention) and the MLflow logging that Spark's stage also does, so the ratio favours DuckDB.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from intent_spark.evaluate.metrics import KS, METRICS, TIE_RATE, Z_95, metric_column

KEYS = ("dataset", "split", "cell", "model")
TOLERANCE = 1e-12


@dataclass(frozen=True)
class MetricsComparison:
    """How DuckDB's cell metrics compare with Spark's ``metrics`` rows."""

    rows: int
    max_abs_diff: float
    max_ci_abs_diff: float
    differences: list[str]


def _double(value: float) -> str:
    return f"CAST({float(value)!r} AS DOUBLE)"


def target_metric_sql(metric: str, k: int) -> str:
    """One metric of one target from its (expected, possibly fractional) rank, as in
    ``intent_spark.evaluate.metrics.target_metric``."""
    value = {
        "ndcg": f"{_double(1.0)} / log2({_double(1.0)} + rank)",
        "hr": _double(1.0),
        "recall": _double(1.0),
        "precision": _double(1.0 / k),
        "mrr": f"{_double(1.0)} / rank",
    }[metric]
    return f"CASE WHEN rank <= {_double(k)} THEN {value} ELSE {_double(0.0)} END"


def _files(ranks: list[str] | str | Path) -> str:
    if isinstance(ranks, str | Path):
        listed = [str(Path(ranks) / "**" / "*.parquet")]
    else:
        listed = [f.removeprefix("file://").removeprefix("file:") for f in ranks]
    return "[" + ", ".join("'" + f.replace("'", "''") + "'" for f in listed) + "]"


def run_duckdb_evaluate(
    ranks: list[str] | str | Path, out: str | Path, *, threads: int | None = None
) -> tuple[pd.DataFrame, float]:
    """Cell metrics (the ``metrics`` table's columns but ``below_floor``) from ranks Parquet (a
    list of files, or a folder partitioned ``dataset=/model=``), with ``user_metrics.parquet``
    and ``metrics.parquet`` written under ``out``; and the wall seconds it took."""
    out = Path(out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    started = time.monotonic()
    con = duckdb.connect()
    try:
        con.execute(f"SET temp_directory = '{out / 'tmp'}'")  # spills stay in out
        if threads is not None:
            con.execute(f"SET threads = {int(threads)}")
        columns = [metric_column(m, k) for m in METRICS for k in KS]
        means = ",\n".join(
            f"avg({target_metric_sql(m, k)}) AS {metric_column(m, k)}" for m in METRICS for k in KS
        )
        keys = ", ".join(KEYS)
        con.execute(
            f"""CREATE TEMP TABLE user_metrics AS
            SELECT {keys}, user_id, count(*) AS n_targets,
                avg(CASE WHEN tied > 0 THEN {_double(1.0)} ELSE {_double(0.0)} END) AS {TIE_RATE},
                {means}
            FROM read_parquet({_files(ranks)}, hive_partitioning = true)
            GROUP BY {keys}, user_id"""
        )
        con.execute(f"COPY user_metrics TO '{out / 'user_metrics.parquet'}' (FORMAT parquet)")
        con.execute(
            f"""CREATE TEMP TABLE cell_metrics AS
            WITH long AS (
                UNPIVOT user_metrics ON {", ".join(columns)} INTO NAME _name VALUE value
            )
            SELECT {keys}, split_part(_name, '_', 1) AS metric, CAST(split_part(_name, '_', 2) AS INTEGER) AS k,
                avg(value) AS value,
                avg(value) - {_double(Z_95)} * coalesce(stddev_samp(value), 0) / sqrt(count(*)) AS ci_low,
                avg(value) + {_double(Z_95)} * coalesce(stddev_samp(value), 0) / sqrt(count(*)) AS ci_high,
                count(*) AS n_users, sum(n_targets) AS n_targets
            FROM long GROUP BY ALL
            UNION ALL
            SELECT {keys}, '{TIE_RATE}' AS metric, 0 AS k,
                sum({TIE_RATE} * n_targets) / sum(n_targets) AS value,
                CAST(NULL AS DOUBLE) AS ci_low, CAST(NULL AS DOUBLE) AS ci_high,
                count(*) AS n_users, sum(n_targets) AS n_targets
            FROM user_metrics GROUP BY ALL"""
        )
        con.execute(f"COPY cell_metrics TO '{out / 'metrics.parquet'}' (FORMAT parquet)")
        cells = con.execute("SELECT * FROM cell_metrics").df()
    finally:
        con.close()
    return cells, time.monotonic() - started


def compare_metrics(
    duck: pd.DataFrame, spark: pd.DataFrame, tolerance: float = TOLERANCE
) -> MetricsComparison:
    """Every cell, metric and k of either side matched on the other: values to ``tolerance``,
    users and targets exactly; the intervals' largest difference is reported, not checked."""
    on = [*KEYS, "metric", "k"]
    merged = duck.merge(spark, on=on, how="outer", suffixes=("_duck", "_spark"), indicator=True)
    differences = [
        f"{', '.join(str(row[c]) for c in on)}: only in {'duckdb' if row['_merge'] == 'left_only' else 'spark'}"
        for _, row in merged[merged["_merge"] != "both"].head(20).iterrows()
    ]
    both = merged[merged["_merge"] == "both"]
    value = (both["value_duck"] - both["value_spark"]).abs()
    ci = pd.concat(
        [
            (both["ci_low_duck"] - both["ci_low_spark"]).abs(),
            (both["ci_high_duck"] - both["ci_high_spark"]).abs(),
        ]
    )
    for _, row in both[value > tolerance].head(20).iterrows():
        differences.append(
            f"{', '.join(str(row[c]) for c in on)}: value duckdb {row['value_duck']!r} spark {row['value_spark']!r}"
        )
    for column in ("n_users", "n_targets"):
        for _, row in both[both[f"{column}_duck"] != both[f"{column}_spark"]].head(20).iterrows():
            differences.append(
                f"{', '.join(str(row[c]) for c in on)}: {column} duckdb {row[f'{column}_duck']} spark {row[f'{column}_spark']}"
            )
    return MetricsComparison(
        rows=len(both),
        max_abs_diff=float(value.max()) if len(value) else 0.0,
        max_ci_abs_diff=float(ci.max()) if len(ci.dropna()) else 0.0,
        differences=differences,
    )


def spark_metrics(spark: Any, lake: str, dataset: str) -> pd.DataFrame:
    """Spark's ``metrics`` rows of a dataset (cells x models x metrics: small)."""
    from intent_spark.core import schema as S
    from intent_spark.lake.tables import read_table

    rows = read_table(spark, lake, S.METRICS_TABLE, dataset).drop("below_floor").collect()
    return pd.DataFrame([r.asDict() for r in rows])


def ranks_files(spark: Any, lake: str, dataset: str) -> list[str]:
    """The current Parquet files of a dataset's ``ranks`` (what Spark's evaluate reads)."""
    from intent_spark.core import schema as S
    from intent_spark.lake.tables import read_table

    return sorted(read_table(spark, lake, S.RANKS, dataset).inputFiles())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", required=True, help="the lake whose ranks and metrics are compared")
    parser.add_argument("--dataset", default="rees46")
    parser.add_argument("--out", required=True, help="folder for user_metrics.parquet and metrics.parquet")
    parser.add_argument("--threads", type=int, default=None, help="DuckDB threads (default: all cores)")
    args = parser.parse_args(argv)

    from intent_spark.lake.session import build_session

    spark = build_session("intent-duckdb-evaluate", {"spark.ui.enabled": "false"})
    cells, seconds = run_duckdb_evaluate(
        ranks_files(spark, args.lake, args.dataset), args.out, threads=args.threads
    )
    found = compare_metrics(cells, spark_metrics(spark, args.lake, args.dataset))
    report = {
        "dataset": args.dataset,
        "duckdb_s": round(seconds, 3),
        "rows": found.rows,
        "max_abs_diff": found.max_abs_diff,
        "max_ci_abs_diff": found.max_ci_abs_diff,
        "differences": found.differences,
    }
    print(json.dumps(report, indent=2))
    return 1 if found.differences else 0


if __name__ == "__main__":
    raise SystemExit(main())
