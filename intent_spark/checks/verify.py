"""`intent verify`: leakage checks and checksums (SPEC 6), recomputed from the stored tables.

Every check is a count of violating rows computed in Spark; a check passes when that count is
zero. Nothing here trusts the split code: holdout flags are recomputed from the hash as SPEC 3.2
defines it, training events, seen items and cells from the cutoffs with this module's own
expressions, and checksums from the rows, so a bug in ``split`` shows up as a failed check.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.datasets import DatasetRef, parse_dataset
from intent_spark.evaluate.leaks import leaked_targets
from intent_spark.lake.checksum import table_checksums
from intent_spark.lake.context import Lake
from intent_spark.lake.tables import ingested_source, source_table

MAX_TARGETS_PER_PERIOD = 100
HASH_BUCKETS = 1 << 30
# The split tables the manifest must hold, whatever the split code wrote into it.
MANIFEST_TABLES = (S.HOLDOUT, S.SPLITS, S.SPLIT_CANDIDATES, S.TARGETS, S.SPLIT_COUNTS)
BEFORE = "_before"  # an event before the split's cutoff
NEW = "_new"  # its user is held out


def held_out(user_id: Column, fraction: float, seed: int, source: str, split: str) -> Column:
    """SPEC 3.2's holdout: ``pmod(xxhash64(salt, user_id), 2^30) / 2^30 < fraction`` with the
    salt ``intent-holdout:<seed>:<source>:<split>``."""
    salt = F.lit(f"intent-holdout:{seed}:{source}:{split}")
    return F.pmod(F.xxhash64(salt, user_id), F.lit(HASH_BUCKETS)).cast("double") / HASH_BUCKETS < F.lit(
        fraction
    )


def expected_cell(new: Column, before: Column, seen: Column) -> Column:
    """SPEC 3.4's cell of a target: ``known_past``, or who x when x which item."""
    who = F.when(new, "new").otherwise("known")
    when = F.when(before, "past").otherwise("future")
    item = F.when(seen, "seen").otherwise("new")
    return F.when(~new & before, F.lit("known_past")).otherwise(
        F.concat(who, F.lit("_"), when, F.lit("_"), item)
    )


@dataclass(frozen=True)
class CheckResult:
    dataset: str
    split: str
    name: str
    violations: int
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.violations == 0


def check_split(
    dataset: DatasetRef,
    split: dict,
    population: DataFrame,
    holdout: DataFrame,
    targets: DataFrame,
    counts: DataFrame,
    model_inputs: tuple[DataFrame, DataFrame] | None = None,
    key: str | None = None,
) -> list[CheckResult]:
    """All checks of one split (``split`` is its row of the splits table, as a dict).

    ``population`` is the split's events: all events for the test split, the test split's
    training events for the validation split. ``model_inputs`` is the split's (catalogue,
    train_sequences) when the train stage has built them.

    Each check is a count of violating rows. The counts of one frame are one aggregate row
    (the events, the targets joined to their events and items, ...), and the rows are joined
    into one, so the checks of a split are one Spark job over a handful of shuffles.
    """
    name = split[S.SPLIT]
    source = key or dataset.source
    expected = held_out(F.col(S.USER_ID), split["holdout_fraction"], split["seed"], source, name)
    truth = holdout.select(S.USER_ID, F.col(S.IS_NEW).alias("_stored"), expected.alias(NEW))
    checks = _SplitChecks(name, F.lit(split[S.CUTOFF]), truth, population, targets)
    try:
        checks.holdout_and_training()
        checks.targets()
        checks.stored_counts(counts)
        if model_inputs is not None:
            checks.model_inputs(*model_inputs)
        return count_violations(dataset, name, checks.frames)
    finally:
        checks.labelled.unpersist()
        checks.split_targets.unpersist()


