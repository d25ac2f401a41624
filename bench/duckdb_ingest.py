"""Single-node reference of the ingest stage in DuckDB, for the pipeline benchmark.

Reads a source's raw CSV event files and writes, in one streaming pass of DuckDB SQL, what
``intent_spark.ingest.ingest_source`` writes for them: the events (user, item, time, event
type, amount), the rejects with the same reasons, and the distinct items, all as Parquet. Every
data line ends in exactly one of the two, as in Spark:

- a line DuckDB's CSV reader cannot split into the source's columns (too few or too many
  fields, bytes that are not UTF-8) is a reject from its ``reject_errors`` table, with Spark's
  reason for it;
- every other line goes through Spark's checks in Spark's order (a header line repeated in the
  data, a blank user, item or time, a time that does not parse with the conf's pattern, a
  non-numeric amount, a blank action): the first that fails is the line's reason.

    .venv/bin/python bench/duckdb_ingest.py --raw RAW_DIR --out DIR [--lake LAKE]

With ``--lake`` it also counts Spark's ``events`` (per event type), ``rejects`` (per reason) and
``items`` of the dataset and prints every difference (exit status 1 when there is one).

What it leaves out, and so the ratio to Spark favours DuckDB: ``seq`` (the file and line of
every event: DuckDB's parallel CSV reader numbers only the lines it rejects), item tokens, the
per-file ``ingest_files`` reconciliation and the Delta commits. What it mirrors is the source
conf's CSV features that REES46 uses (a header line, a user, item and time column, a Spark time
pattern, an action column, an amount); any other feature (``user_with``, ``time.parts``, epoch
times, signals, overrides, id padding, currency amounts) is refused rather than imitated.
Empty lines are not reproduced (Spark rejects them as "empty line"; generated files have none).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import duckdb

from intent_spark.core.sources import EventsSpec, SourceConf, load_source
from intent_spark.ingest.files import find_files

# Spark datetime pattern letters -> strptime directives (the ones source confs use).
_PATTERN = {"yyyy": "%Y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M", "ss": "%S", "SSSSSS": "%f"}


@dataclass(frozen=True)
class DuckIngest:
    """What the reference wrote: counts per event type and per reject reason, and the items."""

    events: int
    rejects: int
    items: int
    event_types: dict[str, int]
    reasons: dict[str, int]
    seconds: float


def strptime_format(pattern: str) -> str:
    """A Spark datetime pattern (``yyyy-MM-dd HH:mm:ss 'UTC'``) as a strptime format."""
    out, i = [], 0
    while i < len(pattern):
        if pattern[i] == "'":  # a quoted literal
            end = pattern.index("'", i + 1)
            out.append(pattern[i + 1 : end].replace("%", "%%"))
            i = end + 1
            continue
        for letters, directive in _PATTERN.items():
            if pattern.startswith(letters, i):
                out.append(directive)
                i += len(letters)
                break
        else:
            if pattern[i].isalpha():
                raise NotImplementedError(f"time pattern {pattern!r}: letter {pattern[i]!r} is not mirrored")
            out.append(pattern[i])
            i += 1
    return "".join(out)


def _check_mirrored(spec: EventsSpec) -> None:
    unsupported = {
        "format (csv only)": spec.format != "csv",
        "user_with": bool(spec.user_with),
        "time.parts": bool(spec.time.parts),
        "epoch times": spec.time.format is None,
        "action signals or constant": spec.action.column is None,
        "action overrides": bool(spec.action.overrides),
        "id_pad": spec.id_pad > 0,
        "currency amounts": spec.amount_format == "currency",
        "numeric fields": bool(spec.numeric),
        "attributes": bool(spec.attributes),
    }
    refused = [name for name, used in unsupported.items() if used]
    if refused:
        raise NotImplementedError(f"the DuckDB ingest reference does not mirror: {', '.join(refused)}")


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _blank(column: str) -> str:
    return f"({_q(column)} IS NULL OR trim({_q(column)}) = '')"


def _has_header(path: str, header: str) -> bool:
    """Whether the file's first line is the header line Spark drops (``header: auto``)."""
    with open(path, "rb") as handle:
        first = handle.readline().rstrip(b"\n").decode("utf-8", "replace")
    return first.rstrip(" ") == header


def _scan(files: list[str], spec: EventsSpec, header: bool) -> str:
    columns = "{" + ", ".join(f"{_lit(c)}: 'VARCHAR'" for c in spec.columns) + "}"
    listed = "[" + ", ".join(_lit(f) for f in files) + "]"
    return (
        f"read_csv({listed}, columns = {columns}, header = {str(header).lower()}, "
        f"delim = {_lit(spec.delimiter)}, quote = '\"', escape = '\"', auto_detect = false, "
        "ignore_errors = true, store_rejects = true, filename = true)"
    )


