"""Paths and URIs of the lake and the raw files: one pyarrow filesystem for local folders and object stores."""

from __future__ import annotations

import pyarrow.fs as pafs


def filesystem(root: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem of a path or URI, and the path within it."""
    if "://" in root:
        return pafs.FileSystem.from_uri(root)
    return pafs.LocalFileSystem(), root


def to_uri(path: str) -> str:
    """A local path as the URI Spark reports in ``_metadata.file_path``."""
    if "://" in path or path.startswith("file:"):
        return path
    return "file:" + path
