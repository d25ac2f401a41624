"""Item metadata tokens for content models: lower-cased words and ``field:value`` tokens."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

WORD_SPLIT = r"[^\p{L}\p{N}]+"
MIN_WORD_LENGTH = 2


def _clean(value: Column) -> Column:
    return F.regexp_replace(F.lower(F.trim(value)), r"\s+", "_")


def word_tokens(text: Column) -> Column:
    """Words of a free-text field: lower-cased, split on non-letters/digits, length >= 2."""
    words = F.split(F.lower(F.coalesce(text, F.lit(""))), WORD_SPLIT)
    return F.filter(words, lambda w: F.length(w) >= MIN_WORD_LENGTH)


def field_token(name: str, value: Column) -> Column:
    """``name:value`` for a categorical field; an empty array when the value is blank."""
    cleaned = _clean(value.cast("string"))
    return F.when(
        cleaned.isNotNull() & (cleaned != ""), F.array(F.concat(F.lit(f"{name}:"), cleaned))
    ).otherwise(F.array().cast("array<string>"))


def list_tokens(name: str, value: Column, separator: str) -> Column:
    """``name:value`` for each element of a list field (an array, or text split by separator)."""
    # a separator is a pattern (Spark 3.5's split takes it as text only)
    elements = value if separator == "" else F.split(F.coalesce(value, F.lit("")), separator)
    cleaned = F.transform(F.coalesce(elements, F.array().cast("array<string>")), _clean)
    kept = F.filter(cleaned, lambda e: e != "")
    return F.transform(kept, lambda e: F.concat(F.lit(f"{name}:"), e))


def combine_tokens(parts: list[Column]) -> Column:
    """Distinct, sorted tokens of all parts, so the array is deterministic."""
    if not parts:
        return F.array().cast("array<string>")
    return F.array_sort(F.array_distinct(F.concat(*parts)))