def checked_lines_sql(files_by_header: dict[bool, list[str]], spec: EventsSpec) -> str:
    """One row per line DuckDB could split: the event columns and ``reason``/``field`` (null
    for a good line), checks in ``intent_spark.ingest.events.check_rows`` order."""
    scans = " UNION ALL ".join(
        f"SELECT * FROM {_scan(files, spec, has)}" for has, files in files_by_header.items() if files
    )
    time_column = spec.time.column
    ts = f"try_strptime(trim({_q(time_column)}), {_lit(strptime_format(str(spec.time.format)))})"
    amount = f"TRY_CAST(trim({_q(spec.amount)}) AS DOUBLE)" if spec.amount else "CAST(NULL AS DOUBLE)"
    checks: list[tuple[str, str | None, str]] = [
        (" AND ".join(f"{_q(c)} = {_lit(c)}" for c in spec.columns), None, "duplicate header line"),
        (_blank(spec.user), spec.user, "missing user id"),
        (_blank(spec.item), spec.item, "missing item id"),
        (_blank(time_column), time_column, "missing timestamp"),
        ("_ts IS NULL", time_column, f"unparseable timestamp (expected format {spec.time.format})"),
    ]
    if spec.amount:
        checks.append((f"NOT {_blank(spec.amount)} AND _amount IS NULL", spec.amount, "non-numeric amount"))
    action = str(spec.action.column)
    checks.append((_blank(action), action, "missing action"))
    reason = "CASE " + " ".join(f"WHEN {cond} THEN {_lit(text)}" for cond, _, text in checks) + " END"
    field = (
        "CASE _reason "
        + " ".join(f"WHEN {_lit(text)} THEN {_lit(f)}" for _, f, text in checks if f is not None)
        + " END"
    )
    return f"""
        SELECT *, {field} AS _field FROM (
            SELECT *, {reason} AS _reason FROM (
                SELECT *, {ts} AS _ts, {amount} AS _amount FROM ({scans})
            )
        )"""


