"""The card-transaction source (IBM TabFormer's format): hand-built rows ingest exactly, refunds
and declined payments stay events with their own type, bad amounts and times are rejected."""

from __future__ import annotations

from datetime import datetime

import pytest
from pyspark.sql import functions as F

from intent_spark import schema as S
from intent_spark.config import load_source
from intent_spark.generate import generate_release
from intent_spark.ingest import ingest_source
from intent_spark.io import read_table

HEADER = (
    "User,Card,Year,Month,Day,Time,Amount,Use Chip,Merchant Name,Merchant City,Merchant State,Zip,"
    "MCC,Errors?,Is Fraud?"
)
SHOP, GROCER, WIRE = "3527213246127876953", "-727612092139916043", "4055257078481058705"
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
}  # fmt: skip


@pytest.fixture(scope="module")
def cct_lake(spark, tmp_path_factory):
    raw = tmp_path_factory.mktemp("raw_cct")
    (raw / "card_transaction.v1.csv").write_text(
        HEADER + "\n" + "\n".join(r for r, _ in ROWS.values()) + "\n"
    )
    lake = str(tmp_path_factory.mktemp("lake_cct"))
    return lake, ingest_source(spark, load_source("cct"), str(raw), lake)


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
    summary = ingest_source(spark, load_source("cct"), str(release.root), lake)
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
