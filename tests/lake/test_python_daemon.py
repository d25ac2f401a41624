"""Spark's Python workers read each zip archive's directory once, not at every task, and again
when the archive changes."""

from __future__ import annotations

import os
import zipfile
import zipimport

from intent_spark.lake.python_daemon import _invalidate_when_changed


def _archive(path, *modules: str) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name in modules:
            archive.writestr(f"{name}.py", f"NAME = {name!r}\n")


def test_an_unchanged_archive_is_not_read_again_and_a_changed_one_is(tmp_path):
    path = tmp_path / "code.zip"
    _archive(path, "first")
    importer = zipimport.zipimporter(str(path))
    _invalidate_when_changed(importer)  # the first call reads (the archive may have changed since)
    files = importer._files
    for _ in range(3):
        _invalidate_when_changed(importer)
    assert importer._files is files  # Python 3.11's own invalidate_caches builds a new one each call
    assert importer.find_spec("second") is None

    _archive(path, "first", "second")
    os.utime(path, ns=(1, 1))  # a new stamp even where the clock's resolution is coarse
    _invalidate_when_changed(importer)
    assert importer._files is not files
    assert importer.find_spec("second") is not None
