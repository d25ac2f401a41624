"""Item metadata and user profiles: from their own files, and items seen only in events."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.sources import EventsSpec, ItemsSpec, UsersSpec
from intent_spark.ingest.events import pad_id, raw_field
from intent_spark.ingest.tokens import combine_tokens, field_token, list_tokens, word_tokens


def read_table_file(
    spark: SparkSession, files: list[str], spec: ItemsSpec | UsersSpec, has_header: bool
) -> DataFrame:
    """Read a metadata or profile file with Spark's own readers (quoted newlines, other
    encodings), as its spec says; ``has_header``: whether its first line names the columns."""
    fmt, columns, delimiter, encoding = spec.format, spec.columns, spec.delimiter, spec.encoding
    json_schema = getattr(spec, "json_schema", None)  # profiles: CSV only, one line per user
    multiline, leading_space = getattr(spec, "multiline", False), getattr(spec, "leading_space", False)
    if fmt == "jsonl":
        return spark.read.schema(json_schema).json(files) if json_schema else spark.read.json(files)
    reader = (
        spark.read.option("header", has_header)
        .option("sep", delimiter)
        .option("encoding", encoding)
        .option("multiLine", multiline)
        .option("escape", '"')
        .option("ignoreLeadingWhiteSpace", leading_space)
        .option("mode", "PERMISSIVE")
    )
    if columns and not has_header:
        schema = ", ".join(f"`{c}` string" for c in columns)
        return reader.schema(schema).csv(files)
    return reader.option("inferSchema", False).csv(files)


def items_from_file(df: DataFrame, spec: ItemsSpec, dataset: str) -> DataFrame:
    """One row per item key of a metadata file, with its tokens (ITEMS_SCHEMA)."""

    def col_or_null(name: str | None) -> Column:
        return F.trim(F.col(f"`{name}`").cast("string")) if name else F.lit(None).cast("string")

    parts = [field_token(f, F.col(f"`{f}`")) for f in spec.field_tokens]
    parts += [list_tokens(f, F.col(f"`{f}`"), sep) for f, sep in spec.list_tokens.items()]
    parts += [word_tokens(F.col(f"`{f}`").cast("string")) for f in spec.text_tokens]
    rows = df.select(
        pad_id(F.col(f"`{spec.key}`").cast("string"), spec.id_pad).alias(S.ITEM_ID),
        col_or_null(spec.title).alias(S.TITLE),
        col_or_null(spec.category).alias(S.CATEGORY),
        col_or_null(spec.brand).alias(S.BRAND),
        combine_tokens(parts).alias(S.TOKENS),
    ).where(F.col(S.ITEM_ID).isNotNull() & (F.col(S.ITEM_ID) != ""))
    # A key listed twice keeps its smallest row, so the result never depends on file order.
    best = F.min(F.struct(S.TITLE, S.CATEGORY, S.BRAND, S.TOKENS)).alias("_best")
    return rows.groupBy(S.ITEM_ID).agg(best).select(F.lit(dataset).alias(S.DATASET), S.ITEM_ID, "_best.*")


def items_from_events(checked_events: DataFrame, spec: EventsSpec, dataset: str) -> DataFrame:
    """One row per item id in the events, its fields from the item's latest event that has them.

    ``checked_events`` is the parsed good rows with raw fields and ``seq`` (REES46 carries its
    category and brand on every event, so this is its only item metadata).
    """

    def latest(name: str | None) -> Column:
        if not name:
            return F.lit(None).cast("string")
        value = F.when(F.trim(raw_field(name)) != "", F.trim(raw_field(name)))
        return F.max_by(value, F.when(value.isNotNull(), F.col(S.SEQ)))

    token_fields = list(dict.fromkeys(spec.item_tokens))
    aggregated = checked_events.groupBy(S.ITEM_ID).agg(
        latest(spec.item_fields.get("title")).alias(S.TITLE),
        latest(spec.item_fields.get("category")).alias(S.CATEGORY),
        latest(spec.item_fields.get("brand")).alias(S.BRAND),
        *[latest(f).alias(f"_tok_{f}") for f in token_fields],
    )
    parts = [field_token(f, F.col(f"_tok_{f}")) for f in token_fields]
    if spec.item_fields.get("title"):
        parts.append(word_tokens(F.col(S.TITLE)))
    return aggregated.select(
        F.lit(dataset).alias(S.DATASET),
        S.ITEM_ID,
        S.TITLE,
        S.CATEGORY,
        S.BRAND,
        combine_tokens(parts).alias(S.TOKENS),
    )


def merge_items(event_items: DataFrame, file_items: list[DataFrame]) -> DataFrame:
    """The catalogue: every item in the events or in a metadata file, fields from the file first."""
    merged = event_items
    for extra in file_items:
        e, f = merged.alias("e"), extra.alias("f")
        merged = e.join(f, [S.DATASET, S.ITEM_ID], "full_outer").select(
            S.DATASET,
            S.ITEM_ID,
            *[F.coalesce(F.col(f"f.{c}"), F.col(f"e.{c}")).alias(c) for c in (S.TITLE, S.CATEGORY, S.BRAND)],
            combine_tokens(
                [
                    F.coalesce(F.col(f"f.{S.TOKENS}"), F.array().cast("array<string>")),
                    F.coalesce(F.col(f"e.{S.TOKENS}"), F.array().cast("array<string>")),
                ]
            ).alias(S.TOKENS),
        )
    return merged


def users_from_file(df: DataFrame, spec: UsersSpec, dataset: str) -> DataFrame:
    """One row per user key, every other (or each listed) column in ``attributes``."""
    names = list(spec.attributes) or [c for c in df.columns if c != spec.key and not c.startswith("_c")]
    pairs = [x for n in names for x in (F.lit(n), F.trim(F.col(f"`{n}`").cast("string")))]
    attributes = F.map_filter(F.create_map(*pairs), lambda k, v: v.isNotNull() & (v != ""))
    rows = df.select(
        F.trim(F.col(f"`{spec.key}`").cast("string")).alias(S.USER_ID), attributes.alias("_a")
    ).where(F.col(S.USER_ID).isNotNull() & (F.col(S.USER_ID) != ""))
    return (
        rows.groupBy(S.USER_ID)
        .agg(F.min(F.to_json("_a")).alias("_json"))
        .select(
            F.lit(dataset).alias(S.DATASET),
            S.USER_ID,
            F.from_json("_json", "map<string,string>").alias(S.USER_ATTRIBUTES),
        )
    )
