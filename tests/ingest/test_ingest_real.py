"""Every real release sample in ../shared/data/real ingests with zero rejects, field by field."""

from __future__ import annotations

import csv
import gzip
import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.sources import load_source
from intent_spark.ingest import ingest_source
from intent_spark.lake.context import Lake
from intent_spark.lake.tables import read_table

pytestmark = [pytest.mark.real, pytest.mark.slow]


def _seq(file_index: int, line: int) -> int:
    return (file_index << S.FILE_SHIFT) | (line << S.SUB_BITS)


def _events_by_seq(spark, lake, dataset, seqs):
    rows = read_table(spark, lake, S.EVENTS, dataset).where(F.col(S.SEQ).isin(seqs)).collect()
    return {r.seq: r for r in rows}


def _link(raw: Path, *files: Path) -> Path:
    raw.mkdir(parents=True, exist_ok=True)
    for f in files:
        (raw / f.name).symlink_to(f)
    return raw


def _ingest(spark, conf, raw, lake, dataset=None):
    summary = ingest_source(Lake(spark, lake), load_source(conf), str(raw), dataset=dataset)
    assert summary.rejects == 0, read_table(spark, lake, S.REJECTS, summary.dataset).limit(5).collect()
    assert summary.raw_rows == summary.events
    return summary


def test_rees46_both_monthly_files(spark, real_data, lake):
    folder = real_data / "rees46"
    summary = _ingest(spark, "rees46", folder, lake)
    assert summary.raw_rows == 17_434 + 683  # the November sample has no header line
    # Files sort as 2019-Nov.noheader.csv (0), 2019-Oct.csv (1); check rows field by field.
    october = list(csv.reader(io.StringIO((folder / "2019-Oct.csv").read_text())))
    november = list(csv.reader(io.StringIO((folder / "2019-Nov.noheader.csv").read_text())))
    picks = {_seq(1, n): october[n - 1] for n in (2, 3, 500, 17_435)}
    picks |= {_seq(0, n): november[n - 1] for n in (1, 683)}
    got = _events_by_seq(spark, lake, "rees46", list(picks))
    for seq, fields in picks.items():
        event = got[seq]
        assert event.ts == datetime.strptime(fields[0], "%Y-%m-%d %H:%M:%S UTC")
        assert (event.event_type, event.item_id, event.user_id) == (fields[1], fields[2], fields[7])
        assert event.amount == float(fields[6])
    first = read_table(spark, lake, S.ITEMS, "rees46").where(F.col(S.ITEM_ID) == "44600062").first()
    assert first.brand == "shiseido" and first.category is None
    assert "brand:shiseido" in first.tokens and "category_id:2103807459595387724" in first.tokens


def test_hm_transactions_articles_customers(spark, real_data, lake):
    folder = real_data / "hm"
    summary = _ingest(spark, "hm", folder, lake)
    assert (summary.events, summary.users) == (10_000, 10_000)
    assert summary.items == 4_903  # every article (quoted newlines in detail_desc) and no more
    rows = list(csv.reader(io.StringIO((folder / "transactions_train.csv").read_text())))
    picks = {_seq(0, n): rows[n - 1] for n in (2, 5_000, 10_001)}
    for seq, (t_dat, customer, article, price, channel) in picks.items():
        event = _events_by_seq(spark, lake, "hm", [seq])[seq]
        assert event.ts == datetime.strptime(t_dat, "%Y-%m-%d")
        assert event.user_id == customer and event.item_id == article.zfill(10)
        assert event.amount == float(price) and event.attributes == {"sales_channel_id": channel}
    strap = read_table(spark, lake, S.ITEMS, "hm").where(F.col(S.ITEM_ID) == "0108775015").first()
    assert (strap.title, strap.category) == ("Strap top", "Vest top")
    assert {"strap", "top", "colour_group_name:black", "product_group_name:garment_upper_body"} <= set(
        strap.tokens
    )
    customer = (
        read_table(spark, lake, S.USERS, "hm").where(F.col(S.USER_ID).startswith("00000dbacae5abe5")).first()
    )
    assert customer.attributes["age"] == "49.0" and "FN" not in customer.attributes


