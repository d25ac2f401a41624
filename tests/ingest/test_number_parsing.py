"""The ingest's number parsing: what each text becomes, worked out by hand, the same in both ANSI
modes (Spark 3.5's default is off, Spark 4's on; a bad cast under ANSI fails the job), and equal
to Spark 4's own ``try_cast`` where that exists, but for the forms the ingest rejects on purpose."""

from __future__ import annotations

import math

import pyspark
import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from intent_spark.ingest.events import parse_double, parse_long

LONG_CASES = {
    "42": 42,
    "+7": 7,
    "-0": 0,
    "007": 7,
    " 5 ": 5,
    "\t5": 5,
    "9223372036854775807": 2**63 - 1,
    "-9223372036854775808": -(2**63),
    "09223372036854775807": 2**63 - 1,  # a leading zero is no digit of the value
    "9223372036854775808": None,  # one past the largest long
    "-9223372036854775809": None,
    "99999999999999999999": None,
    "1.5": None,  # Spark's non-ANSI cast would give 1
    "1e3": None,
    "12a": None,
    "": None,
    "-": None,
    "+": None,
    None: None,
}

DOUBLE_CASES = {
    "1.5": 1.5,
    "-2e3": -2000.0,
    ".5": 0.5,
    "5.": 5.0,
    "  3 ": 3.0,
    "1E-2": 0.01,
    "1e400": math.inf,
    "inf": math.inf,
    "-Infinity": -math.inf,
    "NaN": math.nan,
    "abc": None,
    "1,5": None,
    "1.5.2": None,
    "e5": None,
    "": None,
    None: None,
}
# parsed by try_cast (Java's number syntax), rejected by the ingest as no plain decimal
REJECTED_ON_PURPOSE = {"1.5d", "0x1p3"}


def _parsed(spark, cases, parse, ansi: str) -> list:
    schema = StructType([StructField("text", StringType())])
    frame = spark.createDataFrame([(text,) for text in cases], schema)
    before = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", ansi)
    try:
        return [row.value for row in frame.select(parse(F.col("text")).alias("value")).collect()]
    finally:
        spark.conf.set("spark.sql.ansi.enabled", before)


def _same(found, expected) -> bool:
    if isinstance(expected, float) and math.isnan(expected):
        return isinstance(found, float) and math.isnan(found)
    return found == expected


@pytest.mark.parametrize("ansi", ["true", "false"])
def test_integer_text_becomes_a_long_or_null_in_both_ansi_modes(spark, ansi):
    found = _parsed(spark, LONG_CASES, parse_long, ansi)
    wrong = {t: (f, e) for (t, e), f in zip(LONG_CASES.items(), found, strict=True) if not _same(f, e)}
    assert not wrong


@pytest.mark.parametrize("ansi", ["true", "false"])
def test_decimal_text_becomes_a_double_or_null_in_both_ansi_modes(spark, ansi):
    cases = {**DOUBLE_CASES, **dict.fromkeys(REJECTED_ON_PURPOSE)}
    found = _parsed(spark, cases, parse_double, ansi)
    wrong = {t: (f, e) for (t, e), f in zip(cases.items(), found, strict=True) if not _same(f, e)}
    assert not wrong


@pytest.mark.skipif(pyspark.__version__ < "4", reason="Column.try_cast is Spark 4's")
def test_the_parsing_equals_spark_try_cast_but_for_the_forms_rejected_on_purpose(spark):
    texts = [t for t in (*LONG_CASES, *DOUBLE_CASES, *REJECTED_ON_PURPOSE) if t is not None]
    frame = spark.createDataFrame([(t,) for t in texts], "text string")
    text = F.col("text")
    rows = frame.select(
        "text",
        parse_long(text).alias("ours_long"),
        text.try_cast("long").alias("spark_long"),
        parse_double(text).alias("ours_double"),
        text.try_cast("double").alias("spark_double"),
    ).collect()
    differ = [
        row.text
        for row in rows
        if row.ours_long != row.spark_long
        or not (_same(row.ours_double, row.spark_double) or row.text in REJECTED_ON_PURPOSE)
    ]
    assert not differ
    assert any(row.spark_double is not None for row in rows if row.text in REJECTED_ON_PURPOSE)