class _SplitChecks:
    """The checks of one split, grouped by the frame each counts over (``frames``)."""

    def __init__(
        self, name: str, cutoff: Column, truth: DataFrame, population: DataFrame, targets: DataFrame
    ) -> None:
        self.name, self.cutoff, self.truth = name, cutoff, truth
        self.frames: list[tuple[DataFrame, list[tuple[str, Column, str]]]] = []
        self._checks: list[tuple[str, Column, str]] = []  # (check, its count over its frame, detail)
        # Most checks read the labelled events or the split's targets: computed once and kept on
        # local disk, not the heap, they are not re-planned per check.
        self.labelled = (
            population.join(truth, S.USER_ID)
            .withColumn(BEFORE, F.col(S.TS) < cutoff)
            .persist(StorageLevel.DISK_ONLY)
        )
        self.training = self.labelled.where(~F.col(NEW) & F.col(BEFORE))
        self.split_targets = targets.where(F.col(S.SPLIT) == name).persist(StorageLevel.DISK_ONLY)

    def count(self, check: str, violating: Column, detail: str) -> None:
        self._checks.append((check, F.count(F.when(violating, True)), detail))

    def frame(self, rows: DataFrame) -> None:
        self.frames.append((rows, list(self._checks)))
        self._checks.clear()

    def holdout_and_training(self) -> None:
        count, cutoff = self.count, self.cutoff
        count("holdout_matches_hash", F.col("_stored") != F.col(NEW), "is_new differs from the seeded hash")
        self.frame(self.truth)
        in_training = ~F.col(NEW) & F.col(BEFORE)
        count(
            "no_new_user_in_training",
            in_training & F.col("_stored"),
            "a held-out user's event is in the training events",
        )
        count(
            "training_before_cutoff",
            in_training & (F.col(S.TS) >= cutoff),
            "a training event at or after the cutoff",
        )
        self.frame(self.labelled)

    def targets(self) -> None:
        count, cutoff, labelled, split_targets = self.count, self.cutoff, self.labelled, self.split_targets
        seen = self.training.select(S.ITEM_ID).distinct().withColumn("_seen", F.lit(True))
        events = labelled.select(S.USER_ID, S.SEQ, F.col(S.ITEM_ID).alias("_item"), F.col(S.TS).alias("_ts"))
        # Per user of the split: held out or not (by the hash), and their first event.
        users = self.truth.select(S.USER_ID, NEW).join(
            labelled.groupBy(S.USER_ID).agg(F.min(F.struct(S.TS, S.SEQ)).alias("_first")), S.USER_ID, "left"
        )
        checked = (
            split_targets.join(users, S.USER_ID, "left")
            .join(events, [S.USER_ID, S.SEQ], "left")
            .join(seen, S.ITEM_ID, "left")
        )
        cell = expected_cell(F.col(NEW), F.col(S.TS) < cutoff, F.coalesce(F.col("_seen"), F.lit(False)))
        count(
            "target_cell_consistent",
            F.col(NEW).isNull() | (F.col(S.CELL) != cell),
            "a target's cell disagrees with its user, period or item",
        )
        count(
            "targets_are_events",
            F.col("_item").isNull() | (F.col("_item") != F.col(S.ITEM_ID)) | (F.col("_ts") != F.col(S.TS)),
            "a target is not an event of its user",
        )
        count(
            "target_has_earlier_event",
            F.col("_first").isNull() | (F.struct(S.TS, S.SEQ) <= F.col("_first")),
            "a target is its user's first event (no context)",
        )
        self.frame(checked)

        period = F.when(F.col(S.TS) < cutoff, F.lit(S.PAST)).otherwise(F.lit(S.FUTURE))
        per_period = split_targets.groupBy(S.USER_ID, period.alias(S.PERIOD)).count()
        count(
            "at_most_100_targets_per_period",
            F.col("count") > MAX_TARGETS_PER_PERIOD,
            "more than 100 targets for a user and period",
        )
        self.frame(per_period)
        duplicates = split_targets.groupBy(S.USER_ID, S.SEQ).count()
        count("targets_unique", F.col("count") > 1, "the same event is a target twice")
        self.frame(duplicates)

    def stored_counts(self, counts: DataFrame) -> None:
        recount = self.split_targets.groupBy(S.CELL).agg(
            F.count_distinct(S.USER_ID).alias("_users"), F.count(F.lit(1)).alias("_targets")
        )
        stored = counts.where(F.col(S.SPLIT) == self.name).select(S.CELL, "n_users", "n_targets")
        self.count(
            "counts_reconcile",
            ~F.col("n_users").eqNullSafe(F.col("_users")) | ~F.col("n_targets").eqNullSafe(F.col("_targets")),
            "split_counts differ from the targets table",
        )
        self.frame(stored.join(recount, S.CELL, "full_outer"))

    def model_inputs(self, catalogue: DataFrame, sequences: DataFrame) -> None:
        count, cutoff = self.count, self.cutoff
        with_new = sequences.join(self.truth.select(S.USER_ID, NEW), S.USER_ID, "left")
        count(
            "model_inputs_before_cutoff",
            F.col(S.LAST_TS) >= cutoff,
            "a training sequence holds an event at or after the cutoff",
        )
        count(
            "model_inputs_known_users",
            F.coalesce(F.col(NEW), F.lit(False)),
            "a held-out user's events are in the training sequences",
        )
        self.frame(with_new)
        # What leave-last-out gets wrong: the model trained on a period it is then scored on.
        last_trained = sequences.agg(F.max(S.LAST_TS).alias("_last_trained"))
        count(
            "model_inputs_end_before_future_targets",
            F.col(S.TS) < F.col("_last_trained"),
            "a future target precedes an event the model trained on",
        )
        self.frame(self.split_targets.where(F.col(S.TS) >= cutoff).crossJoin(last_trained))
        trained = self.training.groupBy(S.ITEM_ID).agg(F.count(F.lit(1)).alias("_count"))
        counted = F.coalesce(F.col("_count"), F.lit(0))
        count(
            "catalogue_counts_training_only",
            ~counted.eqNullSafe(F.col(S.TRAIN_COUNT)) | (F.col(S.SEEN) != (counted > 0)),
            "a catalogue item's training count or seen flag differs from the training events",
        )
        self.frame(catalogue.join(trained, S.ITEM_ID, "full_outer"))


