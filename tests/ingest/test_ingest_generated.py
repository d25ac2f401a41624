"""Generated releases parse through the same adapters as the real files, bad rows and all."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.generate import SOURCES
from intent_spark.lake.tables import read_table


@pytest.mark.slow
@pytest.mark.parametrize("name", SOURCES)
def test_dirty_release_ingests_with_exactly_its_bad_rows_rejected(spark, generated_lake, name):
    lake, releases, summaries = generated_lake
    release, summary = releases[name], summaries[name]
    assert summary.raw_rows == sum(release.event_rows.values())
    assert summary.rejects == sum(release.bad_rows.values())
    clean_rows = summary.raw_rows - summary.rejects
    assert clean_rows == sum(release.event_rows.values()) - sum(release.bad_rows.values())
    if name != "kuairand":  # one event per raw row except with KuaiRand's per-signal option
        assert summary.events == clean_rows
    manifest = read_table(spark, lake, S.INGEST_FILES, name).collect()
    for row in manifest:
        assert row.raw_rows == row.event_rows + row.reject_rows, row


@pytest.mark.slow
@pytest.mark.parametrize("name", SOURCES)
def test_generated_catalogue_has_tokens_and_time_range(spark, generated_lake, name):
    lake, _, _ = generated_lake
    items = read_table(spark, lake, S.ITEMS, name)
    events = read_table(spark, lake, S.EVENTS, name)
    # Every event's item is in the catalogue, and most items carry content tokens.
    assert events.join(items, [S.DATASET, S.ITEM_ID], "left_anti").count() == 0
    with_tokens = items.where(F.size(S.TOKENS) > 0).count()
    assert with_tokens >= 0.9 * items.count()
    # (ts, seq) is a total order: seq is unique within a dataset.
    assert events.select(S.SEQ).distinct().count() == events.count()


@pytest.mark.slow
def test_kuairand_event_types_follow_the_signal_priority(spark, generated_lake):
    lake, _, _ = generated_lake
    types = {
        r.event_type
        for r in read_table(spark, lake, S.EVENTS, "kuairand").select(S.EVENT_TYPE).distinct().collect()
    }
    assert {"click", "long_view", "impression"} <= types
    assert types <= {
        "hate",
        "forward",
        "comment",
        "follow",
        "like",
        "profile_enter",
        "long_view",
        "click",
        "impression",
    }


@pytest.mark.slow
def test_hm_users_and_rees46_amounts(spark, generated_lake):
    lake, releases, _ = generated_lake
    # one users row per data line of the profile files the generator wrote
    for dataset, profiles in (("hm", "customers.csv"), ("kuairand", "user_features_27k.csv")):
        written = next(f for f in releases[dataset].files if f.name == profiles)
        lines = len(written.read_text(encoding="utf-8").splitlines()) - 1  # the header
        assert lines > 0
        assert read_table(spark, lake, S.USERS, dataset).count() == lines, dataset
    rees = read_table(spark, lake, S.EVENTS, "rees46")
    assert rees.where(F.col(S.AMOUNT).isNull()).count() == 0
    assert {r.event_type for r in rees.select(S.EVENT_TYPE).distinct().collect()} == {
        "view",
        "cart",
        "purchase",
    }
