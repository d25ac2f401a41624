"""Models by name: the built-in ones, Python entry points in group ``intent_spark.models``, and
``module:Class`` specs, accepted wherever a model name is (``--model``, a run conf's ``models:``).

A spec names its class; the class's ``name`` is what runs, ranks and reports call it. Every
fault of a plug-in (unknown name, an import that fails, a class that is not a model) is one line
naming the model.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points
from typing import Any

from intent_spark.core.errors import IntentError
from intent_spark.plugin import HistoryModel, Model, ScoresModel, VectorsModel

ENTRY_POINT_GROUP = "intent_spark.models"
BUILT_IN = {
    "popularity": "models.popularity:PopularityModel",
    "repeat_last": "models.repeat_last:RepeatLastModel",
    "sasrec": "models.sasrec:SASRecModel",
    "sasrec_f": "models.sasrec:SASRecFModel",
    "gru4rec": "models.gru4rec:GRU4RecModel",
    "text_encoder": "models.text_encoder:TextEncoderModel",
}
NAME = re.compile(r"[a-z][a-z0-9_]*$")  # a partition value, a file name and an MLflow tag


@dataclass(frozen=True)
class Registered:
    name: str
    target: str  # module:Class
    origin: str  # built-in, entry point (distribution), or spec

    def load(self) -> type[Model]:
        return load_class(self.target, self.name, self.origin)


_SPECS: dict[str, Registered] = {}  # specs resolved in this process, known by name from then on


def registered() -> dict[str, Registered]:
    """Every model known by name: built-ins, entry points by name, then the specs used here."""
    return {**installed(), **_SPECS}


@cache
def installed() -> dict[str, Registered]:
    found = {name: Registered(name, target, "built-in") for name, target in BUILT_IN.items()}
    for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
        dist = point.dist.name if point.dist is not None else "?"
        if point.name in found:
            raise IntentError(
                f"model {point.name!r}: entry point {point.value} of {dist} takes the name of the "
                f"{found[point.name].origin} model {point.name!r}"
            )
        found[point.name] = Registered(point.name, point.value, f"entry point of {dist}")
    return found


def is_spec(model: str) -> bool:
    return ":" in model


def resolve(model: str) -> type[Model]:
    """The model class of a registered name or a ``module:Class`` spec."""
    if is_spec(model):
        cls = load_class(model, model, "spec")
        taken = registered().get(cls.name)
        if taken is not None and taken.target != model:
            raise IntentError(f"model {model!r}: its name {cls.name!r} is the {taken.origin} model's")
        _SPECS[cls.name] = Registered(cls.name, model, "spec")
        return cls
    known = registered()
    if model not in known:
        raise IntentError(
            f"unknown model {model!r} (registered: {', '.join(known)}; or give a module:Class spec)"
        )
    return known[model].load()


def same_model_note(model: str) -> str | None:
    """For a spec naming the class a built-in or entry-point model registers: the line saying
    they are one model (one class, one name), so its runs and ranks are that model's."""
    if not is_spec(model):
        return None
    cls = resolve(model)
    taken = installed().get(cls.name)
    if taken is None or taken.target != model:
        return None
    return (
        f"model {model}: the {taken.origin} model {cls.name!r} (one class, one name: "
        f"its runs and ranks are {cls.name}'s, whichever way it is named)"
    )


@cache
def load_class(target: str, name: str, origin: str) -> type[Model]:
    module_name, _, attribute = target.partition(":")
    where = f"model {name!r} ({origin} {target})"
    if not module_name or not attribute:
        raise IntentError(f"{where}: a spec is module:Class")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure of a plug-in is the plug-in's fault
        raise IntentError(f"{where}: import failed: {type(exc).__name__}: {exc}") from exc
    cls: Any = module
    for part in attribute.split("."):
        cls = getattr(cls, part, None)
        if cls is None:
            raise IntentError(f"{where}: {module_name} has no {attribute}")
    return check_class(cls, where)


def check_class(cls, where: str) -> type[Model]:
    """A model class: an ``intent_spark.plugin.Model`` of a known kind, a name, settings as a dataclass."""
    if not (isinstance(cls, type) and issubclass(cls, Model)):
        raise IntentError(f"{where}: {cls!r} is not a subclass of intent_spark.plugin.Model")
    if not issubclass(cls, (VectorsModel, ScoresModel, HistoryModel)):
        raise IntentError(f"{where}: subclass VectorsModel, ScoresModel or HistoryModel (kind {cls.kind!r})")
    if not NAME.match(cls.name or ""):
        raise IntentError(f"{where}: name {cls.name!r} must be lower-case letters, digits and _")
    if not dataclasses.is_dataclass(cls.Settings):
        raise IntentError(f"{where}: Settings must be a dataclass")
    return cls
