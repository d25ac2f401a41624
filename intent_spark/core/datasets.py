"""Dataset references: what a dataset name stands for, parsed once.

An ingested dataset is a plain name (``amazon_hk``, ``cct_mcc``). A variant is split, trained,
scored and reported under its own name but reads the events of its source, named before the dot:

- ``amazon_hk.leave_last_out`` and ``amazon_hk.horizon``: another protocol on the same events
  (test split only), at the source's test cutoff and holdout, so the source is split first;
- ``amazon_hk.seed1``: the INTENT split again with holdout seed 1, from the source's events;
- ``amazon_hk.origin2``: a backtest origin, the INTENT split of the source's events before the
  second-last month boundary before its last event (``origin1`` is the last one), as if the
  benchmark had been run then: same rule, same holdout seed.

A model name with ``@`` (``sasrec_f@amazon_hk``) is a model trained on another dataset.
"""

from __future__ import annotations

from intent_spark.core import schema as S
from intent_spark.core.errors import IntentError

VARIANT_SEPARATOR = "."
SEED_PREFIX = "seed"
ORIGIN_PREFIX = "origin"
LEAVE_LAST_OUT = "leave_last_out"
HORIZON = "horizon"
PROTOCOLS = (LEAVE_LAST_OUT, HORIZON)
TRANSFER_SEPARATOR = "@"
TRANSFER_MODELS = ("sasrec_f",)  # models that score items they never saw, by their tokens


def _variant_name(protocol: str | None, seed: int | None, origin: int | None) -> str | None:
    """``leave_last_out``, ``horizon``, ``seed1``, ``origin2``; None for an ingested dataset."""
    if protocol is not None:
        return protocol
    if origin is not None:
        return f"{ORIGIN_PREFIX}{origin}"
    return None if seed is None else f"{SEED_PREFIX}{seed}"


class DatasetRef(str):
    """A dataset of the lake, parsed once where its name enters (a command's argument, a run
    conf, a table's rows): its source (whose events it reads) and, for a variant, the protocol,
    the holdout seed or the backtest origin it was split with.

    It is its name as a ``str`` (a table's key, a log's, a file's), so it passes through every
    function that only files rows under the name; a function that needs the parts takes a
    ``DatasetRef``, and mypy holds the caller to parse the name first."""

    source: str
    protocol: str | None
    seed: int | None
    origin: int | None  # backtest: month boundaries back from the data's end (1 = last)

    def __new__(
        cls, source: str, protocol: str | None = None, seed: int | None = None, origin: int | None = None
    ) -> DatasetRef:
        variant = _variant_name(protocol, seed, origin)
        ref = super().__new__(cls, source if variant is None else f"{source}{VARIANT_SEPARATOR}{variant}")
        ref.__dict__.update(source=str(source), protocol=protocol, seed=seed, origin=origin)
        return ref

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a DatasetRef is immutable: {name}")

    def __reduce__(self) -> tuple:
        # Pickled it is its plain name: Spark's JVM unpickles the rows of a local frame, and
        # knows no Python class; a process that needs the parts parses the name again.
        return (str, (str(self),))

    def __repr__(self) -> str:  # messages quote a name with !r: 'hm.seed1', as a str shows
        return str.__repr__(self)

    @property
    def name(self) -> str:
        return str(self)

    @property
    def variant(self) -> str | None:
        """``leave_last_out``, ``horizon``, ``seed1``, ``origin2``; None for an ingested dataset."""
        return _variant_name(self.protocol, self.seed, self.origin)

    @property
    def is_variant(self) -> bool:
        return self.variant is not None

    @property
    def splits(self) -> tuple[str, ...]:
        """The splits it has: a protocol variant has a test split only."""
        return (S.TEST,) if self.protocol else (S.TEST, S.VAL)

    @property
    def needs_split_of(self) -> str | None:
        """The dataset that must be split before this one: a protocol takes its source's test
        cutoff and holdout; a seed variant only the source's events."""
        return self.source if self.protocol else None


def parse_dataset(name: str) -> DatasetRef:
    """The reference a dataset name stands for; a one-line error for an unknown variant. A name
    already parsed is returned as it is."""
    if isinstance(name, DatasetRef):
        return name
    if not name or name.startswith(VARIANT_SEPARATOR):
        raise IntentError(f"dataset name {name!r}: give the ingested dataset before any '.'")
    source, dot, variant = name.partition(VARIANT_SEPARATOR)
    if not dot:
        return DatasetRef(source)
    if variant in PROTOCOLS:
        return DatasetRef(source, protocol=variant)
    digits = variant.removeprefix(SEED_PREFIX)
    if variant.startswith(SEED_PREFIX) and digits.isdigit():
        return DatasetRef(source, seed=int(digits))
    back = variant.removeprefix(ORIGIN_PREFIX)
    if variant.startswith(ORIGIN_PREFIX) and back.isdigit() and int(back) >= 1:
        return DatasetRef(source, origin=int(back))
    raise IntentError(
        f"dataset {name!r}: unknown variant {variant!r}; known: {', '.join(PROTOCOLS)}, "
        f"{SEED_PREFIX}N, {ORIGIN_PREFIX}N (N >= 1)"
    )


def protocol_variant(dataset: str, protocol: str) -> DatasetRef:
    return DatasetRef(dataset, protocol=protocol)


def seed_variant(dataset: str, seed: int) -> DatasetRef:
    return DatasetRef(dataset, seed=seed)


def origin_variant(dataset: str, back: int) -> DatasetRef:
    return DatasetRef(dataset, origin=back)


def transfer_model(model: str, source: str) -> str:
    """The ranks' model name of ``model`` trained on ``source``: ``sasrec_f@amazon_hk``."""
    return f"{model}{TRANSFER_SEPARATOR}{source}"


def is_transfer(model: str) -> bool:
    return TRANSFER_SEPARATOR in model
