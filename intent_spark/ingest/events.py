"""Raw lines -> canonical events plus rejects, by column expressions only.

Every raw data line ends in exactly one place: an event (or, with per-signal KuaiRand, one
event per signal of that line) or a reject row that names the file, line, field and reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from intent_spark.core import schema as S
from intent_spark.core.sources import EventsSpec
from intent_spark.lake.spark_line import is_valid_utf8, struct_from_ddl

CORRUPT = "_corrupt"
PARSED = "_parsed"
REASON_CHECKED = "_reason"
FIELD_CHECKED = "_field"
SUB = "_sub"
VERDICT = "_verdict"
TYPED_TS = "_ts"
TYPED_AMOUNT = "_amount"


@dataclass(frozen=True)
class ParsedEvents:
    """The two outputs of parsing one source's event lines."""

    events: DataFrame  # EVENTS_SCHEMA
    rejects: DataFrame  # REJECTS_SCHEMA


def raw_field_names(spec: EventsSpec) -> list[str]:
    """The raw fields read from each line, in file order for csv."""
    if spec.format in ("csv", "parquet"):
        return list(spec.columns)
    schema = struct_from_ddl(spec.json_schema or "")
    assert isinstance(schema, StructType)
    return [f.name for f in schema.fields]


def _all_string_schema(names: list[str], with_corrupt: bool) -> StructType:
    fields = [StructField(n, StringType(), True) for n in names]
    if with_corrupt:
        fields.append(StructField(CORRUPT, StringType(), True))
    return StructType(fields)


def parse_lines(lines: DataFrame, spec: EventsSpec) -> DataFrame:
    """Split each line into string fields; a line that does not split cleanly keeps ``_corrupt``.

    JSON fields are read as strings too (Spark keeps a number's text), so the typed checks
    below are the same for every format. Parquet rows arrive as JSON text of their fields.
    """
    names = raw_field_names(spec)
    schema = _all_string_schema(names, with_corrupt=True)
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
    if spec.format == "csv":
        ddl = ", ".join("`{}` STRING".format(f.name.replace("`", "``")) for f in schema.fields)
        parsed = F.from_csv(F.col("value"), F.lit(ddl), {**options, "sep": spec.delimiter})
    else:
        parsed = F.from_json(F.col("value"), schema, options)
    return lines.withColumn(PARSED, parsed)


def raw_field(name: str) -> Column:
    """A raw field of the parsed line (kept in a struct so it never clashes with our names)."""
    return F.col(PARSED).getField(name)


def header_line(spec: EventsSpec) -> str:
    return spec.delimiter.join(spec.columns)


def _blank(c: Column) -> Column:
    return c.isNull() | (F.trim(c) == "")


# What a cast from text to a number accepts, so that a cast sees only text it can convert: the same
# result on every Spark line and in either ANSI mode (where a bad cast fails the job), and the
# result of ``try_cast`` (Spark 4 only) on all but Java's hexadecimal and suffixed forms (``0x1p3``,
# ``1.5d``), rejected here.
_WS = r"[\x00-\x20]*"  # what Spark's casts trim around a number
_INTEGER = rf"^{_WS}([+-]?)0*([0-9]*){_WS}$"  # the sign, and the digits after leading zeros
_SOME_DIGITS = rf"^{_WS}[+-]?[0-9]+{_WS}$"  # an integer: a sign alone is none
_DECIMAL = rf"(?i)^{_WS}([+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)(e[+-]?[0-9]+)?|[+-]?(inf|infinity)|nan){_WS}$"
LONG_DIGITS = 19  # the digits of 2^63


def parse_long(text: Column) -> Column:
    """Integer text as a long, null where it is not an integer or overflows a long."""
    sign = F.regexp_extract(text, _INTEGER, 1)
    digits = F.regexp_extract(text, _INTEGER, 2)
    limit = F.when(sign == "-", F.lit("9223372036854775808")).otherwise(F.lit("9223372036854775807"))
    size = F.length(digits)
    fits = (size < LONG_DIGITS) | ((size == LONG_DIGITS) & (digits <= limit))  # equal lengths: text order
    number = F.concat(sign, F.when(size > 0, digits).otherwise(F.lit("0")))
    return F.when(text.rlike(_SOME_DIGITS) & fits, number.cast("long"))


def parse_double(text: Column) -> Column:
    """Decimal text (``1.5``, ``-2e3``, ``NaN``, ``inf``) as a double, null where it is none."""
    return F.when(text.rlike(_DECIMAL), text.cast("double"))


def typed_time(spec: EventsSpec) -> Column:
    """The event time as a UTC timestamp, or null where the raw text does not parse."""
    if spec.time.parts:
        raw = F.concat_ws(" ", *[F.trim(raw_field(p)) for p in spec.time.parts])
    else:
        raw = F.trim(raw_field(spec.time.column))
    if spec.time.format is not None:
        return F.try_to_timestamp(raw, F.lit(spec.time.format))
    as_long = parse_long(raw)
    if spec.time.epoch == "s":
        return F.timestamp_seconds(as_long)
    if spec.time.epoch == "ms":
        return F.timestamp_millis(as_long)
    return F.timestamp_micros(as_long)


