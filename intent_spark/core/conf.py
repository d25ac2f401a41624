"""Conf files (YAML in ``conf/``) read into frozen dataclasses that reject unknown keys.

Every conf of the benchmark (run, source, split, models, Spark profile) goes through
``load_yaml`` and ``from_mapping``: a typo is a one-line error naming the file, the key and the
closest known key, never a setting quietly ignored.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.resources
import os
import types
import typing
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from intent_spark.core.errors import ConfError

REPO_ROOT = Path(__file__).resolve().parents[2]  # a checkout's root (its .jars, its git history)
# The built-in confs (sources, the split, Spark profiles, models): package data, so an installed
# wheel reads the same files a checkout does (intent_spark/conf links to the checkout's conf/).
CONF_DIR = Path(str(importlib.resources.files("intent_spark") / "conf"))
# The model inputs' readers (train/readers.py): auto is Petastorm where it runs, else arrow.
READERS = ("auto", "arrow", "petastorm")


@contextmanager
def environment(name: str, value: str | None) -> Iterator[None]:
    """The environment variable ``name`` set to ``value`` inside the block (``None``: left as
    it is), and as it was after it, unset where it was unset."""
    before = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def load_yaml(path: Path) -> dict[str, Any]:
    """Read a YAML mapping with a one-line error for a missing or malformed file."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfError(f"{path}: conf file not found") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ConfError(f"{path}{where}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict):
        raise ConfError(f"{path}: expected a mapping at the top level")
    return data


def closest(word: str, known: Iterable[str]) -> str | None:
    """The known name nearest to a misspelt one (``model`` -> ``models``), if any is near."""
    found = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.6)
    return found[0] if found else None


def unknown_key(where: str, key: str, known: Iterable[str]) -> ConfError:
    """The one-line error for a key no conf field has: the file, the key, the closest known key."""
    known = sorted(known)
    if not known:
        return ConfError(
            f"{child(where, key)}: unknown key; {where.rsplit('.', 1)[-1].rsplit(' ', 1)[-1]} takes no settings"
        )
    near = closest(key, known)
    hint = f"did you mean {near!r}? " if near else ""
    return ConfError(f"{child(where, key)}: unknown key; {hint}known: {', '.join(known)}")


def child(where: str, key: str) -> str:
    """``FILE: a.b`` for key ``b`` of part ``a`` of a conf file ``FILE``."""
    return f"{where}.{key}" if ": " in where else f"{where}: {key}"


def check_keys(data: dict[str, Any], known: Iterable[str], where: str) -> None:
    """Raise on the first key of ``data`` (in the file's order) that is not ``known``."""
    known = set(known)
    for key in data:
        if key not in known:
            raise unknown_key(where, str(key), known)


def from_mapping(cls: type, data: Any, where: str) -> Any:
    """Build a (nested) frozen dataclass from a mapping, naming unknown or missing keys.

    ``where`` is the file (``conf/demo.yaml``), or the file and the part being read
    (``conf/sources/hm.yaml: events.time``).
    """
    if not isinstance(data, dict):
        raise ConfError(f"{where}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    check_keys(data, fields, where)
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _coerce(hints[name], value, child(where, name))
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfError(f"{where}: {exc}") from None


def _coerce(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(inner[0], value, where)
    if dataclasses.is_dataclass(hint):
        return from_mapping(typing.cast(type, hint), value, where)
    if origin is tuple:
        items = value if isinstance(value, list) else [value]
        if len(args) == 2 and args[1] is Ellipsis or len(args) == 1:
            return tuple(_coerce(args[0], v, f"{where}[{i}]") for i, v in enumerate(items))
        if len(items) != len(args):
            raise ConfError(f"{where}: expected {len(args)} values, got {value!r}")
        return tuple(_coerce(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, items, strict=True)))
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfError(f"{where}: expected a mapping")
        if args and args[1] is str:
            return {str(k): ("" if v is None else str(v)) for k, v in value.items()}
        return {
            str(k): (v if not args else _coerce(args[1], v, child(where, str(k)))) for k, v in value.items()
        }
    if hint is bool and not isinstance(value, bool):
        raise ConfError(f"{where}: expected true or false, got {value!r}")
    if hint is int and (not isinstance(value, int) or isinstance(value, bool)):
        raise ConfError(f"{where}: expected an integer, got {value!r}")
    if hint is float:
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ConfError(f"{where}: expected a number, got {value!r}")
        return value
    if hint is str:
        if isinstance(value, bool):  # YAML reads `header: true` as a bool
            return "true" if value else "false"
        if isinstance(value, dict | list):
            raise ConfError(f"{where}: expected a text value, got {value!r}")
        return str(value)
    return value
