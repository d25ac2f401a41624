"""The driver JVM's options (no JVM): the class-data archive is used where it exists, and never
over an archive the caller already names."""

from __future__ import annotations

from intent_spark.lake import session


def test_the_class_archive_is_named_only_where_it_exists_and_no_other_is(tmp_path, monkeypatch):
    archive = tmp_path / "driver-classes.jsa"
    monkeypatch.setattr(session, "CLASS_ARCHIVE", archive)
    assert session.with_class_archive("-Duser.timezone=UTC") == "-Duser.timezone=UTC"

    archive.write_bytes(b"\0")
    assert session.with_class_archive("-Duser.timezone=UTC") == (
        f"-Duser.timezone=UTC -XX:SharedArchiveFile={archive} -Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"
    )
    assert session.with_class_archive("") == (
        f"-XX:SharedArchiveFile={archive} -Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"
    )
    building = "-Duser.timezone=UTC -XX:ArchiveClassesAtExit=/tmp/new.jsa"  # the archive's own build
    assert session.with_class_archive(building) == building
    own = "-XX:SharedArchiveFile=/elsewhere.jsa"
    assert session.with_class_archive(own) == own
