"""Source confs (``conf/sources/*.yaml``) as frozen dataclasses.

A source is described entirely by its conf: which files, which format, which column is the
user, the item, the time and the action. The five named sources are conf files shipped in
``conf/sources/``; a new source (a bank ledger, MovieLens, Yelp) needs a conf file, not code.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from intent_spark.core.conf import CONF_DIR, from_mapping, load_yaml
from intent_spark.core.errors import ConfError
from intent_spark.core.schema import DEFAULT_ITEM_LEVEL

SOURCES_DIR = CONF_DIR / "sources"
NAMED_SOURCES = ("amazon_hk", "kuairand", "microlens", "hm", "rees46")


@dataclass(frozen=True)
class TimeSpec:
    """How to read the event time: a Spark datetime pattern, or an epoch unit."""

    column: str
    format: str | None = None  # e.g. "yyyy-MM-dd HH:mm:ss 'UTC'"; "yyyy-MM-dd" for dates
    epoch: str | None = None  # "s" | "ms" | "us"
    parts: tuple[str, ...] = ()  # fields joined by spaces before parsing (TabFormer's Year Month Day Time)

    def __post_init__(self) -> None:
        if self.parts and self.epoch is not None:
            raise ConfError(f"time.{self.column}: 'parts' are parsed with a 'format', not an epoch")
        if (self.format is None) == (self.epoch is None):
            raise ConfError(f"time.{self.column}: give exactly one of 'format' or 'epoch'")
        if self.epoch not in (None, "s", "ms", "us"):
            raise ConfError(f"time.epoch must be s, ms or us, not {self.epoch!r}")


@dataclass(frozen=True)
class ActionOverride:
    """An event type that replaces the base one when its field is ``present`` (not blank) or
    ``negative`` (a number below zero): refunds and declined payments stay events."""

    type: str
    present: str | None = None
    negative: str | None = None

    def __post_init__(self) -> None:
        if (self.present is None) == (self.negative is None):
            raise ConfError(f"action.overrides[{self.type}]: give exactly one of 'present' or 'negative'")


@dataclass(frozen=True)
class ActionSpec:
    """Where event_type comes from: a column, a constant, or a priority list of 0/1 signals.

    With ``signals`` each raw row becomes one event typed by its first set signal
    (``per_signal: false``, the default) or one event per set signal (``per_signal: true``);
    a row with no signal set becomes ``no_signal``.
    """

    column: str | None = None
    constant: str | None = None
    signals: tuple[str, ...] = ()
    no_signal: str = "impression"
    per_signal: bool = False
    overrides: tuple[ActionOverride, ...] = ()  # checked in order; the first that holds wins

    def __post_init__(self) -> None:
        given = sum(x is not None and x != () for x in (self.column, self.constant, self.signals))
        if given != 1:
            raise ConfError("action: give exactly one of 'column', 'constant' or 'signals'")
        if self.overrides and self.signals:
            raise ConfError("action.overrides: only with a 'column' or 'constant' action")


@dataclass(frozen=True)
class EventsSpec:
    """The event-log files of a source and how their fields map onto the events table."""

    files: tuple[str, ...]
    user: str
    item: str
    time: TimeSpec
    action: ActionSpec
    # fields joined by "-" into the user id, ``user`` first (CCT: [Card] makes a card the user)
    user_with: tuple[str, ...] = ()
    format: str = "csv"  # csv | jsonl | parquet
    columns: tuple[str, ...] = ()  # csv: every column in file order; parquet: the fields to read
    json_schema: str | None = None  # jsonl: DDL of the fields to read
    header: str = "auto"  # auto: a first line equal to the header is the header
    delimiter: str = ","
    amount: str | None = None
    amount_format: str = "number"  # number | currency ($134.09, $-77.00, "$1,234.50")
    attributes: tuple[str, ...] = ()  # raw fields kept in events.attributes
    numeric: tuple[str, ...] = ()  # raw fields that must be numbers when present (e.g. rating)
    item_fields: dict[str, str] = field(default_factory=dict)  # title/category/brand from events
    item_tokens: tuple[str, ...] = ()  # event fields that become field:value item tokens
    id_pad: int = 0  # left-pad all-digit item ids with zeros to this width (H&M)

    def __post_init__(self) -> None:
        if self.format not in ("csv", "jsonl", "parquet"):
            raise ConfError(f"events.format must be csv, jsonl or parquet, not {self.format!r}")
        if self.format in ("csv", "parquet") and not self.columns:
            raise ConfError(f"events.columns: a {self.format} source must list its columns")
        if self.format == "jsonl" and not self.json_schema:
            raise ConfError("events.json_schema: a jsonl source must give the DDL of its fields")
        if self.header not in ("auto", "true", "false"):
            raise ConfError(f"events.header must be auto, true or false, not {self.header!r}")
        if self.amount_format not in ("number", "currency"):
            raise ConfError(f"events.amount_format must be number or currency, not {self.amount_format!r}")
        unknown = set(self.item_fields) - {"title", "category", "brand"}
        if unknown:
            raise ConfError(f"events.item_fields: unknown target(s) {sorted(unknown)}")


@dataclass(frozen=True)
class ItemsSpec:
    """An item metadata file: its key, descriptive fields and the fields that become tokens."""

    files: tuple[str, ...]
    key: str
    format: str = "csv"  # csv | jsonl
    header: str = "auto"
    columns: tuple[str, ...] = ()  # csv without header
    json_schema: str | None = None
    delimiter: str = ","
    encoding: str = "UTF-8"
    multiline: bool = False
    leading_space: bool = False  # "1, title" files: strip the space after the delimiter
    title: str | None = None
    category: str | None = None
    brand: str | None = None
    field_tokens: tuple[str, ...] = ()  # field:value tokens
    list_tokens: dict[str, str] = field(default_factory=dict)  # field -> separator ("" = array)
    text_tokens: tuple[str, ...] = ()  # free-text fields whose words become tokens
    id_pad: int = 0


@dataclass(frozen=True)
class UsersSpec:
    """A user profile file; every column but the key becomes an attribute unless listed."""

    files: tuple[str, ...]
    key: str
    attributes: tuple[str, ...] = ()
    format: str = "csv"
    header: str = "auto"
    columns: tuple[str, ...] = ()
    delimiter: str = ","
    encoding: str = "UTF-8"


@dataclass(frozen=True)
class ItemLevels:
    """What an item of the source is (``fine``: merchant, product, video) and the coarser labels
    that can stand in for it, each named by the item token field that carries it (``mcc: MCC``
    takes 5411 from the token ``MCC:5411``)."""

    fine: str = DEFAULT_ITEM_LEVEL
    coarse: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SourceConf:
    """One source: its event log, optional item metadata and user profiles, and its terms."""

    name: str
    events: EventsSpec
    items: tuple[ItemsSpec, ...] = ()
    users: UsersSpec | None = None
    release: str = ""
    terms: str = ""
    check_gzip: bool = True  # decompress .gz files once to report truncation as a reject
    item_levels: ItemLevels = field(default_factory=ItemLevels)
    item_level: str = ""  # the level ingested: empty for the fine one, else a coarse level's name

    def __post_init__(self) -> None:
        known = (self.item_levels.fine, *self.item_levels.coarse)
        if self.item_level and self.item_level not in known:
            raise ConfError(
                f"{self.name}: item level {self.item_level!r} is not declared; its item_levels: {', '.join(known)}"
            )

    @property
    def level(self) -> str:
        """The name of the item level ingested (``merchant``, ``mcc``)."""
        return self.item_level or self.item_levels.fine

    @property
    def level_field(self) -> str | None:
        """The token field whose value replaces the item at a coarse level; None at the fine one."""
        return self.item_levels.coarse.get(self.item_level)


def at_item_level(conf: SourceConf, level: str | None) -> SourceConf:
    """The conf that ingests items at ``level`` (None or the fine level's name: the source's item)."""
    return conf if level is None else dataclasses.replace(conf, item_level=level)


def load_source(name_or_path: str | Path) -> SourceConf:
    """Load a source conf by built-in name (``rees46``) or by path to a YAML file."""
    path = Path(name_or_path)
    if not path.suffix:
        path = SOURCES_DIR / f"{name_or_path}.yaml"
        if not path.exists():
            known = sorted(p.stem for p in SOURCES_DIR.glob("*.yaml"))
            raise ConfError(f"unknown dataset {name_or_path!r}; built-in: {', '.join(known)}")
    return from_mapping(SourceConf, load_yaml(path), str(path))
