"""Leave-last-out against the INTENT cells on the hand-computed toy events (test_split): the
usual protocol trains on events that follow its test events; the INTENT future cells never do."""

from __future__ import annotations

from datetime import datetime

from pyspark.sql import functions as F
from test_split import _fixture_rows

from intent_spark import schema as S
from intent_spark.cells import training_events
from intent_spark.protocols import leave_last_out, targets_preceding_training
from intent_spark.splitting import SplitConf, split_events


def _events(spark):
    return spark.createDataFrame(_fixture_rows(), S.EVENTS_SCHEMA).repartition(3)


def test_leave_last_out_holds_out_each_users_last_event(spark):
    training, targets = leave_last_out(_events(spark))
    last = {(r.user_id, r.item_id, r.ts.month, r.ts.day) for r in targets.collect()}
    assert last == {
        ("u02", "z", 4, 5), ("u03", "a", 5, 3), ("u04", "a", 2, 4), ("u05", "e", 5, 4),
        ("u07", "d", 2, 5), ("u08", "b", 2, 6), ("u09", "c", 2, 7), ("u10", "a", 3, 4),
        ("u11", "c", 1, 19), ("u12", "b", 3, 5), ("u01", "q", 1, 20), ("u06", "y", 5, 10),
    }  # fmt: skip
    assert training.count() + targets.count() == len(_fixture_rows()) == 40


def test_leave_last_out_leaks_and_the_intent_future_cells_do_not(spark):
    training, targets = leave_last_out(_events(spark))
    # The last training event is u02's Mar 3; six users' last events come before it:
    # u04 Feb 4, u07 Feb 5, u08 Feb 6, u09 Feb 7, u11 Jan 19, u01 Jan 20.
    leaked = targets_preceding_training(training, targets)
    assert {r.user_id for r in leaked.collect()} == {"u04", "u07", "u08", "u09", "u11", "u01"}

    test, _ = split_events(_events(spark), "toy", SplitConf(seed=4))
    assert test.choice.cutoff == datetime(2024, 4, 1)
    future = test.targets.where(F.col(S.CELL).contains("future"))
    assert future.count() == 4  # u02 Apr 5, u03 May 3, u05 May 4, u06 May 10
    assert targets_preceding_training(training_events(test.labelled), future).count() == 0
