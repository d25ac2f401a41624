"""What differs between the Spark lines the benchmark runs on, 3.5 and 4.x: in this module only,
keyed on ``pyspark.__version__``. Everything else is written in expressions both lines have.

- Delta: Delta 3.x is built for Spark 3.5 on Scala 2.12; Delta 4.0 for Spark 4.0 on Scala 2.13;
  from Delta 4.1 on, one build per Spark line (``delta-spark_4.2_2.13``).
- ``is_valid_utf8`` is a Spark 4.0 function; on 3.5 a line is checked by encoding it again.
- ``StructType.fromDDL`` is Spark 4's; 3.5 parses a DDL schema through the active session.
- Spark 3.5's Python ``array_position`` and ``array_remove`` take only a literal value; the SQL
  functions take a column on both lines, so they are called by name.
- ANSI mode (``spark.sql.ansi.enabled``) is on by default from Spark 4.0 and off before: the
  session sets it on both lines (``ANSI_CONF``), and the ingest's number parsing does not depend
  on it (``intent_spark.ingest.events``).
"""

from __future__ import annotations

import pyspark
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

__all__ = [
    "ANSI_CONF",
    "SPARK_LINE",
    "array_position",
    "array_remove",
    "delta_artifact",
    "is_valid_utf8",
    "line_of",
    "struct_from_ddl",
]


def line_of(version: str) -> tuple[int, int]:
    """(major, minor) of a version string: ``"3.5.7"`` -> (3, 5)."""
    major, minor = (int(part) for part in version.split(".")[:2])
    return major, minor


SPARK_LINE = line_of(pyspark.__version__)

# The mode every expression of the benchmark was checked under (Spark 4's default), set on 3.5 too:
# overflow, division by zero and out-of-range indexes fail a stage rather than become nulls.
ANSI_CONF = {"spark.sql.ansi.enabled": "true"}


def delta_artifact(delta: str, spark: str) -> str:
    """Delta's Maven coordinates for a Delta version on a Spark version."""
    if line_of(delta) >= (4, 1):
        name = f"delta-spark_{'.'.join(map(str, line_of(spark)))}_2.13"
    elif line_of(delta) >= (4, 0):
        name = "delta-spark_2.13"
    else:
        name = "delta-spark_2.12"
    return f"io.delta:{name}:{delta}"


def is_valid_utf8(text: Column) -> Column:
    """Whether a string column's bytes are valid UTF-8. Spark 3.5 reads undecodable bytes as they
    are and decodes them as U+FFFD when it encodes: the bytes differ exactly where they are invalid."""
    if SPARK_LINE >= (4, 0):
        return F.is_valid_utf8(text)
    return text.cast("binary") == F.encode(text, "UTF-8")


def array_position(array: Column, value: Column) -> Column:
    """The 1-based position of ``value``'s first occurrence in ``array`` (0 where absent)."""
    return F.call_function("array_position", array, value)


def array_remove(array: Column, value: Column) -> Column:
    """``array`` without any element equal to ``value``."""
    return F.call_function("array_remove", array, value)


def struct_from_ddl(ddl: str) -> StructType:
    """A schema from its DDL text (``"a STRING, b DOUBLE"``)."""
    if SPARK_LINE >= (4, 0):
        return StructType.fromDDL(ddl)
    from pyspark.sql.types import _parse_datatype_string  # needs a running session, as ingest has

    parsed = _parse_datatype_string(ddl)
    assert isinstance(parsed, StructType), ddl
    return parsed
