"""Other evaluation protocols on the same events, beside the INTENT cells (issue 8).

The usual per-user leave-last-out split holds out each user's last event and trains on all the
rest, so a training event of one user can follow another user's test event in time: the model
has seen the future it is scored on. ``targets_preceding_training`` measures exactly that for
any pair of training events and targets; `verify` applies it to the INTENT future cells, where
it must be zero.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from intent_spark import schema as S

FROM_END = "_from_end"
USER_EVENTS = "_user_events"


def leave_last_out(events: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(training, targets): each user's last event in ``(ts, seq)`` order is their target when
    they have an earlier one; every other event is training."""
    by_user = Window.partitionBy(S.USER_ID)
    from_end = F.row_number().over(by_user.orderBy(F.col(S.TS).desc(), F.col(S.SEQ).desc()))
    ranked = events.withColumn(FROM_END, from_end).withColumn(USER_EVENTS, F.count(F.lit(1)).over(by_user))
    is_target = (F.col(FROM_END) == 1) & (F.col(USER_EVENTS) >= 2)
    return ranked.where(~is_target).drop(FROM_END, USER_EVENTS), ranked.where(is_target).drop(
        FROM_END, USER_EVENTS
    )


def targets_preceding_training(training: DataFrame, targets: DataFrame) -> DataFrame:
    """The targets that some training event follows in time (any user's): scored on a period
    the model was trained on. One aggregate row is joined, nothing is collected."""
    last_training = training.agg(F.max(S.TS).alias("_last_training"))
    return (
        targets.crossJoin(last_training).where(F.col(S.TS) < F.col("_last_training")).drop("_last_training")
    )
