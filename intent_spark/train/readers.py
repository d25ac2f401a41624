"""Readers over the lake's model-input tables: the only path from Delta to torch.

Both read the Parquet files of the table's current Delta snapshot (one dataset and split), so a
model sees exactly the rows Spark wrote, and nothing else. Two readers keep one contract:

- ``arrow``, our own, on ``pyarrow.parquet`` and ``pyarrow.fs`` (local files, ``s3a://``/``s3://``
  and whatever else ``pyarrow.fs`` opens), for any pyarrow from 14 on;
- ``petastorm``, Petastorm's batch reader and loader, where Petastorm runs: its readers build
  pyarrow's legacy ``ParquetDataset``, removed in pyarrow 15 (``pyarrow.filesystem`` went in 16).

``auto`` takes Petastorm where it is installed and runs, else ours. The contract: a seeded
shuffle of whole row groups at each pass, a process's share of the row groups by
``cur_shard``/``shard_count`` (group ``i`` of the files' groups, in file order, goes to shard
``i % shard_count``), one-epoch passes that restart deterministically, a shuffling buffer, batches
of exactly ``batch_size`` rows across pass boundaries, and column reads in file and row-group order.
"""

from __future__ import annotations

import itertools
import logging
import warnings
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from intent_spark.core import schema as S
from intent_spark.core.conf import READERS
from intent_spark.core.errors import IntentError
from intent_spark.lake.context import Lake
from intent_spark.plugin import Catalogue, UserBatch

PETASTORM_LAST_PYARROW = 14  # Petastorm 0.12 builds pyarrow's legacy ParquetDataset, gone in 15


def split_files(lake: Lake, table: str, dataset: str, split: str) -> list[str]:
    """URLs of the Parquet files holding one dataset and split of a table (Delta's current files)."""
    from pyspark.sql import functions as F

    frame = lake.read(table, dataset).where(F.col(S.SPLIT) == split)
    return sorted(frame.inputFiles())


@cache
def petastorm_problem() -> str | None:
    """Why Petastorm cannot read here (not installed, or a pyarrow it cannot read with); None
    where it can."""
    major = int(pa.__version__.split(".")[0])
    if major > PETASTORM_LAST_PYARROW:
        return (
            f"Petastorm reads with pyarrow {PETASTORM_LAST_PYARROW} or older and this is pyarrow "
            f"{pa.__version__}"
        )
    try:
        import petastorm  # noqa: F401
    except ImportError as exc:
        return f"Petastorm is not installed ({exc}; pip install 'intent-spark[petastorm]')"
    return None


def choose_reader(reader: str = "auto") -> str:
    """The reader that runs: ``auto`` is Petastorm where it can run, else ours; a forced reader
    that cannot run is a one-line error saying why."""
    if reader not in READERS:
        raise IntentError(f"reader {reader!r}: unknown; known: {', '.join(READERS)}")
    problem = petastorm_problem()
    if reader == "auto":
        return "arrow" if problem else "petastorm"
    if reader == "petastorm" and problem:
        raise IntentError(f"reader 'petastorm' cannot run here: {problem}; use --reader arrow")
    return reader


# --- our reader: pyarrow.parquet over pyarrow.fs ---


def _open(url: str) -> pq.ParquetFile:
    """A Parquet file of a Spark URL (``file:/x``, ``file:///x``, ``s3a://b/k``, any pyarrow.fs URI)."""
    from intent_spark.lake.files import filesystem

    local = url.startswith("file:") and not url.startswith("file://")
    fs, path = filesystem(url.removeprefix("file:") if local else url)
    return pq.ParquetFile(path, filesystem=fs)  # opened by pyarrow, so closing it closes the file


