"""What every source generator does around its own columns: open event logs, report the release.

Why: the five generators differ in their columns and side files, not in how an event log gets
its bad rows or how the written files are reported; keeping those steps here makes every
source place bad rows and count rows the same way.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from intent_spark.generate import GeneratedRelease
from intent_spark.generate.output import BadLineMaker, EventLogFile
from intent_spark.generate.world import side_rng

BAD_ROWS_PURPOSE = 3


def open_event_log(
    dataset: str,
    seed: int,
    path: Path,
    header: str | None,
    make_bad_lines: BadLineMaker | None,
    fallback_template: str,
) -> EventLogFile:
    """An event log whose bad rows (when `make_bad_lines` is given) sit at seeded positions.

    Each log gets a fresh copy of the source's bad-rows stream, so the positions depend only on
    (dataset, seed), never on how many logs were opened before it.
    """
    rng = side_rng(dataset, seed, BAD_ROWS_PURPOSE)
    return EventLogFile(path, header, rng, make_bad_lines, fallback_template)


@contextmanager
def open_event_logs(
    dataset: str,
    seed: int,
    paths: Sequence[Path],
    header: str | None,
    make_bad_lines: BadLineMaker | None,
    fallback_template: str,
) -> Iterator[list[EventLogFile]]:
    """Event logs of one source split over several files with one header, closed together.

    The bad rows (when `make_bad_lines` is given) all go to the first file, as in a real
    release where one damaged file is enough to exercise the rejects path.
    """
    with ExitStack() as stack:
        yield [
            stack.enter_context(
                open_event_log(
                    dataset, seed, path, header, make_bad_lines if index == 0 else None, fallback_template
                )
            )
            for index, path in enumerate(paths)
        ]


def release_of(
    dataset: str, out_dir: Path, files: Sequence[Path], event_logs: Sequence[EventLogFile]
) -> GeneratedRelease:
    """What a generator wrote: all its files, and the row counts of its event logs by file name."""
    return GeneratedRelease(
        dataset=dataset,
        root=out_dir,
        files=tuple(files),
        event_rows={log.path.name: log.rows for log in event_logs},
        bad_rows={log.path.name: log.bad_rows for log in event_logs},
    )
