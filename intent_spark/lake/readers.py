"""Petastorm readers over the lake's model-input tables: the only path from Delta to torch.

Petastorm reads the Parquet files of the table's current Delta snapshot (one dataset and split),
so a model sees exactly the rows Spark wrote, and nothing else.
"""

from __future__ import annotations

import itertools
import logging
import warnings
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.errors import IntentError
from intent_spark.lake.tables import read_table
from intent_spark.plugin import Catalogue, UserBatch


def split_files(spark: SparkSession, lake: str, table: str, dataset: str, split: str) -> list[str]:
    """URLs of the Parquet files holding one dataset and split of a table (Delta's current files)."""
    frame = read_table(spark, lake, table, dataset).where(F.col(S.SPLIT) == split)
    return sorted(frame.inputFiles())


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


def read_columns(urls: list[str], fields: list[str]) -> dict[str, np.ndarray]:
    """Every row of the files, column by column, in file and row-group order."""
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


def read_catalogue(urls: list[str]) -> Catalogue:
    """One split's catalogue as the model interface's arrays, indexed by item index 0..N."""
    columns = read_columns(urls, [S.ITEM_INDEX, S.TRAIN_COUNT, S.TOKEN_IDS])
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
) -> Generator[Any, None, None]:
    """Shuffled (batch_size, context + 1) training rows as torch tensors: an endless stream, or
    ``epochs`` passes over every row. ``shard`` (rank, processes): this process's share of the
    row groups, Petastorm's ``cur_shard`` of ``shard_count``.

    The same seed gives the same stream. Each pass is its own one-epoch read of a reader that
    is reset between passes: Petastorm's ventilator reshuffles its row groups while it waits
    for room in its queue, so over several epochs of one read their order depends on thread
    timing. Batches run on over pass boundaries, so every batch but a finite stream's last is
    ``batch_size`` rows."""
    import torch
    from petastorm import make_batch_reader
    from petastorm.pytorch import BatchedDataLoader

    if not urls:
        raise IntentError("no training sequences: the split has no user with two training events")
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
        passes = itertools.count() if epochs is None else range(epochs)
        carry: Any = None  # rows of the pass so far that fill no whole batch yet
        for _ in passes:
            empty = True
            for batch in loader:
                empty = False
                rows = batch[S.ITEMS_COLUMN]
                carry = rows if carry is None else torch.cat([carry, rows])
                while carry.shape[0] >= batch_size:
                    yield carry[:batch_size]
                    carry = carry[batch_size:]
            if empty:
                raise IntentError(f"no training rows in shard {shard[0]} of {shard[1]} of {paths[0]}")
        if carry is not None and carry.shape[0]:
            yield carry


@dataclass(frozen=True)
class UserBlock:
    """One user's events up to their last target: catalogue indices and target positions."""

    items: np.ndarray  # int64 item index per event, in (ts, seq) order
    targets: np.ndarray  # int64 0-based positions of the targets in ``items`` (all >= 1)
    seqs: np.ndarray  # int64 seq of each target


def user_batches(urls: list[str]) -> Iterator[UserBatch]:
    """The scoring events of each file as one batch of users, in array form.

    The stream is repartitioned by user when written, so a user's rows sit in one file; they are
    ordered here, so nothing depends on the order the writer kept.
    """
    fields = [S.USER_ID, S.POSITION, S.ITEM_INDEX, S.SEQ, S.IS_TARGET]
    for url in urls:
        columns = read_columns([url], fields)
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


def user_blocks(urls: list[str]) -> Iterator[UserBlock]:
    """Each user's scoring events as one block, reading one file at a time (``user_batches``
    split by user)."""
    for batch in user_batches(urls):
        for items, targets, seqs in batch.users():
            yield UserBlock(items, targets, seqs)


def row_groups(urls: list[str]) -> int:
    """How many Parquet row groups the files hold (the most processes a shard can feed)."""
    import pyarrow.parquet as pq

    from intent_spark.lake.files import filesystem

    total = 0
    for url in urls:
        local = url.startswith("file:") and not url.startswith("file://")
        fs, path = filesystem(url.removeprefix("file:") if local else url)
        with fs.open_input_file(path) as source:
            total += pq.ParquetFile(source).metadata.num_row_groups
    return total
