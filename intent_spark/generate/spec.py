"""The generate stage: synthetic raw files in a release's own format, for a dataset of the run
without ``raw:``."""

from __future__ import annotations

from pathlib import Path

from intent_spark.core.runconf import DatasetEntry
from intent_spark.core.stage_spec import DATASET, Run, Stage, Task
from intent_spark.lake.files import raw_listing


def generate_tasks(run: Run) -> list[Task]:
    from intent_spark.generate import generate_release

    tasks = []
    for entry in run.conf.datasets:
        if entry.raw:
            continue
        folder = run.raw_folder(entry)

        def work(entry: DatasetEntry = entry, folder: str = folder) -> None:
            generate_release(
                entry.source_name, Path(folder), entry.events, seed=run.conf.seed, progress=run.progress
            )

        def settings(entry: DatasetEntry = entry, folder: str = folder) -> tuple:
            if not raw_listing(folder):
                run.forget(entry.name, "generate")  # the files went: make them again
            return (entry.source_name, entry.events, run.conf.seed)

        tasks.append(Task(GENERATE.name, entry.name, work, settings))
    return tasks


GENERATE = Stage(
    "generate",
    DATASET,
    (),
    (),
    ("raw release files",),
    "source, events, seed",
    generate_tasks,
    when="a dataset without raw:",
    what="synthetic raw files in the release's own format",
)