def run_duckdb_ingest(
    raw_root: str | Path, out: str | Path, conf: SourceConf, *, threads: int | None = None
) -> DuckIngest:
    """Events, rejects and items of one source's raw files as Parquet under ``out`` (replaced),
    with their counts; the seconds include reading, checking, writing and counting."""
    spec = conf.events
    _check_mirrored(spec)
    out = Path(out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    started = time.monotonic()
    files = [f.removeprefix("file://") for f in find_files(str(raw_root), spec.files, "event-log")]
    header = spec.delimiter.join(spec.columns)
    files_by_header: dict[bool, list[str]] = {True: [], False: []}
    for path in files:
        has = spec.header == "true" or (spec.header == "auto" and _has_header(path, header))
        files_by_header[has].append(path)
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.execute(f"SET temp_directory = {_lit(str(out / 'tmp'))}")  # spills stay in out
        if threads is not None:
            con.execute(f"SET threads = {int(threads)}")
        checked = checked_lines_sql(files_by_header, spec)
        item_fields = ", ".join(f"{_q(source)} AS {_q(name)}" for name, source in spec.item_fields.items())
        raw = f"concat_ws({_lit(spec.delimiter)}, {', '.join(_q(c) for c in spec.columns)})"
        event_type = f"lower(trim({_q(str(spec.action.column))}))"
        amount = "_amount" if spec.amount else "CAST(NULL AS DOUBLE)"
        # One pass: good lines and line rejects to two Parquet folders.
        con.execute(
            f"""COPY (
                SELECT trim({_q(spec.user)}) AS user_id, trim({_q(spec.item)}) AS item_id, _ts AS ts,
                    {event_type} AS event_type, {amount} AS amount,
                    {item_fields + "," if item_fields else ""}
                    filename AS source_file, _reason AS reason, _field AS field,
                    CASE WHEN _reason IS NOT NULL THEN {raw} END AS raw,
                    _reason IS NOT NULL AS rejected
                FROM ({checked})
            ) TO {_lit(str(out / "lines"))} (FORMAT parquet, PARTITION_BY (rejected))"""
        )
        # Lines the reader could not split (one row per failed column: one per line kept).
        malformed = f"malformed CSV row: expected {len(spec.columns)} fields separated by {spec.delimiter!r}"
        con.execute(
            f"""COPY (
                SELECT s.file_path AS source_file, e.line,
                    CASE WHEN bool_or(e.error_type = 'INVALID ENCODING') THEN 'invalid UTF-8 bytes in line'
                         ELSE {_lit(malformed)} END AS reason,
                    any_value(e.csv_line) AS raw
                FROM reject_errors e JOIN reject_scans s USING (scan_id, file_id)
                GROUP BY s.file_path, e.line
            ) TO {_lit(str(out / "unreadable.parquet"))} (FORMAT parquet)"""
        )
        events = f"read_parquet({_lit(str(out / 'lines' / 'rejected=false' / '*.parquet'))})"
        line_rejects = out / "lines" / "rejected=true"
        rejects = [f"SELECT reason FROM read_parquet({_lit(str(out / 'unreadable.parquet'))})"]
        if line_rejects.is_dir():
            rejects.append(f"SELECT reason FROM read_parquet({_lit(str(line_rejects / '*.parquet'))})")
        if spec.item_fields:
            any_fields = ", ".join(f"any_value({_q(name)}) AS {_q(name)}" for name in spec.item_fields)
            items_sql = f"SELECT item_id, {any_fields} FROM {events} GROUP BY item_id"
        else:
            items_sql = f"SELECT DISTINCT item_id FROM {events}"
        con.execute(f"COPY ({items_sql}) TO {_lit(str(out / 'items.parquet'))} (FORMAT parquet)")
        event_types = dict(con.execute(f"SELECT event_type, count(*) FROM {events} GROUP BY 1").fetchall())
        reasons = dict(
            con.execute(f"SELECT reason, count(*) FROM ({' UNION ALL '.join(rejects)}) GROUP BY 1").fetchall()
        )
        (items,) = con.execute(
            f"SELECT count(*) FROM read_parquet({_lit(str(out / 'items.parquet'))})"
        ).fetchone()  # type: ignore[misc]
    finally:
        con.close()
    return DuckIngest(
        events=sum(event_types.values()),
        rejects=sum(reasons.values()),
        items=int(items),
        event_types={str(k): int(v) for k, v in sorted(event_types.items())},
        reasons={str(k): int(v) for k, v in sorted(reasons.items())},
        seconds=time.monotonic() - started,
    )


def spark_ingest_counts(spark: Any, lake: str, dataset: str) -> dict[str, Any]:
    """Spark's ingested tables of a dataset in the shape of ``DuckIngest`` (a few rows each)."""
    from pyspark.sql import functions as F

    from intent_spark.core import schema as S
    from intent_spark.lake.tables import read_table

    types = read_table(spark, lake, S.EVENTS, dataset).groupBy(S.EVENT_TYPE).count().collect()
    reasons = read_table(spark, lake, S.REJECTS, dataset).groupBy(S.REASON).count().collect()
    items = read_table(spark, lake, S.ITEMS, dataset).agg(F.count(F.lit(1))).first()[0]
    return {
        "events": sum(r["count"] for r in types),
        "rejects": sum(r["count"] for r in reasons),
        "items": int(items),
        "event_types": {r[S.EVENT_TYPE]: r["count"] for r in sorted(types, key=lambda r: r[0])},
        "reasons": {r[S.REASON]: r["count"] for r in sorted(reasons, key=lambda r: r[0])},
    }


def compare_ingest(duck: DuckIngest, spark: dict[str, Any]) -> list[str]:
    """Every difference in the counts (empty when they agree)."""
    differences = []
    mine = asdict(duck)
    for key in ("events", "rejects", "items"):
        if mine[key] != spark[key]:
            differences.append(f"{key}: duckdb {mine[key]:,} spark {spark[key]:,}")
    for key in ("event_types", "reasons"):
        for name in sorted(set(mine[key]) | set(spark[key])):
            if mine[key].get(name) != spark[key].get(name):
                differences.append(
                    f"{key} {name!r}: duckdb {mine[key].get(name)} spark {spark[key].get(name)}"
                )
    return differences


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raw", required=True, help="the release folder (as for `intent ingest --raw`)")
    parser.add_argument("--out", required=True, help="folder for the Parquet outputs (replaced)")
    parser.add_argument("--dataset", default="rees46")
    parser.add_argument("--threads", type=int, default=None, help="DuckDB threads (default: all cores)")
    parser.add_argument("--lake", default=None, help="compare with Spark's events, rejects and items here")
    args = parser.parse_args(argv)
    found = run_duckdb_ingest(args.raw, args.out, load_source(args.dataset), threads=args.threads)
    report: dict[str, Any] = {"dataset": args.dataset, **asdict(found), "seconds": round(found.seconds, 3)}
    if args.lake:
        from intent_spark.lake.session import build_session

        spark = build_session("intent-duckdb-ingest-compare", {"spark.ui.enabled": "false"})
        report["differences"] = compare_ingest(found, spark_ingest_counts(spark, args.lake, args.dataset))
    print(json.dumps(report, indent=2))
    return 1 if report.get("differences") else 0


if __name__ == "__main__":
    raise SystemExit(main())