def _numpy(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A column as Petastorm's batch reader gives it: scalars as a 1-d array, equal-length lists
    as a 2-d array (rows, length), lists of other lengths as an object array of 1-d arrays."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not pa.types.is_list(array.type) and not pa.types.is_large_list(array.type):
        return array.to_numpy(zero_copy_only=False)
    lengths = pc.list_value_length(array).to_numpy(zero_copy_only=False)
    values = pc.list_flatten(array).to_numpy(zero_copy_only=False)
    if len(lengths) and (lengths == lengths[0]).all():
        return values.reshape(len(lengths), int(lengths[0]))
    parts = np.split(values, np.cumsum(lengths)[:-1]) if len(lengths) else []
    rows = np.empty(len(parts), dtype=object)
    rows[:] = parts
    return rows


def _arrow_columns(urls: list[str], fields: list[str]) -> dict[str, np.ndarray]:
    tables = []
    for url in urls:
        with _open(url) as parquet:
            tables.append(parquet.read(columns=fields))
    if not tables:
        return {name: np.zeros(0) for name in fields}
    table = pa.concat_tables(tables)
    return {name: _numpy(table.column(name)) for name in fields}


def shard_row_groups(urls: list[str], shard: tuple[int, int]) -> list[tuple[int, int]]:
    """(file number, row group) of this shard's row groups: group ``i`` of all the files' groups,
    in file order, belongs to shard ``i % shard_count``, as Petastorm's ``cur_shard`` assigns them."""
    rank, count = shard
    groups: list[tuple[int, int]] = []
    for number, url in enumerate(urls):
        with _open(url) as parquet:
            groups.extend((number, group) for group in range(parquet.metadata.num_row_groups))
    return [g for i, g in enumerate(groups) if i % count == rank]


def _arrow_pass_rows(
    files: list[pq.ParquetFile],
    groups: list[tuple[int, int]],
    column: str,
    shuffle_buffer: int,
    rng: np.random.Generator,
) -> Iterator[np.ndarray]:
    """One pass: the row groups in a seeded order, through a shuffling buffer of ``shuffle_buffer``
    rows (0: the groups' rows as they are). Once the buffer holds twice its size it is shuffled
    and all but ``shuffle_buffer`` rows leave it, so each row costs O(1) and a row may leave long
    after its neighbours; at the pass's end the rest leaves, shuffled."""
    buffer: list[np.ndarray] = []
    held = 0
    for position in rng.permutation(len(groups)):
        number, group = groups[position]
        rows = _numpy(files[number].read_row_group(group, columns=[column]).column(0))
        if rows.dtype == object:
            raise IntentError(f"row group {group} of file {number}: {column} rows differ in length")
        if shuffle_buffer <= 0:
            yield rows
            continue
        buffer.append(rows)
        held += rows.shape[0]
        if held >= 2 * shuffle_buffer:
            mixed = np.concatenate(buffer)[rng.permutation(held)]
            leaving = held - shuffle_buffer
            buffer, held = [mixed[leaving:]], shuffle_buffer
            yield mixed[:leaving]
    if held:
        yield np.concatenate(buffer)[rng.permutation(held)]


@contextmanager
def _arrow_passes(urls: list[str], shuffle_buffer: int, seed: int, shard: tuple[int, int]) -> Iterator[Any]:
    """A function of the pass number giving that pass's rows of this shard: pass ``p`` shuffles
    with the generator seeded by (``seed``, ``p``), so every pass, and a restart, is the same for
    a seed, whatever the thread timing."""
    import torch

    groups = shard_row_groups(urls, shard)
    files = [_open(url) for url in urls]

    def one_pass(number: int) -> Iterator[Any]:
        rng = np.random.default_rng([seed, number])
        for rows in _arrow_pass_rows(files, groups, S.ITEMS_COLUMN, shuffle_buffer, rng):
            yield torch.from_numpy(np.require(rows, np.int64, ["C", "W"]))  # a copy only of read-only rows

    try:
        yield one_pass
    finally:
        for parquet in files:
            parquet.close()


# --- Petastorm's reader ---


@contextmanager
def _quiet():
    # Petastorm 0.12 uses pyarrow's legacy dataset API, which warns on every call, and its
    # loader logs a warning at every reset to the next pass.
    loader_log = logging.getLogger("petastorm.pytorch")
    level = loader_log.level
    loader_log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        loader_log.setLevel(level)


def _store_view() -> Any:
    """A bucket as the legacy pyarrow filesystem Petastorm 0.12 reads through (its pyarrow.fs
    filesystems go to pyarrow's new dataset API, which refuses Petastorm's arguments); paths
    come as ``/BUCKET/KEY`` from the ``file:///BUCKET/KEY`` URLs handed to Petastorm."""
    import pyarrow.filesystem as legacy
    import pyarrow.fs as pafs

    from intent_spark.lake.files import store_filesystem

    class View(legacy.FileSystem):
        def __init__(self) -> None:
            self.fs = store_filesystem()

        def _type(self, path: Any) -> Any:
            return self.fs.get_file_info(str(path).lstrip("/")).type

        def isdir(self, path: Any) -> bool:
            return self._type(path) == pafs.FileType.Directory

        def isfile(self, path: Any) -> bool:
            return self._type(path) == pafs.FileType.File

        def exists(self, path: Any) -> bool:
            return self._type(path) != pafs.FileType.NotFound

        def open(self, path: Any, mode: str = "rb") -> Any:
            return self.fs.open_input_file(str(path).lstrip("/"))

        def ls(self, path: Any) -> list[str]:
            found = self.fs.get_file_info(pafs.FileSelector(str(path).lstrip("/")))
            return ["/" + info.path for info in found]

        def walk(self, path: Any) -> Iterator[tuple[str, list[str], list[str]]]:
            found = self.fs.get_file_info(pafs.FileSelector(str(path).lstrip("/")))
            folders = sorted(i.base_name for i in found if i.type == pafs.FileType.Directory)
            files = sorted(i.base_name for i in found if i.type == pafs.FileType.File)
            yield str(path), folders, files
            for folder in folders:
                yield from self.walk(f"{str(path).rstrip('/')}/{folder}")

    return View()


def _petastorm_args(urls: list[str]) -> tuple[list[str], dict[str, Any]]:
    """URLs and filesystem for Petastorm: files on an object store through ``_store_view``."""
    from intent_spark.lake.files import on_store

    if not urls or not on_store(urls[0]):
        return urls, {}
    return ["file:///" + url.split("://", 1)[1] for url in urls], {"filesystem": _store_view()}


def _petastorm_columns(urls: list[str], fields: list[str]) -> dict[str, np.ndarray]:
    from petastorm import make_batch_reader

    parts: dict[str, list[np.ndarray]] = {name: [] for name in fields}
    if urls:
        paths, where = _petastorm_args(urls)
        with (
            _quiet(),
            make_batch_reader(
                paths,
                schema_fields=fields,
                num_epochs=1,
                shuffle_row_groups=False,
                reader_pool_type="dummy",
                **where,
            ) as reader,
        ):
            for batch in reader:
                for name in fields:
                    parts[name].append(getattr(batch, name))
    return {name: np.concatenate(chunks) if chunks else np.zeros(0) for name, chunks in parts.items()}


@contextmanager
def _petastorm_passes(
    urls: list[str], batch_size: int, shuffle_buffer: int, seed: int, shard: tuple[int, int]
) -> Iterator[Any]:
    """A function of the pass number giving that pass's rows through Petastorm's loader. Each pass
    is its own one-epoch read of a reader that is reset between passes: Petastorm's ventilator
    reshuffles its row groups while it waits for room in its queue, so over several epochs of one
    read their order depends on thread timing."""
    from petastorm import make_batch_reader
    from petastorm.pytorch import BatchedDataLoader

    paths, where = _petastorm_args(urls)
    with (
        _quiet(),
        make_batch_reader(
            paths,
            schema_fields=[S.ITEMS_COLUMN],
            num_epochs=1,
            shuffle_row_groups=True,
            seed=seed,
            reader_pool_type="dummy",
            **where,
            **({"cur_shard": shard[0], "shard_count": shard[1]} if shard[1] > 1 else {}),
        ) as reader,
    ):
        loader = BatchedDataLoader(reader, batch_size=batch_size, shuffling_queue_capacity=shuffle_buffer)
        yield lambda number: (batch[S.ITEMS_COLUMN] for batch in loader)


# --- the contract, whichever reader runs ---


def read_columns(urls: list[str], fields: list[str], reader: str = "auto") -> dict[str, np.ndarray]:
    """Every row of the files, column by column, in file and row-group order."""
    if choose_reader(reader) == "petastorm":
        return _petastorm_columns(urls, fields)
    return _arrow_columns(urls, fields)


def read_catalogue(urls: list[str], reader: str = "auto") -> Catalogue:
    """One split's catalogue as the model interface's arrays, indexed by item index 0..N."""
    columns = read_columns(urls, [S.ITEM_INDEX, S.TRAIN_COUNT, S.TOKEN_IDS], reader)
    index = columns[S.ITEM_INDEX].astype(np.int64)
    n = int(index.max(initial=0))
    if n == 0 or np.unique(index).shape[0] != n:
        raise IntentError(f"catalogue files {urls[:1]}...: item indices are not 1..{n}")
    counts = np.zeros(n + 1, dtype=np.int64)
    counts[index] = columns[S.TRAIN_COUNT]
    tokens = np.asarray(columns[S.TOKEN_IDS], dtype=np.int64).reshape(index.shape[0], -1)
    token_ids = np.zeros((n + 1, tokens.shape[1]), dtype=np.int64)
    token_ids[index] = tokens
    return Catalogue(counts, token_ids)


def training_batches(
    urls: list[str],
    batch_size: int,
    shuffle_buffer: int,
    seed: int,
    epochs: int | None = None,
    shard: tuple[int, int] = (0, 1),
    reader: str = "auto",
) -> Generator[Any, None, None]:
    """Shuffled (batch_size, context + 1) training rows as torch tensors: an endless stream, or
    ``epochs`` passes over every row. ``shard`` (rank, processes): this process's share of the
    row groups, Petastorm's ``cur_shard`` of ``shard_count``.

    The same seed gives the same stream. Batches run on over pass boundaries, so every batch but
    a finite stream's last is ``batch_size`` rows."""
    import torch

    if not urls:
        raise IntentError("no training sequences: the split has no user with two training events")
    passes = itertools.count() if epochs is None else range(epochs)
    if choose_reader(reader) == "petastorm":
        opened = _petastorm_passes(urls, batch_size, shuffle_buffer, seed, shard)
    else:
        opened = _arrow_passes(urls, shuffle_buffer, seed, shard)
    with opened as one_pass:
        carry: Any = None  # rows of the pass so far that fill no whole batch yet
        for number in passes:
            empty = True
            for rows in one_pass(number):
                empty = False
                carry = rows if carry is None else torch.cat([carry, rows])
                while carry.shape[0] >= batch_size:
                    yield carry[:batch_size]
                    carry = carry[batch_size:]
            if empty:
                raise IntentError(f"no training rows in shard {shard[0]} of {shard[1]} of {urls[0]}")
        if carry is not None and carry.shape[0]:
            yield carry


@dataclass(frozen=True)
class UserBlock:
    """One user's events up to their last target: catalogue indices and target positions."""

    items: np.ndarray  # int64 item index per event, in (ts, seq) order
    targets: np.ndarray  # int64 0-based positions of the targets in ``items`` (all >= 1)
    seqs: np.ndarray  # int64 seq of each target


def user_batches(urls: list[str], reader: str = "auto") -> Iterator[UserBatch]:
    """The scoring events of each file as one batch of users, in array form.

    The stream is repartitioned by user when written, so a user's rows sit in one file; they are
    ordered here, so nothing depends on the order the writer kept.
    """
    fields = [S.USER_ID, S.POSITION, S.ITEM_INDEX, S.SEQ, S.IS_TARGET]
    for url in urls:
        columns = read_columns([url], fields, reader)
        if columns[S.USER_ID].shape[0] == 0:
            continue
        _, users = np.unique(columns[S.USER_ID], return_inverse=True)
        positions = columns[S.POSITION].astype(np.int64)
        order = np.lexsort((positions, users))
        users, positions = users[order], positions[order]
        items = columns[S.ITEM_INDEX].astype(np.int64)[order]
        seqs = columns[S.SEQ].astype(np.int64)[order]
        is_target = columns[S.IS_TARGET].astype(bool)[order]
        first = np.r_[True, users[1:] != users[:-1]]
        starts = np.flatnonzero(first)
        user_of_row = np.cumsum(first) - 1
        if not np.array_equal(positions - 1, np.arange(positions.shape[0]) - starts[user_of_row]):
            raise IntentError(f"{url}: a user's scoring events are not positions 1..n in one file")
        targets = np.flatnonzero(is_target)
        if first[targets].any():
            raise IntentError(f"{url}: a target is its user's first event (no context)")
        yield UserBatch(
            items,
            np.r_[starts, items.shape[0]].astype(np.int64),
            targets,
            user_of_row[targets],
            seqs[targets],
        )


def user_blocks(urls: list[str], reader: str = "auto") -> Iterator[UserBlock]:
    """Each user's scoring events as one block, reading one file at a time (``user_batches``
    split by user)."""
    for batch in user_batches(urls, reader):
        for items, targets, seqs in batch.users():
            yield UserBlock(items, targets, seqs)


def row_groups(urls: list[str]) -> int:
    """How many Parquet row groups the files hold (the most processes a shard can feed)."""
    total = 0
    for url in urls:
        with _open(url) as parquet:
            total += parquet.metadata.num_row_groups
    return total
