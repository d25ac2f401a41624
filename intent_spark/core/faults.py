"""Named fault points, so tests can kill a driver in the middle of a stage without sleeps.

``INTENT_FAULT=split.targets`` makes the process kill itself (SIGKILL, as ``kill -9`` would) when
it reaches the point of that name; ``INTENT_FAULT=split.targets:wait:/tmp/go`` instead creates
``/tmp/go.reached`` and waits there until ``/tmp/go`` exists (a test then stops a server or
starts a second writer at that exact moment). Unset, a fault point costs one dictionary lookup.

The points sit where a stage has written some of its outputs and not the rest:

| point | reached |
|---|---|
| ``ingest.events`` | after ``events`` is committed, before ``rejects``, ``items``, ``users`` |
| ``split.holdout`` | after ``holdout`` and ``splits``, before ``targets`` |
| ``inputs.catalogue`` | after ``catalogue``, before ``train_sequences`` and ``score_events`` |
| ``train.fitted`` | a model fitted and saved to its staging folder, before MLflow has it |
| ``score.staged`` | every rank part staged, before ``ranks`` is committed |
| ``evaluate.user_metrics`` | after ``user_metrics``, before ``metrics`` and ``comparisons`` |
| ``report.figures`` | some figures drawn, before the page is written |
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

FAULT_ENV = "INTENT_FAULT"
POINTS = (
    "ingest.events",
    "split.holdout",
    "inputs.catalogue",
    "train.fitted",
    "score.staged",
    "evaluate.user_metrics",
    "report.figures",
)


def fault_point(name: str) -> None:
    """Kill this process, or wait for a go-ahead file, when ``INTENT_FAULT`` names this point."""
    wanted = os.environ.get(FAULT_ENV)
    if not wanted:
        return
    point, _, action = wanted.partition(":")
    if point != name:
        return
    if action.startswith("wait:"):
        go = Path(action.removeprefix("wait:"))
        go.with_name(go.name + ".reached").touch()
        while not go.exists():
            time.sleep(0.1)
        return
    os.kill(os.getpid(), signal.SIGKILL)
