"""The training stream and column reads of both readers on hand-written Parquet files, with no
JVM: the same seed gives the same stream, batches run on over passes, every row once per pass,
each shard its own row groups, and Petastorm's reader and ours give the same rows in every pass.
Petastorm's half runs where Petastorm can (the `petastorm` stack) and is skipped elsewhere, saying why."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from intent_spark.core.errors import IntentError
from intent_spark.train.readers import choose_reader, petastorm_problem, read_columns, training_batches

WIDTH = 3  # context 2 + the target
PETASTORM = pytest.mark.skipif(
    petastorm_problem() is not None, reason=f"Petastorm cannot run here: {petastorm_problem()}"
)
BOTH = ["arrow", pytest.param("petastorm", marks=PETASTORM)]


def _write(folder, files: int, rows: int, group: int) -> list[str]:
    """``files`` files of ``rows`` rows in row groups of ``group``: row r of file f is (f, r, 100 f + r)."""
    urls = []
    for f in range(files):
        table = pa.table(
            {"items": pa.array([[f, r, 100 * f + r] for r in range(rows)], type=pa.list_(pa.int64()))}
        )
        path = folder / f"part-{f:05d}.parquet"
        pq.write_table(table, path, row_group_size=group)
        urls.append(f"file://{path}")
    return urls


@pytest.fixture(scope="module")
def sequences(tmp_path_factory):
    """Four files of 5 rows each, one row group per file."""
    return _write(tmp_path_factory.mktemp("train_sequences"), files=4, rows=5, group=5)


@pytest.fixture(scope="module")
def grouped(tmp_path_factory):
    """Three files of 6 rows in row groups of 2: nine row groups, (file, group) = (i // 3, i % 3)."""
    return _write(tmp_path_factory.mktemp("train_grouped"), files=3, rows=6, group=2)


def _passes(batches, rows_per_pass: int) -> list[Counter]:
    rows = [tuple(r) for b in batches for r in b.tolist()]
    return [Counter(rows[i : i + rows_per_pass]) for i in range(0, len(rows), rows_per_pass)]


STREAM = """
import hashlib, sys, torch
from intent_spark.train.readers import training_batches
torch.manual_seed(0)
stream = training_batches(sys.argv[2:], 4, 8, 7, reader=sys.argv[1])
digest = hashlib.md5()
for _ in range(30):  # six passes over 20 rows
    digest.update(next(stream).numpy().tobytes())
print(digest.hexdigest())
"""


@pytest.mark.parametrize("reader", BOTH)
def test_the_same_seed_gives_the_same_stream_in_every_process(sequences, reader):
    """Each run is a fresh process, as each `intent train` is: Petastorm's own multi-epoch read
    reshuffled its row groups as often as its ventilator thread waited, so these differed."""
    digests = {
        subprocess.run(
            [sys.executable, "-c", STREAM, reader, *sequences], capture_output=True, text=True, check=True
        ).stdout.strip()
        for _ in range(3)
    }
    assert len(digests) == 1, digests


@pytest.mark.parametrize("reader", BOTH)
def test_batches_are_whole_across_passes_and_a_finite_stream_reads_every_row_once_per_pass(sequences, reader):
    batches = list(
        training_batches(sequences, batch_size=6, shuffle_buffer=0, seed=0, epochs=2, reader=reader)
    )
    assert [b.shape for b in batches] == [(6, WIDTH)] * 6 + [(4, WIDTH)]  # 40 rows
    assert all(b.dtype == batches[0].dtype and str(b.dtype) == "torch.int64" for b in batches)
    rows = Counter(tuple(r) for b in batches for r in b.tolist())
    assert rows == Counter({(f, r, 100 * f + r): 2 for f in range(4) for r in range(5)})
    first_pass = [tuple(r) for b in batches for r in b.tolist()][:20]
    files_in_order = [row[0] for row in first_pass[::5]]
    assert sorted(files_in_order) == [0, 1, 2, 3]  # whole row groups, shuffled as units


def test_our_reader_is_the_same_stream_byte_for_byte_for_a_seed_and_another_for_another_seed(grouped):
    def stream(seed: int) -> bytes:
        batches = training_batches(
            grouped, batch_size=4, shuffle_buffer=3, seed=seed, epochs=3, reader="arrow"
        )
        return b"".join(b.numpy().tobytes() for b in batches)

    assert stream(11) == stream(11)
    assert stream(11) != stream(12)
    # a restart of the same pass is the same pass: the first pass of a 3-pass read is a 1-pass read
    one = b"".join(
        b.numpy().tobytes()
        for b in training_batches(grouped, batch_size=2, shuffle_buffer=3, seed=11, epochs=1, reader="arrow")
    )
    three = b"".join(
        b.numpy().tobytes()
        for b in training_batches(grouped, batch_size=2, shuffle_buffer=3, seed=11, epochs=3, reader="arrow")
    )
    assert three.startswith(one) and three != one


def test_our_shards_are_the_row_groups_by_their_number_modulo_the_shard_count(grouped):
    """Nine row groups of two rows: shard 1 of 3 holds groups 1, 4 and 7, that is file 0's rows
    2-3, file 1's rows 2-3 and file 2's rows 2-3; shard 0 of 2 holds the five even groups."""
    batches = list(training_batches(grouped, 4, 0, seed=3, epochs=1, shard=(1, 3), reader="arrow"))
    assert sorted(tuple(r) for b in batches for r in b.tolist()) == [
        (f, r, 100 * f + r) for f in range(3) for r in (2, 3)
    ]
    even = list(training_batches(grouped, 5, 0, seed=3, epochs=1, shard=(0, 2), reader="arrow"))
    groups = {(f, r // 2) for b in even for f, r, _ in b.tolist()}
    assert sorted(3 * f + g for f, g in groups) == [0, 2, 4, 6, 8]


def test_the_shuffling_buffer_mixes_rows_across_row_groups(grouped):
    """With no buffer a pass is whole row groups one after the other: rows 2k and 2k+1 of a file
    stay neighbours. Through a buffer of 6 rows the neighbours part, and every row is still there."""

    def neighbours(buffer: int) -> int:
        rows = [
            tuple(r)
            for b in training_batches(grouped, 18, buffer, seed=5, epochs=1, reader="arrow")
            for r in b.tolist()
        ]
        assert sorted(rows) == [(f, r, 100 * f + r) for f in range(3) for r in range(6)]
        return sum(
            1 for a, b in zip(rows[::2], rows[1::2], strict=True) if a[0] == b[0] and a[1] // 2 == b[1] // 2
        )

    assert neighbours(0) == 9
    assert neighbours(6) < 5


@PETASTORM
@pytest.mark.parametrize("seed", [0, 1, 7])
@pytest.mark.parametrize("shard", [(0, 1), (0, 2), (1, 2), (0, 3), (2, 3)])
def test_both_readers_give_the_same_rows_in_every_pass_for_each_seed_and_shard(grouped, seed, shard):
    shard_rows = 2 * len(range(shard[0], 9, shard[1]))  # nine groups of two rows
    per_reader = {}
    for reader in ("arrow", "petastorm"):
        batches = list(training_batches(grouped, 4, 4, seed=seed, epochs=3, shard=shard, reader=reader))
        per_reader[reader] = _passes(batches, shard_rows)
    assert len(per_reader["arrow"]) == 3
    assert per_reader["arrow"] == per_reader["petastorm"]
    assert all(max(p.values()) == 1 for p in per_reader["arrow"])  # every row once per pass


@pytest.mark.parametrize("reader", BOTH)
def test_column_reads_are_every_row_in_file_and_row_group_order(grouped, reader):
    columns = read_columns(grouped, ["items"], reader)
    assert columns["items"].shape == (18, WIDTH)
    assert columns["items"].tolist() == [[f, r, 100 * f + r] for f in range(3) for r in range(6)]


def test_lists_of_other_lengths_come_as_one_array_a_row(tmp_path):
    path = tmp_path / "ragged.parquet"
    pq.write_table(
        pa.table({"t": pa.array([[1, 2], [3], []], type=pa.list_(pa.int32())), "n": [5, 6, 7]}), path
    )
    columns = read_columns([f"file://{path}"], ["t", "n"], "arrow")
    assert [list(row) for row in columns["t"]] == [[1, 2], [3], []]
    assert columns["n"].tolist() == [5, 6, 7] and columns["n"].dtype == np.int64


def test_an_empty_shard_and_an_unknown_or_unrunnable_reader_are_one_line_errors(sequences):
    with pytest.raises(IntentError, match=r"no training rows in shard 4 of 5"):
        next(training_batches(sequences, 2, 0, seed=0, shard=(4, 5), reader="arrow"))
    with pytest.raises(IntentError, match=r"reader 'parquet': unknown; known: auto, arrow, petastorm"):
        choose_reader("parquet")
    problem = petastorm_problem()
    if problem is None:
        assert choose_reader("auto") == "petastorm"
    else:
        assert choose_reader("auto") == "arrow"
        with pytest.raises(IntentError) as raised:
            choose_reader("petastorm")
        assert str(raised.value) == f"reader 'petastorm' cannot run here: {problem}; use --reader arrow"
        assert "\n" not in str(raised.value)