def count_violations(
    dataset: str, split: str, frames: list[tuple[DataFrame, list[tuple[str, Column, str]]]]
) -> list[CheckResult]:
    """Every check's count in one Spark job: an aggregate per frame, as (check, count) rows,
    all in one union."""
    parts = []
    for rows, checks in frames:
        aggregate = rows.agg(*[counted.alias(check) for check, counted, _ in checks])
        pairs = [F.struct(F.lit(check).alias("check"), F.col(check).alias("n")) for check, _, _ in checks]
        parts.append(aggregate.select(F.explode(F.array(*pairs)).alias("_c")).select("_c.check", "_c.n"))
    found = {r["check"]: r["n"] for r in reduce(DataFrame.unionByName, parts).collect()}  # one row per check
    return [
        CheckResult(dataset, split, check, int(found[check]), detail)
        for _, checks in frames
        for check, _, detail in checks
    ]


def verify_protocol(lake: Lake, dataset: DatasetRef) -> list[CheckResult]:
    """A protocol variant's leak (targets that some training event follows), then its
    checksums. Leave-last-out fails it by construction: that is what the check is for."""
    rows = leaked_targets(lake, dataset).collect()  # one row per cell
    leaked, total = sum(r.n_leaked for r in rows), sum(r.n_targets for r in rows)
    detail = f"{leaked:,} of {total:,} targets come before a training event: the model trains on their future"
    results = [CheckResult(dataset, S.TEST, "no_target_precedes_training", leaked, detail)]
    return results + _checksum_results(lake, dataset)


def _checksum_results(lake: Lake, dataset: str) -> list[CheckResult]:
    # One row per checksummed table.
    stored = {r.table: (r.rows, r.checksum) for r in lake.read(S.CHECKSUMS, dataset).collect()}
    results = []
    names = sorted({*MANIFEST_TABLES, *stored})
    recomputed = table_checksums({t: lake.read(t, dataset).drop(S.DATASET) for t in names})
    for table in names:
        value = (recomputed[table].rows, recomputed[table].checksum)
        differs = stored.get(table) != value
        detail = f"manifest {stored.get(table)} but recomputed {value}" if differs else ""
        results.append(CheckResult(dataset, "-", f"checksum_{table}", int(differs), detail))
    return results


