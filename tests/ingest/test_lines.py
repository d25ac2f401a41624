"""Line numbers must equal the file's own, however Spark splits the file into blocks."""

from __future__ import annotations

import gzip
from pathlib import Path

from intent_spark.core import schema as S
from intent_spark.ingest.files import check_gzip, find_files
from intent_spark.ingest.lines import read_numbered_lines
from intent_spark.lake.tables import spark_conf


def _write_lines(path: Path, n: int, width: int = 37) -> list[str]:
    lines = [f"row-{i:06d}-" + "x" * (i % width) for i in range(1, n + 1)]
    path.write_text("\n".join(lines) + "\n")
    return lines


def test_line_numbers_survive_many_small_blocks(spark, tmp_path):
    first = _write_lines(tmp_path / "a.csv", 3000)
    second = _write_lines(tmp_path / "b.csv", 1700, width=11)
    files = [str(tmp_path / "a.csv"), str(tmp_path / "b.csv")]
    with spark_conf(
        spark, {"spark.sql.files.maxPartitionBytes": "4096", "spark.sql.files.openCostInBytes": "0"}
    ):
        numbered = read_numbered_lines(spark, files)
        assert numbered.rdd.getNumPartitions() > 10  # the file really is split
        rows = {(r.file_index, r.line): r.value for r in numbered.collect()}
    expected = {(0, i + 1): v for i, v in enumerate(first)} | {(1, i + 1): v for i, v in enumerate(second)}
    assert rows == expected


def test_crlf_and_missing_final_newline(spark, tmp_path):
    (tmp_path / "c.csv").write_bytes(b"h1,h2\r\na,1\r\nb,2")
    rows = read_numbered_lines(spark, [str(tmp_path / "c.csv")]).orderBy(S.LINE).collect()
    assert [(r.line, r.value) for r in rows] == [(1, "h1,h2"), (2, "a,1"), (3, "b,2")]


def test_gzip_check_counts_lines_and_finds_truncation(tmp_path):
    payload = "".join(f"line {i}\n" for i in range(5000)).encode()
    good, bad = tmp_path / "good.csv.gz", tmp_path / "bad.csv.gz"
    good.write_bytes(gzip.compress(payload) + gzip.compress(b"tail 1\ntail 2\n"))  # two members
    bad.write_bytes(gzip.compress(payload)[:-200])
    assert check_gzip(str(good)).complete_lines == 5002
    assert not check_gzip(str(good)).truncated
    broken = check_gzip(str(bad))
    assert broken.truncated and 0 < broken.complete_lines < 5000


def test_find_files_sorted_and_missing_folder(tmp_path):
    (tmp_path / "sub").mkdir()
    for name in ("b.csv", "a.csv", "sub/c.csv", "notes.txt"):
        (tmp_path / name).write_text("x\n")
    assert find_files(str(tmp_path), ("*.csv", "sub/*.csv"), "event") == [
        str(tmp_path / "a.csv"),
        str(tmp_path / "b.csv"),
        str(tmp_path / "sub" / "c.csv"),
    ]
    import pytest

    from intent_spark.core.errors import IntentError

    with pytest.raises(IntentError, match="source folder not found"):
        find_files(str(tmp_path / "absent"), ("*.csv",), "event")
    with pytest.raises(IntentError, match="no event file matches"):
        find_files(str(tmp_path), ("*.parquet",), "event")
