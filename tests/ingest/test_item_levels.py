"""Item levels: which label stands in for an item, that every built-in coarse level names a token
field its source writes, and the side-by-side table of the report, worked out by hand."""

from __future__ import annotations

import pandas as pd
import pytest

from intent_spark.core import schema as S
from intent_spark.core.sources import NAMED_SOURCES, load_source
from intent_spark.ingest.levels import LABEL, item_labels, label_items
from intent_spark.report.levels import level_table


def test_the_label_is_the_first_token_of_the_field_in_sorted_order(spark):
    items = spark.createDataFrame(
        [
            ("v1", ["tag:12", "tag:7", "word"]),  # stored sorted: "12" sorts before "7"
            ("v2", ["tags:3", "word"]),  # another field whose name starts the same
            ("v3", []),
        ],
        f"{S.ITEM_ID} string, {S.TOKENS} array<string>",
    )
    labels = {r[S.ITEM_ID]: r[LABEL] for r in item_labels(items, "tag").collect()}
    assert labels == {"v1": "12", "v2": None, "v3": None}
    catalogue = label_items(item_labels(items, "tag"), "tag", "kuairand_tag").collect()
    assert [(r.dataset, r.item_id, r.title, r.tokens) for r in catalogue] == [
        ("kuairand_tag", "12", "12", ["tag:12"])
    ]


@pytest.mark.parametrize("name", [*NAMED_SOURCES, "cct"])
def test_every_coarse_level_names_a_token_field_of_its_source(name):
    conf = load_source(name)
    written = set(conf.events.item_tokens)
    for spec in conf.items:
        written |= set(spec.field_tokens) | set(spec.list_tokens)
    assert set(conf.item_levels.coarse.values()) <= written, conf.item_levels
    assert conf.level == conf.item_levels.fine != S.DEFAULT_ITEM_LEVEL


def _row(dataset, cell, model, value, low, high, targets):
    return {
        S.DATASET: dataset,
        S.SPLIT: S.TEST,
        S.CELL: cell,
        S.MODEL: model,
        "metric": "ndcg",
        "k": 10,
        "value": value,
        "ci_low": low,
        "ci_high": high,
        "n_targets": targets,
    }


def test_the_level_table_puts_each_model_s_levels_side_by_side():
    metrics = pd.DataFrame(
        [
            _row("cct", "known_future_seen", "popularity", 0.1234, 0.1, 0.15, 900),
            _row("cct", "known_future_new", "popularity", 0.0, None, None, 100),
            _row("cct_mcc", "known_future_seen", "popularity", 0.5, 0.45, 0.55, 1000),
            _row("cct_mcc", "known_future_seen", "sasrec_f@hm", 0.9, 0.8, 1.0, 1000),  # transferred: left out
            {**_row("cct", "known_future_seen", "popularity", 0.2, 0.1, 0.3, 900), "k": 5},  # not NDCG@10
        ]
    )
    table = level_table(metrics, {"merchant": "cct", "mcc": "cct_mcc"})
    assert table.index.tolist() == ["known_future_seen", "known_future_new"]
    assert table.columns.tolist() == [
        "popularity · merchant",
        "popularity · mcc",
        "targets · merchant",
        "targets · mcc",
    ]
    assert table.loc["known_future_seen"].tolist() == [
        "0.123 [0.100, 0.150]",
        "0.500 [0.450, 0.550]",
        "900",
        "1,000",
    ]
    assert table.loc["known_future_new"].tolist() == ["0.000", "", "100", ""]
