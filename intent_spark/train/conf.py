"""The models conf (``conf/models.yaml``): the shared input settings and each model's
hyperparameters, checked against the known models before any work."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from intent_spark.core.conf import CONF_DIR, from_mapping, load_yaml
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


def load_models_conf(path: str | Path | None = None, overrides: dict[str, dict] | None = None) -> ModelsConf:
    """The models conf file, with per-model ``overrides`` (e.g. fewer steps for the demo)."""
    raw = load_yaml(Path(path) if path else CONF_DIR / "models.yaml")
    models = {name: dict(values or {}) for name, values in (raw.pop("models", None) or {}).items()}
    for name, values in (overrides or {}).items():
        models.setdefault(name, {}).update(values or {})
    unknown = sorted(set(models) - set(MODEL_NAMES))
    if unknown:
        raise ConfError(
            f"models conf: unknown model(s) {', '.join(unknown)} (known: {', '.join(MODEL_NAMES)})"
        )
    extra = sorted(set(raw) - {"context", "max_tokens"})
    if extra:
        raise ConfError(f"models conf: unknown key(s) {extra}; known: context, max_tokens, models")
    conf = ModelsConf(
        context=int(raw.get("context", 50)), max_tokens=int(raw.get("max_tokens", 16)), models=models
    )
    for name in NEURAL:
        conf.sasrec(name)  # validate every neural model's fields up front
    return conf


def check_model(model: str) -> None:
    if model not in MODEL_NAMES:
        raise IntentError(f"unknown model {model!r} (known: {', '.join(MODEL_NAMES)})")


def with_steps(conf: ModelsConf, steps: int | None) -> ModelsConf:
    """The same conf with every neural model's step count replaced (the demo's short runs)."""
    if steps is None:
        return conf
    shortened = {name: {**(conf.models.get(name) or {}), "steps": steps} for name in NEURAL}
    return replace(conf, models={**conf.models, **shortened})
