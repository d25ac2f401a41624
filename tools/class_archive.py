"""Build the driver JVM's class-data archive (``make class-archive``): a speed-up of the test
suite, not part of the package.

The data stages of one ``intent run`` (ingest, split, verify) of a small generated H&M release, in
this process, on a JVM started with ``-XX:ArchiveClassesAtExit``: the classes they load (Spark,
Delta, Parquet, Arrow, the CSV reader, window functions) are written to the archive when the JVM
exits. Models add few classes of their own, and a class the archive lacks loads as before.
The test suite's sessions and its ``intent`` children map it through their Spark profile
(``tests/conftest.py``); any other command can through ``spark.driver.extraJavaOptions``. The
archive is written aside and renamed into place, so a failed or killed build leaves no archive
rather than half of one.

    python tools/class_archive.py PATH    (the Makefile's PATH: .jars/driver-classes.jsa)
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

from intent_spark.core.errors import IntentError
from intent_spark.lake.session import spark_settings

EVENTS = 3000  # the fewest at which the generated H&M release has an admissible cutoff
PROFILE = "small"  # the product's profile for tiny lakes, which the tests' profile builds on


def build_class_archive(target: Path) -> int:
    """Run the small pipeline on an archiving JVM; return the archive's size in bytes."""
    from intent_spark.core.runconf import load_run_conf
    from intent_spark.pipeline.commands import reporter
    from intent_spark.pipeline.runner import Runner, run_pipeline

    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    with tempfile.TemporaryDirectory(prefix="intent-class-archive-") as work:
        conf = Path(work) / "run.yaml"
        conf.write_text(
            yaml.safe_dump(
                {
                    "workdir": str(Path(work) / "run"),
                    "seed": 0,
                    "datasets": [{"name": "hm", "events": EVENTS}],
                    "models": [],
                }
            ),
            encoding="utf-8",
        )
        # the Java options of the tests' profile and its children, whose many short JVMs gain the most
        java = spark_settings(PROFILE, []).get("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        settings = spark_settings(
            PROFILE, [f"spark.driver.extraJavaOptions={java} -XX:ArchiveClassesAtExit={partial}"]
        )
        runner = Runner(
            load_run_conf(conf),
            root=None,
            force=False,
            spark_settings=settings,
            progress=reporter("class-archive"),
        )
        code = 1
        try:
            code = run_pipeline(runner)
        finally:
            _stop_jvm()
            if code != 0:  # the JVM wrote its archive on the way out all the same
                partial.unlink(missing_ok=True)
    if code != 0:
        raise IntentError(f"class archive: the small run failed (exit {code}); no archive written")
    if not partial.is_file():
        raise IntentError("class archive: the JVM wrote none (is this JDK's own CDS archive installed?)")
    partial.replace(target)
    return target.stat().st_size


def _stop_jvm() -> None:
    """Stop the session and wait for its JVM, which writes the archive as it exits."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None:
        session.stop()
    gateway = SparkContext._gateway
    if gateway is not None and gateway.proc is not None:
        gateway.proc.stdin.close()
        gateway.proc.wait(timeout=600)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} PATH (the archive to write)")
    started = time.monotonic()
    path = Path(sys.argv[1]).absolute()
    try:
        size = build_class_archive(path)
    except IntentError as error:
        sys.exit(f"{error}")
    print(f"class archive: {path} ({size / 2**20:.0f} MiB) in {time.monotonic() - started:.0f} s")
