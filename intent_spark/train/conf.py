"""The models conf (``conf/models.yaml``): the shared input settings and each model's
hyperparameters, checked against the registered models and their settings before any work."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from intent_spark.core.conf import CONF_DIR, READERS, check_keys, child, from_mapping, load_yaml, unknown_key
from intent_spark.core.errors import ConfError
from intent_spark.plugin import HistoryModel
from intent_spark.train.registry import is_spec, registered, resolve


@dataclass(frozen=True)
class ScoringSettings:
    """What the framework reads of every model's settings: the seed torch starts from when the
    model is built and fitted, and how many contexts and scores it ranks at once."""

    seed: int = 0
    score_batch: int = 128  # contexts encoded and ranked at once
    score_chunk_items: int = 1_000_000  # scores per product on the CPU: a block of items in cache
    score_fuse_from_items: int = 50_000  # from this many scorable items the CPU ranks in one compiled pass
    score_chunk_items_gpu: int = 256_000_000


SCORING_KEYS = tuple(f.name for f in dataclasses.fields(ScoringSettings))
SHARED_KEYS = ("context", "max_tokens")  # the conf's own: every model's inputs are built with them


@dataclass(frozen=True)
class ModelsConf:
    """``conf/models.yaml``: the shared input settings and each model's hyperparameters, by name."""

    context: int = 50
    max_tokens: int = 16
    processes: int = 1  # training and scoring processes: TorchDistributor above 1
    reader: str = "auto"  # the model inputs' reader: auto, arrow or petastorm (train/readers.py)
    models: dict[str, dict[str, Any]] = field(default_factory=dict)
    steps: int | None = None  # every model's ``steps`` replaced (the demo's short runs)

    def values(self, model: str) -> dict[str, Any]:
        return dict(self.models.get(model) or {})

    def scoring(self, model: str) -> ScoringSettings:
        values = {k: v for k, v in self.values(model).items() if k in SCORING_KEYS}
        return from_mapping(ScoringSettings, values, f"models.{model}")

    def settings(self, model: str) -> Any:
        """The model's ``Settings`` from its defaults, the conf's values, the shared ``context``
        and the seed, where the model declares those fields."""
        cls = resolve(model)
        names = {f.name for f in dataclasses.fields(cls.Settings)}
        values = {k: v for k, v in self.values(model).items() if k in names}
        shared = {"context": self.context, "seed": self.scoring(model).seed, "steps": self.steps}
        values.update({k: v for k, v in shared.items() if k in names and v is not None})
        return from_mapping(cls.Settings, values, f"models.{model}")

    def logged(self, model: str) -> dict[str, Any]:
        """Every setting a model runs with, as MLflow params and run fingerprints see them."""
        return {**dataclasses.asdict(self.scoring(model)), **dataclasses.asdict(self.settings(model))}


def known_settings(model: str) -> list[str]:
    """A model's own settings, and the framework's for the models it batches (not the count
    models, which rank a whole history exactly)."""
    cls = resolve(model)
    names = [f.name for f in dataclasses.fields(cls.Settings)]
    framework = [] if issubclass(cls, HistoryModel) else [k for k in SCORING_KEYS if k not in names]
    return [n for n in names if n not in SHARED_KEYS] + framework


def load_models_conf(
    path: str | Path | None = None,
    overrides: dict[str, dict] | None = None,
    overrides_from: str = "model_overrides",
) -> ModelsConf:
    """The models conf file, with per-model ``overrides`` (a run conf's ``model_overrides``: the
    demo trains for fewer steps). Models are registered names or ``module:Class`` specs; unknown
    models and settings are one-line errors naming the file, the key and the closest known one."""
    where = str(Path(path) if path else CONF_DIR / "models.yaml")
    raw = load_yaml(Path(where))
    check_keys(raw, ("context", "max_tokens", "processes", "reader", "models"), where)
    listed = raw.get("models") or {}
    if not isinstance(listed, dict):
        raise ConfError(f"{child(where, 'models')}: expected a mapping of model names to settings")
    models: dict[str, dict[str, Any]] = {}
    for origin, entries in ((child(where, "models"), listed), (overrides_from, overrides or {})):
        for key, values in entries.items():
            key = str(key)
            if not is_spec(key) and key not in registered():
                raise unknown_key(origin, key, tuple(registered()))
            name = resolve(key).name
            if values is not None and not isinstance(values, dict):
                raise ConfError(f"{child(origin, key)}: expected a mapping of settings, got {values!r}")
            settings = dict(values or {})
            check_keys(settings, known_settings(key), child(origin, key))
            models.setdefault(name, {}).update(settings)
    conf = ModelsConf(
        context=_integer(raw.get("context", 50), child(where, "context")),
        max_tokens=_integer(raw.get("max_tokens", 16), child(where, "max_tokens")),
        processes=_integer(raw.get("processes", 1), child(where, "processes")),
        models=models,
    )
    with_processes(conf, conf.processes, child(where, "processes"))
    conf = with_reader(conf, raw.get("reader"), child(where, "reader"))
    for name in models:
        conf.logged(name)  # every listed model's values checked up front
    return conf


def _integer(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfError(f"{where}: expected an integer, got {value!r}")
    return value


def check_model(model: str) -> str:
    """The model's name, or a one-line error (unknown, fails to import, not a model)."""
    return resolve(model).name


def with_steps(conf: ModelsConf, steps: int | None) -> ModelsConf:
    """The same conf with every model's step count replaced (the demo's short runs)."""
    return conf if steps is None else replace(conf, steps=steps)


def with_processes(conf: ModelsConf, processes: int | None, where: str = "--processes") -> ModelsConf:
    """The same conf trained and scored over ``processes`` processes (None: as it is)."""
    if processes is None:
        return conf
    if not isinstance(processes, int) or isinstance(processes, bool) or processes < 1:
        raise ConfError(f"{where}: expected a positive number of processes, got {processes!r}")
    return replace(conf, processes=processes)


def with_reader(conf: ModelsConf, reader: str | None, where: str = "--reader") -> ModelsConf:
    """The same conf reading its model inputs through ``reader`` (None: as it is)."""
    if reader is None:
        return conf
    if reader not in READERS:
        raise ConfError(f"{where}: unknown reader {reader!r}; known: {', '.join(READERS)}")
    return replace(conf, reader=reader)


def model_listing(conf: ModelsConf) -> list[str]:
    """``intent models``: every registered model with its kind, origin and settings (the conf's
    values where it sets them, else the model's defaults), two lines each; one that fails to
    load is listed all the same, with its error (the listing is where one looks first)."""
    from intent_spark.core.errors import IntentError
    from intent_spark.plugin import settings_defaults

    lines = []
    for entry in registered().values():
        try:
            cls = entry.load()
        except IntentError as exc:
            lines += [f"{entry.name:<13} {'?':<8} {entry.origin} ({entry.target})", f"{'':<13} {exc}"]
            continue
        values = {**settings_defaults(cls), **conf.values(entry.name)}
        shown = {k: v for k, v in values.items() if k not in SCORING_KEYS and k != "context"}
        fits = "" if cls.fits else ", fits nothing"
        lines.append(f"{entry.name:<13} {cls.kind:<8} {entry.origin} ({entry.target}){fits}")
        lines.append(f"{'':<13} {', '.join(f'{k}={v}' for k, v in shown.items()) or '(no settings)'}")
    return lines
