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

``floor_users:`` lowers (or raises) the user floor under which a cell is not ranked, for a demo
whose samples are too small for the protocol's 1,000 users; never below 200.

``backtest: {origins: K}`` repeats the whole split at each of the last K month boundaries
before a dataset's end (variants ``amazon_hk.origin1`` .. ``originK``); ``correction:`` (holm,
bh or none) adjusts the p-values of the paired comparisons shown together.

Every key is checked: a typo (``model:`` for ``models:``) is a one-line error naming the file,
the key and the closest known key, before any stage runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from intent_spark.core import schema as S
from intent_spark.core.conf import child, from_mapping, load_yaml
from intent_spark.core.datasets import (
    PROTOCOLS,
    TRANSFER_MODELS,
    DatasetRef,
    origin_variant,
    parse_dataset,
    protocol_variant,
    seed_variant,
)
from intent_spark.core.errors import ConfError

DEFAULT_EVENTS = 20_000
SEQUENCE_FLOOR = 25_000  # the paper's floor: users with 3+ events
# The lowest user floor a run may rank cells at: a demo's samples lower the protocol's 1,000,
# never below this, and the report says so.
LOWEST_FLOOR = 200


@dataclass(frozen=True)
class DatasetEntry:
    """One dataset of a run: generated (``events``) unless ``raw`` names its release files."""

    name: DatasetRef  # parsed here, where the name enters the run
    source: str = ""  # the source conf (default: the name); ``cct`` for ``cct_mcc``
    events: int = DEFAULT_EVENTS
    raw: str | None = None
    conf: str | None = None  # a source conf file instead of the built-in one
    item_level: str | None = None
    per_signal: bool | None = None  # KuaiRand: one event per set signal

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", parse_dataset(self.name))

    @property
    def source_name(self) -> str:
        return self.source or self.name


@dataclass(frozen=True)
class AuditConf:
    sequence_users: int = SEQUENCE_FLOOR  # users with 3+ events a source needs (the paper's 25,000)


@dataclass(frozen=True)
class CompareConf:
    """What to run beside the INTENT cells; empty means nothing."""

    datasets: tuple[DatasetRef, ...] = ()  # where protocols, seeds and sensitivity run
    protocols: tuple[str, ...] = ()
    seeds: tuple[int, ...] = ()
    transfer: tuple[tuple[DatasetRef, DatasetRef], ...] = ()  # (source, target)
    all_signals: dict[str, str] = field(default_factory=dict)  # one-per-impression -> all-signals
    replicates: int = 200  # bootstrap replicates of the protocol agreement intervals

    def __post_init__(self) -> None:
        object.__setattr__(self, "datasets", tuple(map(parse_dataset, self.datasets)))
        pairs = tuple((parse_dataset(s), parse_dataset(t)) for s, t in self.transfer)
        object.__setattr__(self, "transfer", pairs)

    def protocol_variants(self, dataset: str) -> list[DatasetRef]:
        return [protocol_variant(dataset, p) for p in self.protocols]

    def seed_variants(self, dataset: str) -> list[DatasetRef]:
        return [seed_variant(dataset, s) for s in self.seeds]

    def any(self) -> bool:
        return bool(self.protocols or self.seeds or self.transfer or self.all_signals or self.datasets)

    def variants(self) -> list[DatasetRef]:
        return [v for d in self.datasets for v in self.protocol_variants(d) + self.seed_variants(d)]


@dataclass(frozen=True)
class BacktestConf:
    """The INTENT split repeated at each of the last ``origins`` month boundaries before each
    dataset's last event (variants ``amazon_hk.origin1`` .. ``originK``), scored with the run's
    models; ``datasets`` empty means every dataset of the run."""

    origins: int = 3
    datasets: tuple[DatasetRef, ...] = ()
    replicates: int = 200  # paired user-bootstrap replicates of Kendall tau-b between origins

    def __post_init__(self) -> None:
        object.__setattr__(self, "datasets", tuple(map(parse_dataset, self.datasets)))

    def variants(self, dataset: str) -> list[DatasetRef]:
        """Oldest origin first."""
        return [origin_variant(dataset, back) for back in range(self.origins, 0, -1)]


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
    reader: str | None = (
        None  # the model inputs' reader (auto, arrow, petastorm); the models conf's otherwise
    )
    split_conf: str | None = None
    floor_users: int | None = None  # cells with fewer users are not ranked; the split conf's otherwise
    tracking_uri: str | None = None
    compare: CompareConf = field(default_factory=CompareConf)
    backtest: BacktestConf | None = None
    correction: str = "holm"  # holm | bh | none, over the paired comparisons shown together
    path: str = field(default="", metadata={"internal": True})  # the file it was read from

    @property
    def names(self) -> list[DatasetRef]:
        return [entry.name for entry in self.datasets]

    @property
    def lake_path(self) -> str:
        return self.lake or str(Path(self.workdir) / "lake")

    @property
    def report_path(self) -> Path:
        return Path(self.report) if self.report else Path(self.workdir) / "report"

    @property
    def backtested(self) -> list[DatasetRef]:
        """The datasets the backtest repeats the split of (none without ``backtest:``)."""
        if self.backtest is None:
            return []
        return list(self.backtest.datasets or self.names)

    def backtest_variants(self) -> list[DatasetRef]:
        backtest = self.backtest
        return [v for d in self.backtested for v in backtest.variants(d)] if backtest else []

    def source_of(self, name: str) -> str | None:
        return next((e.source_name for e in self.datasets if e.name == name), None)


def load_run_conf(path: str | Path) -> RunConf:
    """A run conf file, every key checked, its ``compare:`` part checked against its datasets."""
    where = str(path)
    raw = load_yaml(Path(path))
    for part in ("audit", "backtest"):
        if raw.get(part, "") is None:  # `audit:` alone: the paper's floor; `backtest:`: 3 origins
            raw[part] = {}
    if isinstance(raw.get("audit"), dict) and "floor_users" in raw["audit"]:
        raise ConfError(
            f"{child(child(where, 'audit'), 'floor_users')}: renamed sequence_users (users with 3+ events a "
            "source needs); the cells' floor is the top-level floor_users"
        )
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
    if conf.floor_users is not None and conf.floor_users < LOWEST_FLOOR:
        raise ConfError(
            f"{child(where, 'floor_users')}: {conf.floor_users} is below the lowest floor of {LOWEST_FLOOR} "
            "users per cell: a score over fewer users is noise"
        )
    check_compare(conf.compare, names, list(conf.models), child(where, "compare"))
    if conf.backtest is not None:
        check_backtest(conf.backtest, names, child(where, "backtest"))
    if conf.correction not in S.CORRECTIONS:
        raise ConfError(
            f"{child(where, 'correction')}: unknown {conf.correction!r}; known: {', '.join(S.CORRECTIONS)}"
        )
    return conf


def check_backtest(conf: BacktestConf, datasets: Sequence[str], where: str) -> None:
    if conf.origins < 1:
        raise ConfError(f"{child(where, 'origins')}: needs at least 1 origin, got {conf.origins}")
    if conf.replicates < 1:
        raise ConfError(f"{child(where, 'replicates')}: needs at least 1 replicate, got {conf.replicates}")
    missing = sorted(set(conf.datasets) - set(datasets))
    if missing:
        raise ConfError(
            f"{child(where, 'datasets')}: {', '.join(missing)} not among the run's datasets "
            f"({', '.join(datasets)})"
        )


def check_compare(conf: CompareConf, datasets: Sequence[str], models: list[str], where: str) -> None:
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
