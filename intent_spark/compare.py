"""Beyond the paper (issue 8): the ``compare:`` part of a run conf and the stages it adds.

- protocols: the same data and models under leave-last-out and HORIZON's four settings, as
  variant datasets (``amazon_hk.leave_last_out``) scored beside the INTENT cells;
- seeds: the INTENT split again with other holdout seeds (``amazon_hk.seed1``), so every cell
  score has a spread;
- cutoff sensitivity: the cutoff each dataset would get with another band or day/month switch;
- transfer: SASRec-F trained on one source ranks another's catalogue;
- all-signals: a per-signal KuaiRand dataset beside the one-event-per-impression default.

Small outcomes that are not Delta tables (sensitivity, leak counts) are CSV files under
``LAKE/reports/compare``, next to the split reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession

from intent_spark import schema as S
from intent_spark.config import ConfError
from intent_spark.io import VARIANT_SEPARATOR, ingested_source, read_table
from intent_spark.protocols import PROTOCOLS, leaked_targets
from intent_spark.splitting import SplitConf
from intent_spark.transfer import TRANSFER_MODELS

SEED_PREFIX = "seed"


@dataclass(frozen=True)
class CompareConf:
    """What to run beside the INTENT cells; empty means nothing."""

    datasets: tuple[str, ...] = ()  # where protocols, seeds and sensitivity run
    protocols: tuple[str, ...] = ()
    seeds: tuple[int, ...] = ()
    transfer: tuple[tuple[str, str], ...] = ()  # (source, target)
    all_signals: dict[str, str] = field(default_factory=dict)  # one-per-impression -> all-signals
    replicates: int = 200  # bootstrap replicates of the protocol agreement intervals

    def protocol_variants(self, dataset: str) -> list[str]:
        return [f"{dataset}{VARIANT_SEPARATOR}{p}" for p in self.protocols]

    def seed_variants(self, dataset: str) -> list[str]:
        return [f"{dataset}{VARIANT_SEPARATOR}{SEED_PREFIX}{s}" for s in self.seeds]

    def any(self) -> bool:
        return bool(self.protocols or self.seeds or self.transfer or self.all_signals or self.datasets)

    def variants(self) -> list[str]:
        return [v for d in self.datasets for v in self.protocol_variants(d) + self.seed_variants(d)]


def load_compare_conf(raw: dict[str, Any] | None, datasets: list[str], models: list[str]) -> CompareConf:
    """The run conf's ``compare:`` mapping, checked against its datasets and models."""
    raw = dict(raw or {})
    known = {"datasets", "protocols", "seeds", "transfer", "all_signals", "replicates"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfError(f"compare: unknown key(s) {unknown}; known: {', '.join(sorted(known))}")
    conf = CompareConf(
        datasets=tuple(raw.get("datasets") or ()),
        protocols=tuple(raw.get("protocols") or ()),
        seeds=tuple(int(s) for s in raw.get("seeds") or ()),
        transfer=tuple((str(a), str(b)) for a, b in raw.get("transfer") or ()),
        all_signals={str(a): str(b) for a, b in (raw.get("all_signals") or {}).items()},
        replicates=int(raw.get("replicates", 200)),
    )
    pairs = [*conf.transfer, *conf.all_signals.items()]
    missing = sorted({*conf.datasets, *(d for pair in pairs for d in pair)} - set(datasets))
    if missing:
        raise ConfError(f"compare: {', '.join(missing)} not among the run's datasets ({', '.join(datasets)})")
    bad = sorted(set(conf.protocols) - set(PROTOCOLS))
    if bad:
        raise ConfError(f"compare.protocols: unknown {bad}; known: {', '.join(PROTOCOLS)}")
    if conf.transfer and not set(TRANSFER_MODELS) & set(models):
        raise ConfError(f"compare.transfer needs {' or '.join(TRANSFER_MODELS)} among the run's models")
    return conf


def lake_compare_conf(
    spark: SparkSession, lake: str, metrics: pd.DataFrame, datasets: list[str]
) -> CompareConf:
    """The comparisons whose results are in the lake for these datasets (``intent report`` has
    no run conf): their evaluated variants and the transfers into them."""
    from intent_spark.io import has_table, source_dataset, variant_name

    evaluated = set(metrics[S.DATASET])
    variants = sorted(d for d in evaluated if variant_name(d) and source_dataset(d) in datasets)
    protocols = tuple(p for p in PROTOCOLS if any(variant_name(v) == p for v in variants))
    seeds = sorted({seed_of(v) for v in variants if variant_name(v).startswith(SEED_PREFIX)})
    transfer: tuple[tuple[str, str], ...] = ()
    if has_table(spark, lake, S.TRANSFERS):
        pairs = read_table(spark, lake, S.TRANSFERS).select(S.SOURCE, S.DATASET).distinct().collect()  # pairs
        transfer = tuple(sorted((r[S.SOURCE], r[S.DATASET]) for r in pairs if r[S.DATASET] in datasets))
    with_variants = sorted({source_dataset(v) for v in variants})
    sensitivity = read_compare_csv(lake, "sensitivity")
    with_sensitivity = sorted(set(sensitivity[S.DATASET]) & set(datasets)) if not sensitivity.empty else []
    return CompareConf(
        datasets=tuple(sorted({*with_variants, *with_sensitivity})),
        protocols=protocols,
        seeds=tuple(seeds),
        transfer=transfer,
    )


def seed_of(variant: str) -> int:
    return int(variant.rsplit(VARIANT_SEPARATOR, 1)[1].removeprefix(SEED_PREFIX))


def compare_folder(lake: str) -> Path:
    return Path(lake) / "reports" / "compare"


def write_sensitivity(spark: SparkSession, lake: str, dataset: str, conf: SplitConf) -> Path:
    """The cutoff under other bands and day/month switches (one row per variant of the rule)."""
    from intent_spark.sensitivity import cutoff_sensitivity

    events = read_table(spark, lake, S.EVENTS, dataset).select(S.USER_ID, S.ITEM_ID, S.TS, S.SEQ)
    table = cutoff_sensitivity(
        events,
        dataset=dataset,
        key=ingested_source(spark, lake, dataset),
        fraction=conf.holdout_fraction,
        seed=conf.seed,
        rule=conf.rule,
    )
    path = compare_folder(lake) / f"{dataset}.sensitivity.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(path, index=False)
    return path


def write_leaks(spark: SparkSession, lake: str, dataset: str) -> Path:
    """Per test cell, the targets that some training event follows in time."""
    table = leaked_targets(spark, lake, dataset).toPandas()  # one row per cell
    table.insert(0, S.DATASET, dataset)
    path = compare_folder(lake) / f"{dataset}.leaks.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(path, index=False)
    return path


def read_compare_csv(lake: str, kind: str) -> pd.DataFrame:
    """Every dataset's ``<dataset>.<kind>.csv`` in one frame (empty when none was written)."""
    paths = sorted(compare_folder(lake).glob(f"*.{kind}.csv"))
    return pd.concat([pd.read_csv(p) for p in paths], ignore_index=True) if paths else pd.DataFrame()
