"""The DuckDB reference of the split stage (bench/duckdb_split.py) agrees with Spark's tables."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from conftest import REPO_ROOT
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.conf import CONF_DIR
from intent_spark.generate import SOURCES
from intent_spark.lake.tables import read_table
from intent_spark.split.conf import load_split_conf

pytest.importorskip("duckdb", reason="duckdb is in the `bench` extra: pip install -e '.[bench]'")
pytest.importorskip("xxhash", reason="xxhash is in the `bench` extra: pip install -e '.[bench]'")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def duckdb_split():
    """bench/ is not a package: load the script as a module."""
    path = REPO_ROOT / "bench" / "duckdb_split.py"
    spec = importlib.util.spec_from_file_location("duckdb_split", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["duckdb_split"] = module
    spec.loader.exec_module(module)
    return module


def test_xxhash_matches_spark(spark, duckdb_split):
    values = ["u1", "", "user-42", "ключ", "a" * 100]
    salt = "intent-holdout:0:rees46:test"
    df = spark.createDataFrame([(v,) for v in values], "v string")
    expected = {r.v: r.h for r in df.select("v", F.xxhash64(F.lit(salt), F.col("v")).alias("h")).collect()}
    assert dict(zip(values, duckdb_split.spark_xxhash64(values, salt), strict=True)) == expected


@pytest.mark.parametrize("dataset", SOURCES)
def test_cutoff_and_cell_counts_match_spark(spark, split_lake, duckdb_split, tmp_path, dataset):
    events = tmp_path / "events"
    read_table(spark, split_lake, S.EVENTS, dataset).select(S.USER_ID, S.ITEM_ID, S.TS, S.SEQ).write.parquet(
        str(events)
    )
    conf = load_split_conf(CONF_DIR / "split.yaml", dataset)
    splits, _ = duckdb_split.run_duckdb_split(events, dataset, conf, threads=2)

    stored = duckdb_split.spark_split_summary(spark, split_lake, dataset)
    found = duckdb_split.summarize(splits)
    assert set(stored) == {S.TEST, S.VAL}
    assert stored[S.TEST]["cells"], "Spark wrote no test targets: nothing to compare"
    assert duckdb_split.compare_summaries(found, stored) == []
