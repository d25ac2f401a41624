"""The cutoff rule (SPEC 3.2-3.3): month (or day) boundaries, the admissible band, the lower median.

Spark reduces the events to a histogram (one row per month or day); the rule itself is plain
Python on that small table, so it can be tested on hand-written histograms.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.errors import IntentError

MONTH = "month"
DAY = "day"


@dataclass(frozen=True)
class CutoffRule:
    """The fixed rule's numbers (SPEC 3.2)."""

    target_share: float = 0.80
    low: float = 0.75
    high: float = 0.85
    day_span_days: float = 62.0


@dataclass(frozen=True)
class Bucket:
    """Events of one month or day: all of them, and those of known users."""

    start: datetime
    n_events: int
    n_known: int


@dataclass(frozen=True)
class Candidate:
    at: datetime
    events_before: int  # known users' events before ``at``
    share: float
    admissible: bool


@dataclass(frozen=True)
class CutoffChoice:
    cutoff: datetime
    granularity: str
    share: float
    rule: str  # "rule" | "manual"
    candidates: tuple[Candidate, ...]

    @property
    def admissible(self) -> tuple[datetime, ...]:
        return tuple(c.at for c in self.candidates if c.admissible)


class NoAdmissibleCutoff(IntentError):
    """No candidate's train share falls in the band; the message lists every candidate."""


def choose_granularity(first: datetime, last: datetime, rule: CutoffRule) -> str:
    """Day boundaries for short datasets (span of 62 days or fewer), month boundaries otherwise."""
    return DAY if (last - first) <= timedelta(days=rule.day_span_days) else MONTH


def _next_boundary(at: datetime, granularity: str) -> datetime:
    if granularity == DAY:
        return at + timedelta(days=1)
    return datetime(at.year + at.month // 12, at.month % 12 + 1, 1)


def _floor(at: datetime, granularity: str) -> datetime:
    day = datetime(at.year, at.month, at.day)
    return day if granularity == DAY else day.replace(day=1)


def candidates(buckets: list[Bucket], granularity: str, rule: CutoffRule) -> list[Candidate]:
    """Every boundary strictly after the first event and not after the last one, with its share.

    share(c) = known users' events before c / all events (SPEC 3.2). Months or days without
    events still give a boundary.
    """
    if not buckets:
        return []
    ordered = sorted(buckets, key=lambda b: b.start)
    total = sum(b.n_events for b in ordered)
    last_start = ordered[-1].start
    found = []
    boundary = _next_boundary(_floor(ordered[0].start, granularity), granularity)
    while boundary <= last_start:
        before = sum(b.n_known for b in ordered if b.start < boundary)
        share = before / total
        found.append(Candidate(boundary, before, share, rule.low <= share <= rule.high))
        boundary = _next_boundary(boundary, granularity)
    return found


def choose_cutoff(
    buckets: list[Bucket],
    granularity: str,
    rule: CutoffRule,
    *,
    dataset: str,
    split: str,
    manual: datetime | None = None,
    manual_share: float | None = None,
) -> CutoffChoice:
    """The lower median of the admissible candidates, or the manual cutoff when the conf fixes one."""
    found = candidates(buckets, granularity, rule)
    if manual is not None:
        share = manual_share if manual_share is not None else float("nan")
        return CutoffChoice(manual, granularity, share, "manual", tuple(found))
    admissible = [c for c in found if c.admissible]
    if not admissible:
        listed = "; ".join(f"{c.at:%Y-%m-%d} {c.share:.3f}" for c in found) or "none"
        raise NoAdmissibleCutoff(
            f"{dataset} {split}: no {granularity} boundary has a train share in "
            f"[{rule.low}, {rule.high}]; candidates: {listed}. Fix the cutoff by hand in the conf."
        )
    chosen = admissible[(len(admissible) - 1) // 2]
    return CutoffChoice(chosen.at, granularity, chosen.share, "rule", tuple(found))


def event_buckets(labelled: DataFrame, granularity: str) -> DataFrame:
    """One row per month or day with events: ``start, n_events, n_known`` (needs ``is_new``)."""
    return labelled.groupBy(F.date_trunc(granularity, F.col(S.TS)).alias("start")).agg(
        F.count(F.lit(1)).alias("n_events"),
        F.count(F.when(~F.col(S.IS_NEW), True)).alias("n_known"),
    )


def collect_buckets(labelled: DataFrame, granularity: str) -> list[Bucket]:
    """The histogram on the driver: at most a few hundred months or a few hundred days."""
    rows = event_buckets(labelled, granularity).collect()  # one row per month/day, not per event
    return [Bucket(r.start, int(r.n_events), int(r.n_known)) for r in rows]


@dataclass(frozen=True)
class DayCounts:
    """One day of a split's population: its events, those of known users, and the first and
    last event time. A population's span, histogram and train shares all follow from these
    rows, so one aggregation over the events serves the whole cutoff rule."""

    start: datetime
    n_events: int
    n_known: int
    first: datetime
    last: datetime


def collect_days(labelled: DataFrame) -> list[DayCounts]:
    """The per-day histogram on the driver (needs ``is_new``): a row per day with events, a few
    thousand at most, never events."""
    rows = (
        labelled.groupBy(F.date_trunc(DAY, F.col(S.TS)).alias("start"))
        .agg(
            F.count(F.lit(1)).alias("n_events"),
            F.count(F.when(~F.col(S.IS_NEW), True)).alias("n_known"),
            F.min(S.TS).alias("first"),
            F.max(S.TS).alias("last"),
        )
        .collect()
    )
    return sorted(
        (DayCounts(r.start, int(r.n_events), int(r.n_known), r.first, r.last) for r in rows),
        key=lambda d: d.start,
    )


def span_of(days: list[DayCounts]) -> tuple[datetime, datetime]:
    """The population's first and last event time."""
    if not days:
        raise IntentError("no events to split")
    return min(d.first for d in days), max(d.last for d in days)


def buckets_of(days: list[DayCounts], granularity: str) -> list[Bucket]:
    """Month (or day) buckets summed from the day rows."""
    summed: dict[datetime, tuple[int, int]] = {}
    for d in days:
        start = _floor(d.start, granularity)
        events, known = summed.get(start, (0, 0))
        summed[start] = (events + d.n_events, known + d.n_known)
    return [Bucket(start, events, known) for start, (events, known) in sorted(summed.items())]


def share_before(days: list[DayCounts], at: datetime) -> float | None:
    """Known users' events before ``at`` over all events, from the day rows; None when ``at``
    is not a day boundary (the day rows cannot split a day)."""
    if at != _floor(at, DAY):
        return None
    total = sum(d.n_events for d in days)
    return sum(d.n_known for d in days if d.start < at) / total if total else None


def time_span(events: DataFrame) -> tuple[datetime, datetime]:
    row = events.agg(F.min(S.TS).alias("first"), F.max(S.TS).alias("last")).first()
    if row is None or row.first is None:
        raise IntentError("no events to split")
    return row.first, row.last
