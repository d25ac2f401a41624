"""Is a Delta table whole? The faults a shared lake meets, each named in one line.

Delta's log says which data files make the table's current version and how large each was when
committed. A file deleted behind Delta's back, or truncated or overwritten by a partial copy,
no longer matches; a commit file removed from ``_delta_log`` leaves a gap, or (the newest one)
a checksum file ``N.crc`` without its ``N.json``, and the table would silently read as an
older version. ``table_faults`` compares the log with one listing of the table's folder (no
data file is opened); ``read_table`` refuses a damaged table with the first fault, and
``intent verify`` prints them all. A table's check is kept for its version, so a stage that
reads it many times pays once, and a version this process committed on a table it created or
had found whole is whole without a check (``note_own_commit``).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

import pyarrow.fs as pafs
from pyspark.sql import DataFrame, SparkSession

from intent_spark.core.errors import IntentError
from intent_spark.lake.files import filesystem

LOG = "_delta_log"
_whole: set[tuple[str, int]] = set()  # (table folder, version) found whole in this process


class DamagedTable(IntentError):
    """A table whose files do not match its Delta log."""


def _list(system: pafs.FileSystem, folder: str, recursive: bool) -> list[pafs.FileInfo]:
    return system.get_file_info(pafs.FileSelector(folder, recursive=recursive, allow_not_found=True))


def log_versions(infos: list[pafs.FileInfo]) -> tuple[set[int], set[int], set[int]]:
    """The versions of the commit, checksum and checkpoint files of a ``_delta_log`` listing."""
    commits, sums, checkpoints = set(), set(), set()
    for info in infos:
        stem, _, suffix = info.base_name.partition(".")
        if not stem.isdigit():
            continue
        version = int(stem)
        if suffix == "json":
            commits.add(version)
        elif suffix == "crc":
            sums.add(version)
        elif suffix.startswith("checkpoint"):
            checkpoints.add(version)
    return commits, sums, checkpoints


def log_faults(commits: set[int], sums: set[int], checkpoints: set[int]) -> list[str]:
    """Gaps in the commit files: a version missing after the last checkpoint (or from 0), or
    the newest removed with its checksum file left behind."""
    if not commits and sums:
        return [
            f"{LOG}: commit {_versions(sorted(sums))} missing, its checksum file left behind (no "
            "version of the table can be read)"
        ]
    if not commits:
        return [f"{LOG}: no commit files"] if checkpoints else []
    faults = []
    top = max(commits)
    checkpoint = max((c for c in checkpoints if c <= top), default=None)
    first = 0 if checkpoint is None else checkpoint + 1  # older commits may be cleaned up
    missing = [v for v in range(first, top) if v not in commits]
    if missing:
        faults.append(f"{LOG}: commit {_versions(missing)} missing (the versions after it cannot be read)")
    removed = sorted(v for v in sums if v > top)
    if removed:
        faults.append(
            f"{LOG}: commit {_versions(removed)} missing, its checksum file left behind (the table "
            f"would read as version {top})"
        )
    return faults


def _versions(versions: list[int]) -> str:
    if len(versions) == 1:
        return f"{versions[0]:020d}.json"
    return f"{versions[0]:020d}.json .. {versions[-1]:020d}.json ({len(versions)} files)"


def snapshot_files(spark: SparkSession, path: str) -> tuple[int, DataFrame]:
    """The table's current version and its data files (``path`` relative and URL-encoded as the
    log writes it, ``size`` in bytes), from Delta's own snapshot."""
    jvm = spark._jvm
    pair = jvm.org.apache.spark.sql.delta.DeltaLog.forTableWithSnapshot(spark._jsparkSession, path)
    snapshot = pair._2()
    return int(snapshot.version()), DataFrame(snapshot.allFiles().toDF(), spark).select("path", "size")


def table_root(path: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem of a table's folder (local or on a store) and its root, without a
    trailing slash."""
    system, root = filesystem(path if "://" in path else str(Path(path).resolve()))
    return system, root.rstrip("/")


def note_own_commit(path: str, version: int) -> None:
    """This process just committed ``version`` of the table at ``path``, on a table it created
    (version 0) or had found whole at the version before: the new version is whole too (its new
    files are the ones just written), so its next read needs no listing and no Spark job."""
    _, root = table_root(path)
    if version == 0 or (root, version - 1) in _whole:
        _whole.add((root, version))


def table_faults(spark: SparkSession, path: str) -> list[str]:
    """Every fault of the Delta table at ``path``, one line each (empty: whole)."""
    system, root = table_root(path)
    commits, sums, checkpoints = log_versions(_list(system, f"{root}/{LOG}", recursive=False))
    faults = log_faults(commits, sums, checkpoints)
    if faults or not commits or (root, max(commits)) in _whole:
        return faults
    try:
        version, files = snapshot_files(spark, path)
    except Exception as exc:  # noqa: BLE001 - Delta's own words for a log it cannot replay
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return [f"{LOG} cannot be read: {first[:300]}"]
    infos = _list(system, root, recursive=True)
    on_disk = {i.path[len(root) + 1 :]: i.size for i in infos if i.type == pafs.FileType.File}
    for row in files.collect():  # one row per data file: the log's own size, not the data
        name = unquote(row["path"])
        if "://" in name or name.startswith("/"):
            continue  # an absolute path (a shallow clone's): outside this folder's listing
        size = on_disk.get(name)
        if size is None:
            faults.append(f"data file {name} is missing (deleted behind Delta's back)")
        elif size != row["size"]:
            faults.append(
                f"data file {name} is {size:,} bytes, version {version} committed {row['size']:,} "
                "(truncated or overwritten)"
            )
    if not faults:
        _whole.add((root, version))
    return faults


def check_table(spark: SparkSession, path: str) -> None:
    """Refuse a damaged table: its first fault, and how many more ``intent verify`` lists."""
    faults = table_faults(spark, path)
    if faults:
        more = f" (and {len(faults) - 1} more; `intent verify` lists them)" if len(faults) > 1 else ""
        raise DamagedTable(f"{path}: damaged: {faults[0]}{more}")


def lake_tables(root: str) -> list[str]:
    """Every Delta table of the lake (a top-level folder with a ``_delta_log``)."""
    system, inside = filesystem(root if "://" in root else str(Path(root).resolve()))
    folders = [i for i in _list(system, inside, recursive=False) if i.type == pafs.FileType.Directory]
    return sorted(
        f.base_name
        for f in folders
        if not f.base_name.startswith(("_", "."))
        and system.get_file_info(f"{f.path}/{LOG}").type == pafs.FileType.Directory
    )


def lake_faults(spark: SparkSession, root: str) -> dict[str, list[str]]:
    """Each table of the lake with its faults (an empty list: whole)."""
    return {table: table_faults(spark, f"{root.rstrip('/')}/{table}") for table in lake_tables(root)}