def typed_amount(spec: EventsSpec) -> Column:
    if spec.amount is None:
        return F.lit(None).cast("double")
    text = F.trim(raw_field(spec.amount))
    if spec.amount_format == "currency":  # $1,234.50 -> 1234.50; $-77.00 and -$77.00 -> -77.00
        text = F.regexp_replace(text, r"[$,]", "")
    return parse_double(text)


def _signal_set(name: str) -> Column:
    return F.coalesce(parse_double(raw_field(name)), F.lit(0.0)) == 1.0


def _signal_type(name: str) -> str:
    return name.removeprefix("is_")


def check_rows(parsed: DataFrame, spec: EventsSpec) -> DataFrame:
    """Add ``_reason``/``_field`` (null for a good row): the first failed check, in a fixed order."""
    header = header_line(spec) if spec.format == "csv" else None
    value = F.col("value")
    ts = F.col(TYPED_TS)
    checks: list[tuple[Column, str | None, str]] = [
        (_blank(value), None, "empty line"),
        (~is_valid_utf8(value), None, "invalid UTF-8 bytes in line"),
    ]
    if header is not None:
        checks.append((F.rtrim(value) == header, None, "duplicate header line"))
    if spec.format == "csv":
        reason = f"malformed CSV row: expected {len(spec.columns)} fields separated by {spec.delimiter!r}"
    else:
        reason = "malformed JSON line"
    checks += [
        (raw_field(CORRUPT).isNotNull(), None, reason),
        *[(_blank(raw_field(u)), u, "missing user id") for u in (spec.user, *spec.user_with)],
        (_blank(raw_field(spec.item)), spec.item, "missing item id"),
        *[(_blank(raw_field(p)), p, "missing timestamp") for p in (spec.time.parts or (spec.time.column,))],
        (ts.isNull(), spec.time.column, _time_reason(spec)),
    ]
    if spec.amount is not None:
        checks.append(
            (
                ~_blank(raw_field(spec.amount)) & F.col(TYPED_AMOUNT).isNull(),
                spec.amount,
                "non-numeric amount",
            )
        )
    for name in (*spec.numeric, *spec.action.signals):
        value_text = raw_field(name)
        checks.append(
            (
                ~_blank(value_text) & parse_double(value_text).isNull(),
                name,
                f"non-numeric {name}",
            )
        )
    if spec.action.column is not None:
        checks.append((_blank(raw_field(spec.action.column)), spec.action.column, "missing action"))
    verdict: Column | None = None  # CASE WHEN over the checks: the first that fails wins
    for condition, field, text in checks:
        outcome = F.struct(F.lit(text).alias("reason"), F.lit(field).cast("string").alias("field"))
        verdict = F.when(condition, outcome) if verdict is None else verdict.when(condition, outcome)
    assert verdict is not None
    return (
        parsed.withColumn(TYPED_TS, typed_time(spec))
        .withColumn(TYPED_AMOUNT, typed_amount(spec))
        .withColumn(VERDICT, verdict)
        .withColumn(REASON_CHECKED, F.col(VERDICT).getField("reason"))
        .withColumn(FIELD_CHECKED, F.col(VERDICT).getField("field"))
        .drop(VERDICT)
    )


def fields_read_after_checks(spec: EventsSpec) -> list[str]:
    """The raw fields that events and the catalogue read once the checks are done: the ids, the
    action, the attributes and the item fields (the time and the amount are typed by then)."""
    action = spec.action
    names = [
        spec.user,
        *spec.user_with,
        spec.item,
        action.column,
        *action.signals,
        *[o.present or o.negative for o in action.overrides],
        *spec.attributes,
        *spec.item_fields.values(),
        *spec.item_tokens,
    ]
    return list(dict.fromkeys(n for n in names if n))


def narrowed(checked: DataFrame, spec: EventsSpec, keep_lines: bool) -> DataFrame:
    """The checked lines with only what their outputs read: the raw line of a reject (of every
    line with ``keep_lines``) and the fields of ``fields_read_after_checks``: the ingest persists
    this set and reads it four times."""
    value = F.col("value") if keep_lines else F.when(F.col(REASON_CHECKED).isNotNull(), F.col("value"))
    fields = [raw_field(n).alias(n) for n in fields_read_after_checks(spec)]
    return checked.select(
        S.SOURCE_FILE,
        "file_index",
        S.LINE,
        value.alias("value"),
        F.struct(*fields).alias(PARSED),
        TYPED_TS,
        TYPED_AMOUNT,
        REASON_CHECKED,
        FIELD_CHECKED,
    )