def test_amazon_benchmark_csv_through_generic_adapter(spark, real_data, lake, tmp_path):
    raw = _link(tmp_path / "beauty", real_data / "amazon_reviews_2023" / "All_Beauty.csv.gz")
    summary = _ingest(spark, "conf/sources/amazon_benchmark_csv.yaml", raw, lake, dataset="all_beauty")
    assert summary.events == 2_535
    with gzip.open(real_data / "amazon_reviews_2023" / "All_Beauty.csv.gz", "rt") as handle:
        rows = list(csv.reader(handle))
    user, asin, rating, millis = rows[1]
    event = _events_by_seq(spark, lake, "all_beauty", [_seq(0, 2)])[_seq(0, 2)]
    assert (event.user_id, event.item_id, event.attributes["rating"]) == (user, asin, rating)
    assert event.ts == datetime.fromtimestamp(int(millis) / 1000, UTC).replace(tzinfo=None)


def test_amazon_benchmark_split_files(spark, real_data, lake, tmp_path):
    folder = real_data / "amazon_reviews_2023"
    raw = _link(tmp_path / "split", folder / "All_Beauty.train.csv", folder / "All_Beauty.valid.csv")
    summary = _ingest(spark, "conf/sources/amazon_benchmark_split.yaml", raw, lake, dataset="beauty_split")
    assert summary.events == 19_120 + 42_823


@pytest.mark.parametrize(
    ("file_name", "first_title"),
    [
        (
            "MicroLens-50k_titles.csv",
            "Gu long song gaga bad, even three hundred years old are not let go. # comic # Two Yuan "
            "# My destiny villain",
        ),
        ("MicroLens-100k_title_en.csv", "Gu long song gaga bad"),
    ],
)
def test_microlens_title_files(spark, real_data, lake, tmp_path, file_name, first_title):
    raw = _link(tmp_path / "microlens", real_data / "microlens" / file_name)
    # No real MicroLens pairs could be had; three hand-written pairs make it a valid source.
    (raw / "MicroLens-1M_pairs.csv").write_text(
        "user,item,timestamp\n7,1,1654041600000\n7,2,1654041601000\n8,1,1654041602000\n"
    )
    summary = _ingest(spark, "microlens", raw, lake)
    expected_items = 19_220 if "50k" in file_name else 19_738
    assert summary.items == expected_items
    first = read_table(spark, lake, S.ITEMS, "microlens").where(F.col(S.ITEM_ID) == "1").first()
    assert first.title == first_title
    assert {"gu", "long", "song"} <= set(first.tokens)


def test_movielens_raw_files_through_generic_adapter(spark, real_data, lake):
    summary = _ingest(spark, "conf/sources/movielens_100k.yaml", real_data / "movielens_ml-100k", lake)
    assert (summary.events, summary.items, summary.users) == (100_000, 1_682, 943)
    event = _events_by_seq(spark, lake, "movielens_100k", [_seq(0, 1)])[_seq(0, 1)]
    assert (event.user_id, event.item_id, event.attributes["rating"]) == ("196", "242", "3")
    assert event.ts == datetime.fromtimestamp(881250949, UTC).replace(tzinfo=None)
    toy = read_table(spark, lake, S.ITEMS, "movielens_100k").where(F.col(S.ITEM_ID) == "1").first()
    assert toy.title == "Toy Story (1995)"
    user = read_table(spark, lake, S.USERS, "movielens_100k").where(F.col(S.USER_ID) == "1").first()
    assert user.attributes == {"age": "24", "gender": "M", "occupation": "technician", "zip_code": "85711"}


def test_movielens_recbole_atomic_files(spark, real_data, lake):
    folder = real_data / "movielens_recbole_ml-100k"
    summary = _ingest(spark, "conf/sources/movielens_recbole_100k.yaml", folder, lake)
    assert (summary.events, summary.items, summary.users) == (100_000, 1_682, 943)
    toy = read_table(spark, lake, S.ITEMS, "movielens_recbole_100k").where(F.col(S.ITEM_ID) == "1").first()
    assert "class:token_seq:animation" in toy.tokens and "release_year:token:1995" in toy.tokens


def test_yelp_reviews_json_lines(spark, real_data, lake):
    path = real_data / "yelp" / "yelp_academic_dataset_review.json"
    summary = _ingest(spark, "conf/sources/yelp_reviews.yaml", path.parent, lake)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert summary.events == len(lines) == 3_610
    record = json.loads(lines[41])
    event = _events_by_seq(spark, lake, "yelp_reviews", [_seq(0, 42)])[_seq(0, 42)]
    assert (event.user_id, event.item_id) == (record["user_id"], record["business_id"])
    assert event.ts == datetime.strptime(record["date"], "%Y-%m-%d %H:%M:%S")
    assert float(event.attributes["stars"]) == record["stars"]
