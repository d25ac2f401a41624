"""Finding a source's raw files and checking gzip members before Spark reads them."""

from __future__ import annotations

import fnmatch
import zlib
from dataclasses import dataclass

import pyarrow.fs as pafs

from intent_spark.core.errors import IntentError
from intent_spark.lake.files import filesystem

_CHUNK = 1 << 20


@dataclass(frozen=True)
class GzipCheck:
    """Outcome of decompressing one .gz file once: complete lines, and whether it ended early."""

    path: str
    complete_lines: int
    truncated: bool
    error: str = ""


def check_source_folder(root: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and path of a source folder; a one-line error when it is missing or not a
    folder (checked before Spark starts, so a wrong path costs no JVM)."""
    fs, base = filesystem(root)
    info = fs.get_file_info(base)
    if info.type == pafs.FileType.NotFound:
        raise IntentError(f"{root}: source folder not found")
    if info.type != pafs.FileType.Directory:
        raise IntentError(f"{root}: not a folder")
    return fs, base


def find_files(root: str, patterns: tuple[str, ...], what: str) -> list[str]:
    """Files under ``root`` matching any glob (relative to root), sorted and unique.

    Raises IntentError with a one-line reason when the folder is missing or nothing matches.
    """
    fs, base = check_source_folder(root)
    listing = fs.get_file_info(pafs.FileSelector(base, recursive=True))
    base_prefix = base.rstrip("/") + "/"
    found = set()
    for entry in listing:
        if entry.type != pafs.FileType.File:
            continue
        relative = entry.path[len(base_prefix) :] if entry.path.startswith(base_prefix) else entry.path
        if any(fnmatch.fnmatchcase(relative, pattern) for pattern in patterns):
            found.add(entry.path if "://" not in root else f"{root.split('://')[0]}://{entry.path}")
    if not found:
        raise IntentError(f"{root}: no {what} file matches {', '.join(patterns)}")
    return sorted(found)


def check_gzip(path: str) -> GzipCheck:
    """Decompress a .gz file in constant memory and count its complete lines.

    Spark (with ignoreCorruptFiles) silently keeps what it could read of a truncated gzip;
    this check is what turns the lost remainder into a reject row instead of a silent drop.
    """
    fs, local = filesystem(path)
    lines = 0
    decomp = zlib.decompressobj(wbits=31)
    in_member = False  # bytes of a gzip member were fed and its end marker not yet seen
    try:
        with fs.open_input_stream(local, compression=None) as stream:
            while chunk := stream.read(_CHUNK):
                while chunk:
                    in_member = True
                    lines += decomp.decompress(chunk).count(b"\n")
                    if not decomp.eof:
                        break
                    in_member = False
                    chunk = decomp.unused_data  # concatenated members are legal gzip
                    decomp = zlib.decompressobj(wbits=31)
    except zlib.error as exc:
        return GzipCheck(path, lines, True, f"corrupt gzip data ({exc})")
    if in_member:
        return GzipCheck(path, lines, True, "gzip stream ends before its end marker")
    return GzipCheck(path, lines, False)
