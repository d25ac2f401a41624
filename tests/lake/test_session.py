"""The test suite's speed-ups are its own Spark profile (no JVM): the tiny-lake profile plus the
Python workers' daemon, and the driver's class-data archive only where it exists. Every session of
the tests reads that profile, an `intent` child through the environment it inherits; no shipped
profile and no default of the package's session names either."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import (
    CLASS_ARCHIVE,
    DAEMON,
    JAVA_OPTIONS,
    REPO_ROOT,
    SUITE_PROFILE,
    suite_profile,
    write_profile,
)

from intent_spark.lake import session
from intent_spark.lake.session import PROFILE_ENV, spark_settings


def test_the_tests_profile_is_small_with_the_daemon_and_the_archive_only_where_it_exists(tmp_path):
    small = spark_settings("small", [])
    archive = tmp_path / "driver-classes.jsa"
    without = suite_profile("small", archive)
    assert without == {**small, **DAEMON}

    archive.write_bytes(b"\0")
    assert suite_profile("small", archive) == {
        **small,
        **DAEMON,
        JAVA_OPTIONS: f"{small[JAVA_OPTIONS]} -XX:SharedArchiveFile={archive} -Xshare:auto -Xlog:cds=off "
        "-Xlog:cds+dynamic=off",
    }
    # read back as a profile file, the same settings (YAML's "false" stays Spark's "false")
    assert spark_settings(str(write_profile(without, tmp_path)), []) == without


def test_every_session_of_the_tests_and_each_intent_child_reads_the_tests_profile():
    named = os.environ[PROFILE_ENV]  # what a child's `intent` reads
    if not Path(named).name.startswith(SUITE_PROFILE):
        pytest.skip(f"the environment names its own profile: {PROFILE_ENV}={named}")
    inherited = spark_settings(named, [])
    assert inherited == suite_profile(archive=CLASS_ARCHIVE)


def test_no_shipped_profile_and_no_session_default_names_the_daemon_or_an_archive():
    shipped = [
        spark_settings(str(path), []) for path in sorted((REPO_ROOT / "conf" / "spark").glob("*.yaml"))
    ]
    assert shipped, "no profile in conf/spark"
    for settings in [*shipped, session.BASE_CONF, session.LOCAL_CONF]:
        assert not set(DAEMON) & set(settings), settings
        assert "SharedArchiveFile" not in settings.get(JAVA_OPTIONS, ""), settings
