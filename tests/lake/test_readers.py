"""The Petastorm training stream on hand-written Parquet files, with no JVM: the same seed gives
the same stream whatever the thread timing, batches run on over passes, and a finite stream
holds every row once per pass."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from intent_spark.lake.readers import training_batches

WIDTH = 3  # context 2 + the target


@pytest.fixture(scope="module")
def sequences(tmp_path_factory):
    """Four files of 5 rows each, one row group per file: row r of file f is (f, r, 100 f + r)."""
    folder = tmp_path_factory.mktemp("train_sequences")
    urls = []
    for f in range(4):
        rows = [[f, r, 100 * f + r] for r in range(5)]
        table = pa.table({"items": pa.array(rows, type=pa.list_(pa.int64()))})
        path = folder / f"part-{f:05d}.parquet"
        pq.write_table(table, path)
        urls.append(f"file://{path}")
    return urls


STREAM = """
import hashlib, sys, torch
from intent_spark.lake.readers import training_batches
torch.manual_seed(0)
stream = training_batches(sys.argv[1:], 4, 8, 7)
digest = hashlib.md5()
for _ in range(30):  # six passes over 20 rows
    digest.update(next(stream).numpy().tobytes())
print(digest.hexdigest())
"""


def test_the_same_seed_gives_the_same_stream_in_every_process(sequences):
    """Each run is a fresh process, as each `intent train` is: Petastorm's own multi-epoch read
    reshuffled its row groups as often as its ventilator thread waited, so these differed."""
    digests = {
        subprocess.run(
            [sys.executable, "-c", STREAM, *sequences], capture_output=True, text=True, check=True
        ).stdout.strip()
        for _ in range(3)
    }
    assert len(digests) == 1, digests


def test_batches_are_whole_across_passes_and_a_finite_stream_reads_every_row_once_per_pass(sequences):
    batches = list(training_batches(sequences, batch_size=6, shuffle_buffer=0, seed=0, epochs=2))
    assert [b.shape for b in batches] == [(6, WIDTH)] * 6 + [(4, WIDTH)]  # 40 rows
    rows = Counter(tuple(r) for b in batches for r in b.tolist())
    assert rows == Counter({(f, r, 100 * f + r): 2 for f in range(4) for r in range(5)})
    first_pass = [tuple(r) for b in batches for r in b.tolist()][:20]
    files_in_order = [row[0] for row in first_pass[::5]]
    assert sorted(files_in_order) == [0, 1, 2, 3]  # whole row groups, shuffled as units
