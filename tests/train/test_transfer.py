"""Transfer across sources: a target item's tokens in the source model's vocabulary, by hand."""

from __future__ import annotations

from intent_spark.core import schema as S
from intent_spark.core.datasets import transfer_model
from intent_spark.train.transfer import coverage, transferred_token_ids

SOURCE_ITEMS = [("s1", ["brand:acme", "knife", "steel"]), ("s2", ["brand:zeta", "pan"]), ("s3", ["bowl"])]
TARGET_ITEMS = [
    ("t1", ["brand:acme", "category_code:kitchen.knife"]),
    ("t2", ["category_code:cookware.pan", "pan", "steel"]),
    ("t3", ["bowl"]),
    ("t4", []),
    ("t5", ["brand:acme", "knife", "steel", "pan", "brand:zeta"]),
]


def _items(spark, rows):
    return spark.createDataFrame(rows, f"{S.ITEM_ID} string, {S.TOKENS} array<string>")


def _catalogue(spark, seen: list[str], ids: list[str]):
    rows = [(item, i + 1, item in seen) for i, item in enumerate(ids)]
    return spark.createDataFrame(rows, f"{S.ITEM_ID} string, {S.ITEM_INDEX} int, {S.SEEN} boolean")


def test_target_tokens_meet_the_source_vocabulary_exactly_then_by_word(spark):
    from intent_spark.train.inputs import token_vocabulary

    source = _catalogue(spark, ["s1", "s2"], ["s1", "s2", "s3"])
    vocabulary = token_vocabulary(source, _items(spark, SOURCE_ITEMS))
    # Tokens of the trained items s1, s2 in order; s3's "bowl" was never trained.
    assert [(r._token, r._token_id) for r in vocabulary.orderBy("_token_id").collect()] == [
        ("brand:acme", 1), ("brand:zeta", 2), ("knife", 3), ("pan", 4), ("steel", 5),
    ]  # fmt: skip
    target = _catalogue(spark, [], [i for i, _ in TARGET_ITEMS])
    ids = transferred_token_ids(target, _items(spark, TARGET_ITEMS), vocabulary, max_tokens=4)
    found = {r.item_id: (r.item_index, list(r.token_ids)) for r in ids.collect()}
    assert found == {
        "t1": (1, [1, 3, 0, 0]),  # brand:acme as it is, then "knife" from kitchen.knife's words
        "t2": (2, [4, 5, 0, 0]),  # "pan" first from cookware.pan's words, once; then steel
        "t3": (3, [0, 0, 0, 0]),  # bowl is no trained token of the source
        "t4": (4, [0, 0, 0, 0]),
        "t5": (5, [1, 3, 5, 4]),  # the first four in token order
    }
    targets = spark.createDataFrame(
        [("a", "t1"), ("a", "t3"), ("b", "t2"), ("b", "t4"), ("b", "t5")],
        f"{S.CELL} string, {S.ITEM_ID} string",
    )
    reached = {r.cell: (r.n_targets, r.n_with_tokens) for r in coverage(targets, ids).collect()}
    assert reached == {"a": (2, 1), "b": (3, 2)}
    assert transfer_model("sasrec_f", "amazon_hk") == "sasrec_f@amazon_hk"
