"""Which stages of ``intent run`` can be skipped: each finished stage records a fingerprint of its
inputs (the raw files, the confs, the fingerprint of the stage before it) in
``LAKE/_stages/<dataset>.json`` (a small file, not a table: a Delta commit per stage would cost
more than some stages). A rerun skips a stage whose fingerprint is unchanged, so after a failure or a killed
driver it resumes at the first stage that did not finish; Delta transactions leave the tables of
an interrupted stage as they were before it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from intent_spark.core.progress import Progress, silent
from intent_spark.core.stage_spec import fingerprint
from intent_spark.lake.files import raw_listing

__all__ = ["StageFailed", "StageLog", "fingerprint", "raw_listing"]


class StageFailed(Exception):
    """A stage of ``intent run`` raised; carries which stage, for which dataset, and why."""

    def __init__(self, stage: str, dataset: str, cause: BaseException):
        from intent_spark.lake.files import store_error

        first = (str(cause).strip().splitlines() or [""])[0][:300]
        why = store_error(cause) or f"{type(cause).__name__}: {first}"  # a store's fault: its URI
        super().__init__(f"{stage} of {dataset} failed: {why}")
        self.stage, self.dataset = stage, dataset


@dataclass
class StageLog:
    """The finished stages of one dataset in a lake; ``force`` reruns every stage."""

    lake: str
    dataset: str
    force: bool = False
    progress: Progress = silent

    def __post_init__(self) -> None:
        from intent_spark.lake.files import filesystem

        lake = self.lake if "://" in self.lake else str(Path(self.lake).resolve())
        self._fs, self._path = filesystem(f"{lake.rstrip('/')}/_stages/{self.dataset}.json")
        try:
            with self._fs.open_input_stream(self._path) as stream:
                self.done: dict[str, dict[str, Any]] = json.loads(stream.read().decode())
        except FileNotFoundError:
            self.done = {}

    def run(self, stage: str, inputs: str, work: Callable[[], Any]) -> bool:
        """Run ``work`` unless the stage finished before on the same inputs; record it when it
        finishes. Returns whether it ran."""
        record = self.done.get(stage, {})
        if not self.force and "finished" in record and record.get("inputs") == inputs:
            self.progress(f"{self.dataset}: {stage} skipped (inputs unchanged since it finished)")
            return False
        if "finished" not in record and "started" in record:
            self.progress(
                f"{self.dataset}: {stage} resumed: a run that started it at {record['started']} did not "
                "finish it; its partial writes are replaced"
            )
        # recorded as started and not finished first: a stage killed half-way must not look finished
        self.done[stage] = {"inputs": inputs, "started": _now()}
        self._save()
        started = time.monotonic()
        try:
            work()
        except Exception as exc:
            raise StageFailed(stage, self.dataset, exc) from exc
        self.done[stage] = {
            "inputs": inputs,
            "started": self.done[stage]["started"],
            "finished": _now(),
            "seconds": round(time.monotonic() - started, 2),
        }
        self._save()
        return True

    def finished(self, stage: str) -> dict[str, Any] | None:
        """The record of a stage that finished; None for one never run or interrupted."""
        record = self.done.get(stage)
        return record if record is not None and "finished" in record else None

    def _save(self) -> None:
        """Written aside and renamed over the log (locally), so a kill never leaves half a file."""
        folder = self._path.rsplit("/", 1)[0]
        self._fs.create_dir(folder, recursive=True)
        aside = f"{folder}/.{self.dataset}.json.partial"
        with self._fs.open_output_stream(aside) as sink:
            sink.write(json.dumps(self.done, indent=1, sort_keys=True).encode())
        self._fs.move(aside, self._path)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
