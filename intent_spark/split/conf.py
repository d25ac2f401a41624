"""The split conf (``conf/split.yaml``): the protocol's numbers, fixed before any score."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from intent_spark.core.conf import CONF_DIR, check_keys, child, from_mapping, load_yaml
from intent_spark.core.datasets import parse_dataset
from intent_spark.core.errors import ConfError
from intent_spark.split.cutoff import CutoffRule


@dataclass(frozen=True)
class SplitConf:
    """Everything the split depends on besides the events (fixed before any score)."""

    seed: int = 0
    holdout_fraction: float = 0.10
    max_targets_per_period: int = 100
    known_past_users: int = 10_000
    floor_users: int = 1_000
    rule: CutoffRule = field(default_factory=CutoffRule)
    manual_cutoff: datetime | None = None
    manual_val_cutoff: datetime | None = None


def load_split_conf(
    path: str | Path, dataset: str, overrides: dict[str, Any] | None = None, source: str | None = None
) -> SplitConf:
    """The protocol conf for one dataset: file defaults, its ``datasets:`` entry (else that of its
    ``source``: ``cct_mcc`` of ``cct``), then overrides. Every key of the file is checked, those
    of every ``datasets:`` entry too, so a typo fails before any split."""
    where = str(path)
    raw = load_yaml(Path(path))
    fields = [f.name for f in dataclasses.fields(SplitConf)]
    check_keys(raw, [*fields, "datasets"], where)
    per_dataset = raw.pop("datasets", None) or {}
    if not isinstance(per_dataset, dict):
        raise ConfError(f"{child(where, 'datasets')}: expected a mapping of dataset names to settings")
    for name, settings in per_dataset.items():
        if not isinstance(settings, dict):
            raise ConfError(f"{child(where, f'datasets.{name}')}: expected a mapping, got {settings!r}")
        check_keys(settings, fields, child(where, f"datasets.{name}"))
    entry = per_dataset.get(dataset) or per_dataset.get(source) or {}
    merged = {**raw, **entry, **(overrides or {})}
    for key in ("manual_cutoff", "manual_val_cutoff"):
        value = merged.get(key)
        if value is not None and not isinstance(value, datetime):
            try:
                merged[key] = datetime.fromisoformat(str(value))
            except ValueError:
                raise ConfError(f"{child(where, key)}: {value!r} is not a date (YYYY-MM-DD)") from None
    rule = from_mapping(CutoffRule, merged.pop("rule", {}) or {}, child(where, "rule"))
    dates = {k: merged.pop(k) for k in ("manual_cutoff", "manual_val_cutoff") if k in merged}
    conf: SplitConf = from_mapping(SplitConf, merged, where)
    return dataclasses.replace(conf, rule=rule, **dates)


def conf_floor(dataset: str, path: str | Path | None = None) -> int:
    """The user floor a split conf (default ``conf/split.yaml``) gives a dataset or variant (a
    variant takes its source's entry, as ``intent run`` does): what evaluate and the report take
    for a split written before the split kept its floor."""
    return load_split_conf(path or CONF_DIR / "split.yaml", parse_dataset(dataset).source).floor_users
