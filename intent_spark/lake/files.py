"""Paths and URIs of the lake and the raw files: one pyarrow filesystem for local folders and object stores."""

from __future__ import annotations

import os
import re
from functools import cache
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from intent_spark.core.progress import Progress, silent

# Spark names S3 buckets s3a:// (Hadoop's S3A connector); pyarrow's own name is s3://.
STORE_SCHEMES = ("s3a://", "s3://")
ENDPOINT_ENV = "AWS_ENDPOINT_URL"  # the AWS SDKs' own variable: an S3-API store other than AWS


def on_store(path: str) -> bool:
    return path.startswith(STORE_SCHEMES)


@cache
def _store(endpoint: str, region: str) -> pafs.S3FileSystem:
    """pyarrow's S3 filesystem; credentials from the AWS SDK's chain (AWS_ACCESS_KEY_ID, ...)."""
    if not endpoint:
        return pafs.S3FileSystem(region=region)
    where = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
    return pafs.S3FileSystem(
        region=region,
        endpoint_override=where.netloc,
        scheme=where.scheme,
        connect_timeout=5,
        request_timeout=30,
    )


def store_filesystem() -> pafs.S3FileSystem:
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    return _store(os.environ.get(ENDPOINT_ENV, ""), region)


_STORE_REASONS = {
    "NETWORK_CONNECTION": "the store does not answer at {endpoint}",
    "ACCESS_DENIED": "access denied (the credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)",
    "NO_SUCH_BUCKET": "no such bucket",
}


# S3A's (the JVM's) words for the same faults, as Spark passes them up in a Py4JJavaError
_S3A_REASONS = (
    (
        r"Connection refused|Unable to execute HTTP request|connect timed out|UnknownHostException",
        "NETWORK_CONNECTION",
    ),
    (r"AccessDenied|InvalidAccessKeyId|SignatureDoesNotMatch|403 Forbidden", "ACCESS_DENIED"),
    (r"NoSuchBucket|bucket does not exist", "NO_SUCH_BUCKET"),
)


def store_error(exc: BaseException) -> str | None:
    """An object store's error, from pyarrow or from Spark's S3A connector, as one line naming the
    URI; None for any other error."""
    text = str(exc)
    where = re.search(r"key '(?P<key>[^']*)' in bucket '(?P<bucket>[^']*)'", text)
    code = re.search(r"AWS Error (\w+)", text)
    uri = f"s3a://{where['bucket']}/{where['key']}" if where else None
    if uri is None or code is None:
        java = re.search(r"(?P<uri>s3a?://[^\s:,;'\"\]\)]*[^\s:,;'\"\]\).])", text)
        found = next((name for pattern, name in _S3A_REASONS if re.search(pattern, text)), None)
        if java is None or found is None:
            return None
        uri, reason_code = java["uri"], found
    else:
        reason_code = code[1]
    endpoint = os.environ.get(ENDPOINT_ENV) or "AWS"
    reason = _STORE_REASONS.get(reason_code, reason_code.lower().replace("_", " ")).format(endpoint=endpoint)
    return f"{uri}: {reason}; the command stopped there, each table keeps its last committed version"