def _time_reason(spec: EventsSpec) -> str:
    if spec.time.parts:
        return f"unparseable timestamp ({' '.join(spec.time.parts)} expected as {spec.time.format})"
    if spec.time.format is not None:
        return f"unparseable timestamp (expected format {spec.time.format})"
    return f"unparseable timestamp (expected epoch {spec.time.epoch})"


def _event_types(spec: EventsSpec) -> Column:
    """An array of (sub index, event_type) per row: one element unless per-signal mode."""
    action = spec.action
    if action.constant is not None or action.column is not None:
        base = (
            F.lit(action.constant)
            if action.constant is not None
            else F.lower(F.trim(raw_field(str(action.column))))
        )
        for override in reversed(action.overrides):  # the first listed is checked first
            base = F.when(_override_holds(override, spec), F.lit(override.type)).otherwise(base)
        return F.array(base)
    set_types = [F.when(_signal_set(s), F.lit(_signal_type(s))) for s in action.signals]
    if action.per_signal:
        present = F.filter(F.array(*set_types), lambda t: t.isNotNull())
        return F.when(F.size(present) > 0, present).otherwise(F.array(F.lit(action.no_signal)))
    return F.array(F.coalesce(*set_types, F.lit(action.no_signal)))


def _override_holds(override, spec: EventsSpec) -> Column:
    if override.present is not None:
        return ~_blank(raw_field(override.present))
    value = (
        F.col(TYPED_AMOUNT)
        if override.negative == spec.amount
        else parse_double(raw_field(override.negative))
    )
    return F.coalesce(value < 0, F.lit(False))


def pad_id(c: Column, width: int) -> Column:
    """Trim an id and left-pad an all-digit one with zeros to ``width`` (0: no padding)."""
    c = F.trim(c)
    if width <= 0:
        return c
    return F.when(c.rlike("^[0-9]+$") & (F.length(c) < width), F.lpad(c, width, "0")).otherwise(c)


def user_key(spec: EventsSpec) -> Column:
    """The user id: the user field, joined by "-" with ``user_with`` (a holder's card: ``7-2``)."""
    return F.concat_ws("-", *[F.trim(raw_field(u)) for u in (spec.user, *spec.user_with)])


def to_events(checked: DataFrame, spec: EventsSpec, dataset: str) -> DataFrame:
    """Good rows -> EVENTS_SCHEMA rows, ``seq`` from (file, line, sub-event)."""
    good = checked.where(F.col(REASON_CHECKED).isNull())
    exploded = good.select("*", F.posexplode(_event_types(spec)).alias(SUB, S.EVENT_TYPE))
    attributes = (
        F.create_map(*[x for a in spec.attributes for x in (F.lit(a), F.trim(raw_field(a)))])
        if spec.attributes
        else F.lit(None).cast("map<string,string>")
    )
    seq = F.shiftleft(F.col("file_index"), S.FILE_SHIFT) + F.shiftleft(F.col(S.LINE), S.SUB_BITS) + F.col(SUB)
    return exploded.select(
        F.lit(dataset).alias(S.DATASET),
        user_key(spec).alias(S.USER_ID),
        pad_id(raw_field(spec.item), spec.id_pad).alias(S.ITEM_ID),
        F.col(TYPED_TS).alias(S.TS),
        seq.cast("long").alias(S.SEQ),
        F.col(S.EVENT_TYPE),
        F.col(TYPED_AMOUNT).alias(S.AMOUNT),
        attributes.alias(S.EVENT_ATTRIBUTES),
    )


def to_rejects(checked: DataFrame, dataset: str) -> DataFrame:
    """Failed rows -> REJECTS_SCHEMA rows carrying the raw line."""
    return checked.where(F.col(REASON_CHECKED).isNotNull()).select(
        F.lit(dataset).alias(S.DATASET),
        F.col(S.SOURCE_FILE),
        F.col(S.LINE),
        F.col(FIELD_CHECKED).alias(S.FIELD),
        F.col(REASON_CHECKED).alias(S.REASON),
        F.col("value").alias(S.RAW),
    )


def drop_header_lines(lines: DataFrame, spec: EventsSpec) -> DataFrame:
    """Remove each file's own header: line 1 when it equals the header (auto) or always (true)."""
    if spec.format != "csv" or spec.header == "false":
        return lines
    is_first = F.col(S.LINE) == 1
    if spec.header == "true":
        return lines.where(~is_first)
    return lines.where(~(is_first & (F.rtrim(F.col("value")) == header_line(spec))))


def parse_events(lines: DataFrame, spec: EventsSpec, dataset: str) -> ParsedEvents:
    """Numbered raw lines (one per data line) -> events and rejects."""
    checked = check_rows(parse_lines(drop_header_lines(lines, spec), spec), spec)
    return ParsedEvents(to_events(checked, spec, dataset), to_rejects(checked, dataset))