def verify_dataset(lake: Lake, dataset: DatasetRef) -> list[CheckResult]:
    """Every check of every split of a dataset, then the checksum manifest."""
    if dataset.protocol:
        return verify_protocol(lake, dataset)
    events = source_table(lake.spark, lake.root, S.EVENTS, dataset).select(S.USER_ID, S.ITEM_ID, S.TS, S.SEQ)
    # The splits table has two rows per dataset (test, val).
    splits = {r[S.SPLIT]: r.asDict() for r in lake.read(S.SPLITS, dataset).collect()}
    holdout = lake.read(S.HOLDOUT, dataset)
    targets = lake.read(S.TARGETS, dataset)
    counts = lake.read(S.SPLIT_COUNTS, dataset)
    key = ingested_source(lake.spark, lake.root, dataset)  # whose users the holdout hash is of
    missing = [name for name in (S.TEST, S.VAL) if name not in splits]
    if missing:
        return [
            CheckResult(dataset, name, "split_present", 1, "no row in the splits table") for name in missing
        ]
    test_holdout = holdout.where(F.col(S.SPLIT) == S.TEST).drop(S.SPLIT, S.DATASET)
    val_holdout = holdout.where(F.col(S.SPLIT) == S.VAL).drop(S.SPLIT, S.DATASET)
    results = check_split(
        dataset,
        splits[S.TEST],
        events,
        test_holdout,
        targets,
        counts,
        _model_inputs(lake, dataset, S.TEST),
        key,
    )
    # The validation population is the test split's training data: known users, before the cutoff.
    test_new = test_holdout.where(F.col(S.IS_NEW)).select(S.USER_ID)
    results.append(
        CheckResult(
            dataset,
            S.VAL,
            "val_users_known_in_test",
            val_holdout.join(test_new, S.USER_ID).count(),
            "a held-out test user is in the validation population",
        )
    )
    val_population = events.where(F.col(S.TS) < F.lit(splits[S.TEST][S.CUTOFF])).join(
        test_holdout.where(~F.col(S.IS_NEW)).select(S.USER_ID), S.USER_ID
    )
    results += check_split(
        dataset,
        splits[S.VAL],
        val_population,
        val_holdout,
        targets,
        counts,
        _model_inputs(lake, dataset, S.VAL),
        key,
    )
    return results + _checksum_results(lake, dataset)


def _model_inputs(lake: Lake, dataset: str, split: str) -> tuple[DataFrame, DataFrame] | None:
    """The split's catalogue and training sequences, when the train stage has written them."""
    if not all(lake.has(t) for t in (S.CATALOGUE, S.TRAIN_SEQUENCES)):
        return None
    frames = tuple(
        lake.read(t, dataset).where(F.col(S.SPLIT) == split) for t in (S.CATALOGUE, S.TRAIN_SEQUENCES)
    )
    if frames[0].isEmpty():
        return None
    return frames


def lake_datasets(lake: Lake) -> list[DatasetRef]:
    """Datasets that have a splits table partition (a per-dataset list, not events); protocol
    variants only when named, since leave-last-out fails the leak check by design."""
    rows = lake.read(S.SPLITS).select(S.DATASET).distinct().collect()  # one per dataset
    refs = sorted(parse_dataset(r[S.DATASET]) for r in rows)
    return [ref for ref in refs if not ref.protocol]


def verify_lake(lake: Lake, dataset: DatasetRef | None = None) -> list[str]:
    """``intent verify``: every table of the lake whole (its files match its Delta log), then the
    checks of one dataset or of every split one, a line each through the lake's progress; the
    names of what failed (empty: all passed)."""
    from intent_spark.lake.integrity import DamagedTable, lake_faults

    report, failed = lake.progress, []
    for table, faults in lake_faults(lake.spark, lake.root).items():
        for fault in faults:  # the same line a command reading the table stops with
            report(f"FAIL {lake.path(table)}: damaged: {fault}")
        if faults:
            failed.append(f"{table} (damaged)")
        else:
            report(f"ok   {table} whole (its files match its Delta log)")
    try:
        datasets = [dataset] if dataset else lake_datasets(lake)
    except DamagedTable:
        datasets = []  # the splits table itself: named above
    for name in datasets:
        try:
            results = verify_dataset(lake, name)
        except DamagedTable as exc:
            report(f"FAIL {name}: checks not run: {exc}")
            failed.append(f"{name} (unchecked)")
            continue
        for result in results:
            line = f"{'ok  ' if result.ok else 'FAIL'} {name} {result.split} {result.name}"
            if not result.ok:
                line += f": {result.violations} violation(s), {result.detail}"
                failed.append(f"{name}/{result.split}/{result.name}")
            report(line)
    if not failed:
        report(f"all checks passed for {', '.join(datasets)}")
    return failed
