"""``FORMAT.md`` of an export: the files' columns, the submission format and its rules, with
examples read from the files themselves (so the page is as deterministic as they are)."""

from __future__ import annotations

import json

from intent_spark.lake.files import filesystem

SUBMISSION_RULES = """\
## The submission: one row per target

Parquet (`.parquet`) or JSON Lines (`.jsonl`), one row per `target_id` of `tasks.parquet`:

| column | type | |
|---|---|---|
| `target_id` | string | from `tasks.parquet` |
| `items` | list of strings | item ids of `catalogue.parquet`, best first, each at most once |
| `scores` | list of doubles, optional | the same length as `items`, never rising; equal scores tie |
| `dataset`, `split` | strings, optional | when present they must name this export's dataset and split |

Other columns are ignored. Submit with

    intent submit --dataset {dataset} --split {split} --lake LAKE --predictions FILE --name NAME

and the submission is a model named NAME in `ranks`, `metrics`, `intent report`, `intent compare`
and MLflow (its run records the file's sha256 and the lists' lengths).

How a list is scored:

- The rank of a target is the position of its item in the list (1 = first). Where `scores` are
  given, items with equal scores are one tie group and the rank is the expected position within
  it (positions 3, 4 and 5 tied: rank 4), as for the built-in models. An item absent from the
  list is *beyond the list*: it counts 0 at every K.
- Metrics at K up to the shortest list's length are exact; at K above it they are
  *unavailable*, never 0. Submit at least 100 items per target for every K the report shows.
  MRR is MRR@K: 1/rank when the rank is within K.
- HORIZON's retrieval view reads the same lists: Recall@K is 1 when the target is among the
  first K (HR@K), Precision@K is that hit over K.
- A target with no row counts as a miss at every K and is reported; `--strict` refuses the
  submission instead.

A row is rejected, with its reason in the rejects file that `intent submit` names and its
target then a miss, when: its `target_id` is unknown (or of another split); its target has more
than one row (every copy is rejected); an item repeats within its list; an item is not in the
catalogue; the list is empty or longer than the catalogue; `scores` has another length, rises, or
holds a null, NaN or infinity; `dataset` or `split` name another; or a field has the wrong type. A
JSON Lines line holding `NaN` or `Infinity` (what Python's `json.dumps` writes for
`float("nan")`; `allow_nan=False` refuses it) is rejected as not JSON. Each kind of fault is one
line of `intent submit`'s output with its count and an example, naming a JSON Lines file's line
or a Parquet file's row (1 = the first).

A file is refused whole, in one line, with nothing scored or written, when it is empty, holds no
rows, is compressed (gzip, zstd, bzip2, xz, zip: submit the `.parquet` or `.jsonl` itself;
Parquet compresses its own columns), is cut short or is not Parquet (a `.parquet` without its
footer, a Parquet file named `.jsonl`), has no line that is a JSON object, or has a Parquet
column of the wrong type. `--strict` makes any rejected row or missing target an error, named
kind by kind: nothing is scored (no ranks, no `submissions` row, no MLflow run), and the
rejects file is written so that you can read every reason.

What a submission costs grows with its list items, rows times list length: every item is
checked against the catalogue and within its list, and the target is looked up in its list,
each in one pass. On two cores, 14,217 lists of 20 items took 24 s and lists of the whole
569-item catalogue 52 s, Spark's start included; beyond the start, about 1 s per million list
items (306,402 lists of 100 items: 64 s). Lists of 100 items give every K the report shows;
longer lists cost more and change nothing.
"""


def _first_row(path: str) -> dict:
    import pyarrow.parquet as pq

    fs, inside = filesystem(path)
    with fs.open_input_file(inside) as source:
        parquet = pq.ParquetFile(source)
        if parquet.metadata.num_rows == 0:
            return {}
        return parquet.read_row_group(0).slice(0, 1).to_pylist()[0]


def _first_items(path: str, n: int) -> list[str]:
    import pyarrow.parquet as pq

    fs, inside = filesystem(path)
    with fs.open_input_file(inside) as source:
        parquet = pq.ParquetFile(source)
        if parquet.metadata.num_rows == 0:
            return []
        return parquet.read_row_group(0, columns=["item_id"]).column(0).to_pylist()[:n]


def _shown(value) -> str:
    """A value of the example task, long lists cut to their last three entries."""
    if isinstance(value, list) and len(value) > 3:
        return f"[... {len(value) - 3} more, " + ", ".join(_shown(v) for v in value[-3:]) + "]"
    if isinstance(value, list):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    if hasattr(value, "isoformat"):
        return value.isoformat(sep=" ")
    return json.dumps(value) if isinstance(value, str) else str(value)


def format_text(
    dataset: str,
    split: str,
    folder: str,
    tasks: int,
    items: int,
    train_events: int,
    context: int,
    amounts: bool,
) -> str:
    task = _first_row(f"{folder}/tasks.parquet")
    examples = _first_items(f"{folder}/catalogue.parquet", 3)
    amount_rows = (
        ["| `context_amounts` | list of doubles | the amount of each context event |"] if amounts else []
    )
    lines = [
        f"# {dataset}, {split} split: the benchmark's tasks",
        "",
        f"{tasks:,} tasks, a catalogue of {items:,} items and {train_events:,} training events. "
        "Rank the whole catalogue for every task; learn only from `train.parquet`.",
        "",
        "## `tasks.parquet`: one row per target, ordered by user and time",
        "",
        "| column | type | |",
        "|---|---|---|",
        "| `target_id` | string | the name a submission answers, stable across exports |",
        "| `dataset`, `split` | string | |",
        "| `user_id` | string | |",
        "| `ts` | timestamp (UTC) | when the target event happened |",
        f"| `context_items` | list of strings | the user's events before the target, oldest first, the last {context} |",
        "| `context_ts` | list of timestamps | their times |",
        "| `context_event_types` | list of strings | their event types |",
        *amount_rows,
        "",
        "The target item is never in the row, nor whether it is new (that is part of the answer); the "
        "context holds no event at or after the target. Earlier events of the target's item are context "
        "like any other.",
        "",
        "## `catalogue.parquet`: the items a list may hold",
        "",
        "`item_id`, `title`, `category`, `brand`, `tokens` (metadata tokens such as `brand:acme`) and "
        "`train_count` (its events in `train.parquet`; 0 for an item new in this period).",
        "",
        "## `train.parquet`: what a model may learn from",
        "",
        "`user_id`, `item_id`, `ts`, `event_type`"
        + (", `amount`" if amounts else "")
        + ": the known users' events before the cutoff, ordered by user and time.",
        "",
        SUBMISSION_RULES.format(dataset=dataset, split=split),
    ]
    if task:
        example = {key: _shown(value) for key, value in task.items()}
        lines += ["## Example", "", "The first task of `tasks.parquet`:", ""]
        lines += [f"    {key}: {value}" for key, value in example.items()]
        answer = {
            "target_id": task["target_id"],
            "items": examples,
            "scores": [3.0, 2.5, 2.5][: len(examples)],
        }
        lines += [
            "",
            "and a submission row for it in JSON Lines (the last two items tie: a target at either "
            "position gets rank 2.5):",
            "",
            f"    {json.dumps(answer)}",
            "",
        ]
    return "\n".join(lines) + "\n"
