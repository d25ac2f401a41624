"""The run conf of ``intent run`` (``conf/demo.yaml``, ``conf/full.yaml``) as frozen dataclasses.

A run conf names the datasets (generated or read from raw files), the models, the audit floor
and, in its ``compare:`` part, what runs beside the INTENT cells:

- protocols: the same data and models under leave-last-out and HORIZON's four settings, as
  variant datasets (``amazon_hk.leave_last_out``) scored beside the INTENT cells;
- seeds: the INTENT split again with other holdout seeds (``amazon_hk.seed1``), so every cell
  score has a spread;
- cutoff sensitivity: the cutoff each dataset would get with another band or day/month switch;
- transfer: SASRec-F trained on one source ranks another's catalogue;
- all-signals: a per-signal KuaiRand dataset beside the one-event-per-impression default.

Every key is checked: a typo (``model:`` for ``models:``) is a one-line error naming the file,
the key and the closest known key, before any stage runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from intent_spark.core.conf import child, from_mapping, load_yaml
from intent_spark.core.datasets import PROTOCOLS, TRANSFER_MODELS, protocol_variant, seed_variant
from intent_spark.core.errors import ConfError

DEFAULT_EVENTS = 20_000
SEQUENCE_FLOOR = 25_000  # the paper's floor: users with 3+ events


@dataclass(frozen=True)
class DatasetEntry:
    """One dataset of a run: generated (``events``) unless ``raw`` names its release files."""

    name: str
    source: str = ""  # the source conf (default: the name); ``cct`` for ``cct_mcc``
    events: int = DEFAULT_EVENTS
    raw: str | None = None
    conf: str | None = None  # a source conf file instead of the built-in one
    item_level: str | None = None
    per_signal: bool | None = None  # KuaiRand: one event per set signal

    @property
    def source_name(self) -> str:
        return self.source or self.name


@dataclass(frozen=True)
class AuditConf:
    floor_users: int = SEQUENCE_FLOOR


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
        return [protocol_variant(dataset, p) for p in self.protocols]

    def seed_variants(self, dataset: str) -> list[str]:
        return [seed_variant(dataset, s) for s in self.seeds]

    def any(self) -> bool:
        return bool(self.protocols or self.seeds or self.transfer or self.all_signals or self.datasets)

    def variants(self) -> list[str]:
        return [v for d in self.datasets for v in self.protocol_variants(d) + self.seed_variants(d)]


@dataclass(frozen=True)
class RunConf:
    """A whole run: where it writes, what it ingests and splits, which models it scores."""

    datasets: tuple[DatasetEntry, ...] = ()
    models: tuple[str, ...] = ()
    workdir: str = "demo"
    lake: str | None = None
    report: str | None = None
    seed: int = 0
    audit: AuditConf | None = None
    models_conf: str | None = None
    model_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    processes: int | None = (
        None  # training and scoring processes (TorchDistributor); the models conf's otherwise
    )
    split_conf: str | None = None
    tracking_uri: str | None = None
    compare: CompareConf = field(default_factory=CompareConf)
    path: str = field(default="", metadata={"internal": True})  # the file it was read from

    @property
    def names(self) -> list[str]:
        return [entry.name for entry in self.datasets]

    @property
    def lake_path(self) -> str:
        return self.lake or str(Path(self.workdir) / "lake")

    @property
    def report_path(self) -> Path:
        return Path(self.report) if self.report else Path(self.workdir) / "report"

    def source_of(self, name: str) -> str | None:
        return next((e.source_name for e in self.datasets if e.name == name), None)


def load_run_conf(path: str | Path) -> RunConf:
    """A run conf file, every key checked, its ``compare:`` part checked against its datasets."""
    where = str(path)
    raw = load_yaml(Path(path))
    if raw.get("audit", "") is None:  # `audit:` alone: the paper's floor
        raw["audit"] = {}
    for i, entry in enumerate(raw.get("datasets") or []):
        if not isinstance(entry, dict) or "name" not in entry:
            raise ConfError(
                f"{child(where, f'datasets[{i}]')}: expected a mapping with a name, got {entry!r}"
            )
    conf: RunConf = dataclasses.replace(from_mapping(RunConf, raw, where), path=where)
    names = conf.names
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfError(f"{where}: datasets: {', '.join(repeated)} listed twice")
    check_compare(conf.compare, names, list(conf.models), child(where, "compare"))
    return conf


def check_compare(conf: CompareConf, datasets: list[str], models: list[str], where: str) -> None:
    """The ``compare:`` part names only the run's datasets, known protocols and a content model."""
    pairs = [*conf.transfer, *conf.all_signals.items()]
    missing = sorted({*conf.datasets, *(d for pair in pairs for d in pair)} - set(datasets))
    if missing:
        raise ConfError(f"{where}: {', '.join(missing)} not among the run's datasets ({', '.join(datasets)})")
    bad = sorted(set(conf.protocols) - set(PROTOCOLS))
    if bad:
        raise ConfError(f"{child(where, 'protocols')}: unknown {bad}; known: {', '.join(PROTOCOLS)}")
    if conf.transfer and not set(TRANSFER_MODELS) & set(models):
        raise ConfError(
            f"{child(where, 'transfer')}: needs {' or '.join(TRANSFER_MODELS)} among the run's models"
        )
