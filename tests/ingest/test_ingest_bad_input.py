"""Bad input: every broken row becomes a reject with its file, line, field and reason."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from intent_spark.cli import main
from intent_spark.core import schema as S
from intent_spark.core.sources import load_source
from intent_spark.ingest import ingest_source
from intent_spark.lake.context import Lake
from intent_spark.lake.tables import read_table

HEADER = b"event_time,event_type,product_id,category_id,category_code,brand,price,user_id,user_session"
GOOD = b"2019-10-01 00:00:00 UTC,view,1,11,a.b,br,1.50,u1,s1"
# (line bytes, expected field, expected reason prefix); None = a good row.
OCTOBER = [
    (HEADER, None, None),  # line 1: the file's own header, not a data row
    (GOOD, None, None),
    (b"2019-10-01 00:00:01 UTC,view,2,11", None, "malformed CSV row: expected 9 fields"),
    (b"2019-13-45 99:00:00 UTC,view,3,11,,,2.00,u1,s1", "event_time", "unparseable timestamp"),
    (b",view,3,11,,,2.00,u1,s1", "event_time", "missing timestamp"),
    (b"2019-10-01 00:00:02 UTC,view,4,11,,,2.00,,s1", "user_id", "missing user id"),
    (b"2019-10-01 00:00:03 UTC,view,,11,,,2.00,u2,s2", "product_id", "missing item id"),
    (b"2019-10-01 00:00:04 UTC,cart,5,11,,,abc,u2,s2", "price", "non-numeric amount"),
    (b"2019-10-01 00:00:05 UTC,view,6,11,,\xff\xfebrand,3.00,u3,s3", None, "invalid UTF-8 bytes"),
    (HEADER, None, "duplicate header line"),
    (b'2019-10-01 00:00:06 UTC,view,"7,11,,,3.00,u3,s3', None, "malformed CSV row"),
    (b"2019-10-01 00:00:07 UTC,purchase,1,11,a.b,br,1.50,u1,s1", None, None),
    (b"", None, "empty line"),
    (b"2019-10-01 00:00:08 UTC,view,8,12,,,,u4,s4", None, None),  # an empty price is no amount
    (b"2019-10-01 00:00:09 UTC,,8,12,,,,u4,s4", "event_type", "missing action"),
]


@pytest.fixture(scope="module")
def dirty_rees46(spark, tmp_path_factory):
    raw = tmp_path_factory.mktemp("raw_rees46")
    (raw / "2019-Oct.csv").write_bytes(b"\n".join(line for line, _, _ in OCTOBER) + b"\n")
    november = (
        HEADER
        + b"\n"
        + b"".join(
            f"2019-11-01 00:{i // 60:02d}:{i % 60:02d} UTC,view,{i},11,,,1.00,u{i % 7},s\n".encode()
            for i in range(3000)
        )
    )
    (raw / "2019-Nov.csv.gz").write_bytes(gzip.compress(november)[:-300])  # cut before its end
    (raw / "2019-Dec.csv").write_bytes(b"")
    lake = str(tmp_path_factory.mktemp("lake_dirty"))
    summary = ingest_source(Lake(spark, lake), load_source("rees46"), str(raw))
    return raw, lake, summary


def test_each_bad_row_is_rejected_with_line_field_and_reason(spark, dirty_rees46):
    raw, lake, _ = dirty_rees46
    rejects = read_table(spark, lake, S.REJECTS, "rees46").where(
        F.col(S.SOURCE_FILE).endswith("2019-Oct.csv")
    )
    got = {r.line: (r.field, r.reason) for r in rejects.collect()}
    expected = {i + 1: (f, r) for i, (_, f, r) in enumerate(OCTOBER) if r is not None}
    assert set(got) == set(expected)
    for line, (field, reason) in expected.items():
        assert got[line][0] == field, line
        assert got[line][1].startswith(reason), (line, got[line][1])


def test_good_rows_of_a_dirty_file_become_events(spark, dirty_rees46):
    _, lake, _ = dirty_rees46
    events = read_table(spark, lake, S.EVENTS, "rees46").where(
        F.shiftright(S.SEQ, S.FILE_SHIFT) == 1  # files sorted: Dec (empty, unread), Nov.gz, Oct
    )
    rows = sorted((r.seq >> S.SUB_BITS & ((1 << 40) - 1), r.event_type, r.amount) for r in events.collect())
    assert rows == [(2, "view", 1.5), (12, "purchase", 1.5), (14, "view", None)]


def test_truncated_gzip_and_empty_file_are_file_level_rejects(spark, dirty_rees46):
    _, lake, _ = dirty_rees46
    file_level = read_table(spark, lake, S.REJECTS, "rees46").where(F.col(S.LINE).isNull()).collect()
    reasons = {Path(r.source_file).name: r.reason for r in file_level}
    assert reasons["2019-Dec.csv"] == "empty file"
    assert reasons["2019-Nov.csv.gz"].startswith("truncated gzip")


def test_raw_rows_equal_events_plus_rejects_per_file(spark, dirty_rees46):
    _, lake, summary = dirty_rees46
    manifest = {
        Path(r.source_file).name: r for r in read_table(spark, lake, S.INGEST_FILES, "rees46").collect()
    }
    assert manifest["2019-Oct.csv"].raw_rows == len(OCTOBER) - 1
    assert manifest["2019-Oct.csv"].event_rows == 3
    assert manifest["2019-Dec.csv"].raw_rows == 0
    for row in manifest.values():
        assert row.raw_rows == row.event_rows + row.reject_rows, row
    nov = manifest["2019-Nov.csv.gz"]
    assert 0 < nov.event_rows < 3000  # what was readable before the cut is kept
    assert summary.raw_rows == summary.events + sum(r.reject_rows for r in manifest.values())


def test_json_lines_bad_rows(spark, tmp_path, lake):
    good = {"rating": 5.0, "parent_asin": "B01", "user_id": "AE1", "timestamp": 1588687728923}
    lines = [
        json.dumps(good),
        '{"rating": 5.0, "parent_asin": "B02", "user_id": "AE1", "timestamp": 15886877',  # cut short
        json.dumps({**good, "timestamp": "not-a-date"}),
        json.dumps({**good, "user_id": ""}),
        json.dumps({**good, "parent_asin": None}),
        json.dumps({**good, "parent_asin": "B03", "timestamp": 1588687728924}),
    ]
    (tmp_path / "Home_and_Kitchen.jsonl").write_text("\n".join(lines) + "\n")
    summary = ingest_source(Lake(spark, lake), load_source("amazon_hk"), str(tmp_path))
    reasons = {r.line: r.reason for r in read_table(spark, lake, S.REJECTS, "amazon_hk").collect()}
    assert reasons == {
        2: "malformed JSON line",
        3: "unparseable timestamp (expected epoch ms)",
        4: "missing user id",
        5: "missing item id",
    }
    assert (summary.events, summary.rejects) == (2, 4)


def test_missing_source_folder_is_one_line_error(tmp_path, capsys):
    code = main(
        ["ingest", "--dataset", "rees46", "--raw", str(tmp_path / "nope"), "--lake", str(tmp_path / "l")]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err == [f"intent ingest: error: {tmp_path / 'nope'}: source folder not found"]
