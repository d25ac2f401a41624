"""The ingest stage: a release's files into Delta tables with one schema."""

from __future__ import annotations

from intent_spark.core import schema as S
from intent_spark.core.runconf import DatasetEntry
from intent_spark.core.sources import SourceConf
from intent_spark.core.stage_spec import DATASET, Run, Stage, Task
from intent_spark.lake.files import raw_listing


def ingest_tasks(run: Run) -> list[Task]:
    from intent_spark.ingest import ingest_source

    tasks = []
    for entry in run.conf.datasets:
        conf = run.source_conf(entry)
        folder = run.raw_folder(entry)

        def work(entry: DatasetEntry = entry, conf: SourceConf = conf, folder: str = folder) -> None:
            from intent_spark.ingest.files import check_source_folder

            check_source_folder(folder)  # a missing or empty folder: one line, before Spark starts
            lake = run.lake_context()
            summary = ingest_source(lake, conf, folder, dataset=entry.name)
            run.progress(
                f"{entry.name}: {summary.raw_rows:,} raw rows in {summary.files} file(s) -> "
                f"{summary.events:,} events, {summary.rejects:,} rejects; {summary.items:,} items "
                f"({conf.level}), {summary.users:,} users"
            )
            if summary.rejects:
                run.progress(f"{entry.name}: rejected rows with reasons are in {lake.path(S.REJECTS)}")

        def settings(name: str = entry.name, conf: SourceConf = conf, folder: str = folder) -> tuple | None:
            if ("generate", name, None) in run.planned_runs:
                return None  # the release is written first; its files' times are not known yet
            return (raw_listing(folder), repr(conf))

        # It reads the release files themselves (in its settings), however they came: generated
        # or given, the same files are the same inputs.
        tasks.append(Task(INGEST.name, entry.name, work, settings, reads=()))
    return tasks


INGEST = Stage(
    "ingest",
    DATASET,
    ("generate",),
    ("raw release files",),
    ("events", "items", "users", "rejects", "ingest_files"),
    "the raw files' names, sizes and times; the source conf",
    ingest_tasks,
    scheduled=True,
    what="the release files into Delta tables with one schema",
)
