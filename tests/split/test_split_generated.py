"""Split properties on generated releases of every source: leak-free, reconciled, deterministic."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from intent_spark.checks.verify import verify_dataset
from intent_spark.core import schema as S
from intent_spark.core.conf import CONF_DIR
from intent_spark.core.datasets import DatasetRef
from intent_spark.generate import SOURCES
from intent_spark.lake.context import Lake
from intent_spark.lake.tables import read_table
from intent_spark.split.conf import load_split_conf
from intent_spark.split.split_tables import compute_checksums, run_split

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", SOURCES)
def test_verify_passes_on_every_source(spark, split_lake, name):
    failed = [
        f"{r.split}/{r.name}: {r.violations}"
        for r in verify_dataset(Lake(spark, split_lake), DatasetRef(name))
        if not r.ok
    ]
    assert failed == []


@pytest.mark.parametrize("name", SOURCES)
def test_every_cell_has_a_validation_twin_and_targets_respect_the_cutoffs(spark, split_lake, name):
    splits = {r.split: r for r in read_table(spark, split_lake, S.SPLITS, name).collect()}
    assert set(splits) == {"test", "val"}
    assert splits["val"].cutoff < splits["test"].cutoff
    targets = read_table(spark, split_lake, S.TARGETS, name)
    cells = {(r.split, r.cell) for r in targets.select(S.SPLIT, S.CELL).distinct().collect()}
    assert {"known_past", "known_future_seen"} <= {c for s, c in cells if s == "test"}
    assert {"known_past", "known_future_seen"} <= {c for s, c in cells if s == "val"}
    # Validation targets never reach into the test period.
    assert (
        targets.where((F.col(S.SPLIT) == "val") & (F.col(S.TS) >= F.lit(splits["test"].cutoff))).count() == 0
    )


# one source cut by the rule, one by its manual cutoff (each rerun costs a whole split)
@pytest.mark.parametrize("name", ["amazon_hk", "rees46"])
def test_split_is_deterministic(spark, split_lake, name):
    before = compute_checksums(Lake(spark, split_lake), name)
    targets_before = read_table(spark, split_lake, S.TARGETS, name).localCheckpoint()
    run_split(Lake(spark, split_lake), DatasetRef(name), load_split_conf(CONF_DIR / "split.yaml", name))
    assert compute_checksums(Lake(spark, split_lake), name) == before
    targets_after = read_table(spark, split_lake, S.TARGETS, name)
    assert targets_after.exceptAll(targets_before).count() == 0
    assert targets_before.exceptAll(targets_after).count() == 0
