"""The models conf (``conf/models.yaml``): the shared input settings and each model's
hyperparameters, checked against the known models before any work."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from intent_spark.core.conf import CONF_DIR, check_keys, child, from_mapping, load_yaml, unknown_key
from intent_spark.core.errors import ConfError, IntentError
from models import MODEL_NAMES
from models.sasrec import SASRecConf

NEURAL = ("sasrec", "sasrec_f")


@dataclass(frozen=True)
class ModelsConf:
    """``conf/models.yaml``: the shared input settings and each model's hyperparameters."""

    context: int = 50
    max_tokens: int = 16
    models: dict[str, dict[str, Any]] = field(default_factory=dict)

    def sasrec(self, model: str) -> SASRecConf:
        values = {**(self.models.get(model) or {}), "context": self.context}
        return from_mapping(SASRecConf, values, f"models.{model}")


def load_models_conf(
    path: str | Path | None = None,
    overrides: dict[str, dict] | None = None,
    overrides_from: str = "model_overrides",
) -> ModelsConf:
    """The models conf file, with per-model ``overrides`` (a run conf's ``model_overrides``: the
    demo trains for fewer steps). Unknown models and unknown settings are one-line errors naming
    the file, the key and the closest known one."""
    where = str(Path(path) if path else CONF_DIR / "models.yaml")
    raw = load_yaml(Path(where))
    check_keys(raw, ("context", "max_tokens", "models"), where)
    listed = raw.get("models") or {}
    if not isinstance(listed, dict):
        raise ConfError(f"{child(where, 'models')}: expected a mapping of model names to settings")
    models: dict[str, dict[str, Any]] = {}
    for origin, entries in ((child(where, "models"), listed), (overrides_from, overrides or {})):
        for name, values in entries.items():
            if name not in MODEL_NAMES:
                raise unknown_key(origin, str(name), MODEL_NAMES)
            if values is not None and not isinstance(values, dict):
                raise ConfError(f"{child(origin, name)}: expected a mapping of settings, got {values!r}")
            settings = dict(values or {})
            known = (
                [f.name for f in dataclasses.fields(SASRecConf) if f.name != "context"]
                if name in NEURAL
                else []
            )
            check_keys(settings, known, child(origin, name))
            models.setdefault(name, {}).update(settings)
    conf = ModelsConf(
        context=_integer(raw.get("context", 50), child(where, "context")),
        max_tokens=_integer(raw.get("max_tokens", 16), child(where, "max_tokens")),
        models=models,
    )
    for name in NEURAL:
        conf.sasrec(name)  # every neural model's values checked up front
    return conf


def _integer(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfError(f"{where}: expected an integer, got {value!r}")
    return value


def check_model(model: str) -> None:
    if model not in MODEL_NAMES:
        raise IntentError(f"unknown model {model!r} (known: {', '.join(MODEL_NAMES)})")


def with_steps(conf: ModelsConf, steps: int | None) -> ModelsConf:
    """The same conf with every neural model's step count replaced (the demo's short runs)."""
    if steps is None:
        return conf
    shortened = {name: {**(conf.models.get(name) or {}), "steps": steps} for name in NEURAL}
    return replace(conf, models={**conf.models, **shortened})