def filesystem(root: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem of a path or URI, and the path within it (``BUCKET/KEY`` on a store)."""
    if on_store(root):
        return store_filesystem(), root.split("://", 1)[1]
    if "://" in root:
        return pafs.FileSystem.from_uri(root)
    return pafs.LocalFileSystem(), root


def raw_listing(root: str) -> list[tuple[str, int, int]]:
    """(relative path, size, modification time) of every file under a release folder."""
    system, path = filesystem(root if "://" in root else str(Path(root).resolve()))
    infos = system.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    return sorted(
        (i.path.removeprefix(path), i.size or 0, int(i.mtime_ns or 0))
        for i in infos
        if i.type == pafs.FileType.File
    )


def to_uri(path: str) -> str:
    """A local path as the URI Spark reports in ``_metadata.file_path``."""
    if "://" in path or path.startswith("file:"):
        return path
    return "file:" + path


def remove_folder(folder: str) -> None:
    """Delete a folder and everything in it, if it is there."""
    fs, path = filesystem(folder)
    if fs.get_file_info(path).type == pafs.FileType.Directory:
        fs.delete_dir(path)


def part_files(folder: str, suffix: str) -> list[str]:
    """The part files Spark wrote into ``folder`` (paths within its filesystem), in partition order."""
    fs, path = filesystem(folder)
    found = fs.get_file_info(pafs.FileSelector(path))
    names = [f.path for f in found if f.base_name.startswith("part-") and f.base_name.endswith(suffix)]
    return sorted(names, key=lambda name: name.rsplit("/", 1)[-1])


def write_single_file(df, path: str, fmt: str = "parquet", row_group_rows: int = 65_536) -> int:
    """An ordered DataFrame as one Parquet or JSON Lines file at ``path``; returns its rows.

    Spark writes the parts (the rows never pass through the driver's memory); the driver then
    streams them, in partition order, into one file. Parquet is re-encoded in row groups of a
    fixed size, so the bytes depend on the rows and their order only, not on how Spark
    partitioned them: the same rows give the same file on every machine.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    fs, target = filesystem(path)
    staging = f"{path}.parts"
    writer = df.write.mode("overwrite")
    (writer.parquet if fmt == "parquet" else writer.json)(staging)
    parts = part_files(staging, ".parquet" if fmt == "parquet" else ".json")
    rows = 0
    with fs.open_output_stream(target) as sink:
        if fmt != "parquet":
            for part in parts:
                with fs.open_input_stream(part) as source:
                    data = source.read()
                sink.write(data)
                rows += data.count(b"\n")
        else:
            schema = None
            if parts:
                with fs.open_input_file(parts[0]) as first:
                    schema = pq.ParquetFile(first).schema_arrow.remove_metadata()
            if schema is None:
                raise ValueError(f"{staging}: Spark wrote no part file")
            with pq.ParquetWriter(sink, schema, compression="zstd") as out:
                pending: list = []
                held = 0
                for part in parts:
                    with fs.open_input_file(part) as source:
                        for batch in pq.ParquetFile(source).iter_batches(batch_size=row_group_rows):
                            pending.append(batch.cast(schema) if batch.schema != schema else batch)
                            held += batch.num_rows
                            while held >= row_group_rows:
                                table = pa.Table.from_batches(pending, schema)
                                out.write_table(table.slice(0, row_group_rows), row_group_size=row_group_rows)
                                rest = table.slice(row_group_rows)
                                pending, held = rest.to_batches(), rest.num_rows
                                rows += row_group_rows
                if held or rows == 0:
                    out.write_table(pa.Table.from_batches(pending, schema), row_group_size=row_group_rows)
                    rows += held
    fs.delete_dir(filesystem(staging)[1])
    return rows


def remove_staging(root: str, sources: set[str], progress: Progress = silent) -> list[str]:
    """Delete what killed trainings and scorings of these sources (and their variants) left in
    ``LAKE/_staging/<kind>/<dataset>``; the caller holds their locks. Returns what it removed."""
    system, inside = filesystem(root if "://" in root else str(Path(root).resolve()))
    staging = f"{inside.rstrip('/')}/_staging"
    removed = []
    for kind in system.get_file_info(pafs.FileSelector(staging, allow_not_found=True)):
        if kind.type != pafs.FileType.Directory:
            continue
        for folder in system.get_file_info(pafs.FileSelector(kind.path, allow_not_found=True)):
            if folder.type == pafs.FileType.Directory and folder.base_name.split(".", 1)[0] in sources:
                system.delete_dir(folder.path)
                removed.append(f"_staging/{kind.base_name}/{folder.base_name}")
    if removed:
        progress(f"removed what interrupted stages left: {', '.join(removed)}")
    return removed
