"""The card-transaction source (IBM TabFormer's format): hand-built rows ingest exactly, refunds
and declined payments stay events with their own type, bad amounts and times are rejected."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest
from pyspark.sql import functions as F

from intent_spark.cli import main
from intent_spark.core import schema as S
from intent_spark.core.datasets import DatasetRef
from intent_spark.core.sources import at_item_level, load_source
from intent_spark.generate import generate_release
from intent_spark.ingest import ingest_source
from intent_spark.lake.context import Lake
from intent_spark.lake.tables import ingest_record, ingested_source, read_table

HEADER = (
    "User,Card,Year,Month,Day,Time,Amount,Use Chip,Merchant Name,Merchant City,Merchant State,Zip,"
    "MCC,Errors?,Is Fraud?"
)
SHOP, GROCER, WIRE = "3527213246127876953", "-727612092139916043", "4055257078481058705"
NO_MCC = "999"
# line: (row, expected (user, merchant, time, amount, type) or (field, reason prefix))
ROWS = {
    2: (f"0,0,2002,9,1,06:21,$134.09,Swipe Transaction,{SHOP},La Verne,CA,91750.0,5300,,No",
        ("0", SHOP, datetime(2002, 9, 1, 6, 21), 134.09, "purchase")),
    3: (f"0,0,2002,9,2,00:00,$-77.00,Chip Transaction,{GROCER},Monterey Park,CA,91754.0,5411,,No",
        ("0", GROCER, datetime(2002, 9, 2), -77.0, "refund")),  # a refund at midnight
    4: (f'0,1,2002,9,2,13:05,"$1,234.50",Online Transaction,{WIRE},ONLINE,,,4829,,No',
        ("0", WIRE, datetime(2002, 9, 2, 13, 5), 1234.5, "purchase")),
    5: (f'1,0,2002,9,3,23:59,$12.00,Chip Transaction,{SHOP},La Verne,CA,91750.0,5300,"Insufficient Balance,",No',
        ("1", SHOP, datetime(2002, 9, 3, 23, 59), 12.0, "error")),
    6: (f"1,0,2002,9,4,12:00,$-5.00,Chip Transaction,{SHOP},La Verne,CA,91750.0,5300,Bad PIN,No",
        ("1", SHOP, datetime(2002, 9, 4, 12), -5.0, "error")),  # the first override wins
    7: (f"1,0,2002,9,5,25:61,$5.00,Chip Transaction,{SHOP},La Verne,CA,91750.0,5300,,No",
        ("Time", "unparseable timestamp (Year Month Day Time expected as yyyy M d HH:mm)")),
    8: (f"1,0,2002,13,5,10:00,$5.00,Chip Transaction,{SHOP},La Verne,CA,91750.0,5300,,No",
        ("Time", "unparseable timestamp")),
    9: (f"1,0,2002,9,5,10:00,$12.3.4,Chip Transaction,{SHOP},La Verne,CA,91750.0,5300,,No",
        ("Amount", "non-numeric amount")),
    10: (f"1,0,2002,9,,10:00,$5.00,Chip Transaction,{SHOP},La Verne,CA,91750.0,5300,,No",
         ("Day", "missing timestamp")),
    11: (f"2,0,2002,9,6,10:00,USD 5,Chip Transaction,{SHOP},La Verne,CA,91750.0,5300,,No",
         ("Amount", "non-numeric amount")),
    12: (f"2,0,2002,9,7,08:00,$3.00,Chip Transaction,{NO_MCC},Nowhere,CA,91750.0,,,No",
         ("2", NO_MCC, datetime(2002, 9, 7, 8), 3.0, "purchase")),  # a merchant without an MCC
}  # fmt: skip
# At the MCC level each good line's merchant becomes its code; the merchant without one is a reject.
MCC_OF = {SHOP: "5300", GROCER: "5411", WIRE: "4829"}


@pytest.fixture(scope="module")
def cct_raw(tmp_path_factory):
    raw = tmp_path_factory.mktemp("raw_cct")
    (raw / "card_transaction.v1.csv").write_text(
        HEADER + "\n" + "\n".join(r for r, _ in ROWS.values()) + "\n"
    )
    return str(raw)


@pytest.fixture(scope="module")
def cct_lake(spark, cct_raw, tmp_path_factory):
    lake = str(tmp_path_factory.mktemp("lake_cct"))
    return lake, ingest_source(Lake(spark, lake), load_source("cct"), cct_raw)


def test_hand_built_transactions_ingest_exactly(spark, cct_lake):
    lake, summary = cct_lake
    events = read_table(spark, lake, S.EVENTS, "cct").orderBy(S.SEQ).collect()
    expected = [want for _, want in ROWS.values() if len(want) == 5]
    assert [(e.user_id, e.item_id, e.ts, e.amount, e.event_type) for e in events] == expected
    assert events[3].attributes["Errors?"] == "Insufficient Balance,"
    assert summary.raw_rows == summary.events + summary.rejects == len(ROWS)
    tokens = {r.item_id: set(r.tokens) for r in read_table(spark, lake, S.ITEMS, "cct").collect()}
    assert {"MCC:5300", "Merchant State:ca"} <= tokens[SHOP] and "MCC:4829" in tokens[WIRE]


def test_bad_amounts_and_times_are_rejected_with_line_field_and_reason(spark, cct_lake):
    lake, _ = cct_lake
    rejects = {r.line: (r.field, r.reason) for r in read_table(spark, lake, S.REJECTS, "cct").collect()}
    wanted = {line: want for line, (_, want) in ROWS.items() if len(want) == 2}
    assert set(rejects) == set(wanted)
    for line, (field, reason) in wanted.items():
        assert rejects[line][0] == field and rejects[line][1].startswith(reason), (line, rejects[line])


def test_generated_transactions_round_trip(spark, tmp_path):
    release = generate_release("cct", tmp_path / "raw", 3000, seed=2, dirty=True)
    lake = str(tmp_path / "lake")
    summary = ingest_source(Lake(spark, lake), load_source("cct"), str(release.root))
    bad = sum(release.bad_rows.values())
    assert (summary.events, summary.rejects) == (3000, bad) and bad >= 6
    types = {
        r.event_type: r["count"]
        for r in read_table(spark, lake, S.EVENTS, "cct").groupBy(S.EVENT_TYPE).count().collect()
    }
    assert types["purchase"] > 2500 and types.get("refund", 0) > 0 and types.get("error", 0) > 0
    assert read_table(spark, lake, S.EVENTS, "cct").where(F.col(S.AMOUNT) < 0).count() >= types.get(
        "refund", 0
    )


def test_at_the_mcc_level_each_merchant_becomes_its_code(spark, cct_raw, cct_lake):
    lake, fine = cct_lake
    conf = at_item_level(load_source("cct"), "mcc")
    summary = ingest_source(Lake(spark, lake), conf, cct_raw, dataset="cct_mcc")
    events = read_table(spark, lake, S.EVENTS, "cct_mcc").orderBy(S.SEQ).collect()
    labelled = [(u, MCC_OF[m], t, a, k) for _, (u, m, t, a, k) in _good_rows() if m in MCC_OF]
    assert [(e.user_id, e.item_id, e.ts, e.amount, e.event_type) for e in events] == labelled
    assert [e.attributes["Merchant Name"] for e in events] == [
        m for _, (_, m, *_) in _good_rows() if m in MCC_OF
    ]
    items = {r.item_id: r.tokens for r in read_table(spark, lake, S.ITEMS, "cct_mcc").collect()}
    assert items == {"5300": ["MCC:5300"], "5411": ["MCC:5411"], "4829": ["MCC:4829"]}
    rejects = {
        r.line: (r.field, r.reason, r.raw) for r in read_table(spark, lake, S.REJECTS, "cct_mcc").collect()
    }
    # a line that was good until its item had no label keeps its raw text like any other reject
    assert rejects[12] == ("Merchant Name", f"item {NO_MCC} has no MCC token for item level mcc", ROWS[12][0])
    assert len(rejects) == fine.rejects + 1
    assert summary.raw_rows == summary.events + summary.rejects == len(ROWS)
    manifest = read_table(spark, lake, S.INGEST_FILES).select(S.DATASET, "source", S.ITEM_LEVEL).collect()
    assert sorted(tuple(r) for r in manifest) == [("cct", "cct", "merchant"), ("cct_mcc", "cct", "mcc")]
    assert (
        ingest_record(spark, lake, DatasetRef("cct_mcc")) == ("cct", "mcc")
        and ingested_source(spark, lake, DatasetRef("cct")) == "cct"
    )


def test_a_card_can_be_the_user(spark, cct_raw, tmp_path):
    conf = load_source("cct")
    by_card = replace(conf, events=replace(conf.events, user_with=("Card",)))
    lake = str(tmp_path / "lake")
    ingest_source(Lake(spark, lake), by_card, cct_raw)
    users = [r.user_id for r in read_table(spark, lake, S.EVENTS, "cct").orderBy(S.SEQ).collect()]
    assert users == ["0-0", "0-0", "0-1", "1-0", "1-0", "2-0"]


def _good_rows():
    return [(line, want) for line, (_, want) in ROWS.items() if len(want) == 5]


def test_an_undeclared_item_level_is_a_one_line_error(tmp_path, capsys):
    assert (
        main(
            [
                "ingest",
                "--dataset",
                "microlens",
                "--raw",
                str(tmp_path),
                "--lake",
                str(tmp_path),
                "--item-level",
                "tag",
            ]
        )
        == 2
    )
    assert (
        capsys.readouterr().err.strip()
        == "intent ingest: error: microlens: item level 'tag' is not declared; its item_levels: video"
    )


@pytest.mark.slow
def test_the_chain_runs_at_the_merchant_and_the_mcc_level(spark, tmp_path):
    """`intent run` on generated CCT at both levels: the same users are held out at the same
    cutoff, so the targets are the same events, and an event new at the MCC level is new at the
    merchant level too (a merchant seen before the cutoff brought its MCC with it)."""
    conf = tmp_path / "run.yaml"
    conf.write_text(
        f"workdir: {tmp_path / 'work'}\nseed: 1\ndatasets:\n  - {{name: cct, events: 4000}}\n"
        "  - {name: cct_mcc, source: cct, events: 4000, item_level: mcc}\n"
        "models: [popularity]\naudit: {sequence_users: 20}\n"
    )
    assert main(["run", "--conf", str(conf)]) == 0
    lake = str(tmp_path / "work" / "lake")
    splits = {(r.dataset, r.split): r for r in read_table(spark, lake, S.SPLITS).collect()}
    assert {d: splits[d, S.TEST].item_level for d in ("cct", "cct_mcc")} == {
        "cct": "merchant",
        "cct_mcc": "mcc",
    }
    assert splits["cct", S.TEST].cutoff == splits["cct_mcc", S.TEST].cutoff
    holdout = read_table(spark, lake, S.HOLDOUT)
    by_level = [
        holdout.where(F.col(S.DATASET) == d).select(S.SPLIT, S.USER_ID, S.IS_NEW) for d in ("cct", "cct_mcc")
    ]
    assert by_level[0].exceptAll(by_level[1]).count() == by_level[1].exceptAll(by_level[0]).count() == 0

    targets = read_table(spark, lake, S.TARGETS)
    merchant = targets.where(F.col(S.DATASET) == "cct").select(
        S.SPLIT, S.USER_ID, S.SEQ, F.col(S.CELL).alias("fine")
    )
    mcc = targets.where(F.col(S.DATASET) == "cct_mcc").select(
        S.SPLIT, S.USER_ID, S.SEQ, F.col(S.CELL).alias("coarse")
    )
    paired = merchant.join(mcc, [S.SPLIT, S.USER_ID, S.SEQ], "full_outer")
    assert paired.where(F.col("fine").isNull() | F.col("coarse").isNull()).count() == 0  # the same targets

    def user_and_period(cell):
        return F.regexp_replace(F.col(cell), "_(seen|new)$", "")

    assert paired.where(user_and_period("fine") != user_and_period("coarse")).count() == 0
    assert paired.where(F.col("coarse").endswith("_new") & F.col("fine").endswith("_seen")).count() == 0
    assert paired.where(F.col("fine").endswith("_new") & F.col("coarse").endswith("_seen")).count() > 0

    report = (tmp_path / "work" / "report" / "report.md").read_text()
    assert "### cct: item levels side by side" in report
    assert (tmp_path / "work" / "report" / "figures" / "item_levels_cct.png").exists()
    assert "### cct_mcc: admission audit" in report and "### cct: admission audit" in report
