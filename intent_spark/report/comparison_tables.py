"""``intent compare`` as text: one table per dataset, its models as rows and the metrics as
columns, headed by the dataset's name."""

from __future__ import annotations

import pandas as pd

WIDTH = 160  # a table wider than this wraps its metric columns into blocks
GAP = "  "


def comparison_tables(table: pd.DataFrame, width: int = WIDTH) -> str:
    """``compare_runs``'s frame (one row per ``dataset, model, run_id``, a column per metric) as a
    table per dataset, in the frame's order. A table keeps the metrics its runs have; the name
    parts all its columns share move to its heading (``hm: test ndcg_10``, columns
    ``known_past``, ...). Values have 4 decimals; a missing one is ``-``.

    Example::

        hm: test ndcg_10
        model       run       known_past  new_past_new
        popularity  0123abcd      0.1000        0.2500
    """
    blocks = []
    for dataset, runs in table.groupby(level="dataset", sort=False):
        runs = runs.dropna(axis=1, how="all")
        shared, names = shared_parts([str(c) for c in runs.columns])
        labels = [
            ["model", *runs.index.get_level_values("model")],
            ["run", *(str(r)[:8] for r in runs.index.get_level_values("run_id"))],
        ]
        values = [
            [name, *map(_number, runs[column])] for name, column in zip(names, runs.columns, strict=True)
        ]
        heading = f"{dataset}: {' '.join(shared)}" if shared else str(dataset)
        blocks.append("\n".join([heading, *_aligned(labels, values, width)]))
    return "\n\n".join(blocks)


def shared_parts(names: list[str]) -> tuple[list[str], list[str]]:
    """The dot-separated parts every name has in the same place, and the names without them.
    Names of different lengths share nothing; at least the last part stays (one name:
    ``test.known_past.ndcg_10`` -> ``test known_past`` and ``ndcg_10``)."""
    parts = [name.split(".") for name in names]
    if not parts or len({len(p) for p in parts}) > 1:
        return [], names
    same = [len({p[i] for p in parts}) == 1 for i in range(len(parts[0]))]
    if all(same):
        same[-1] = False
    shared = [part for part, s in zip(parts[0], same, strict=True) if s]
    return shared, [".".join(part for part, s in zip(p, same, strict=True) if not s) for p in parts]


def _number(value: float) -> str:
    return "-" if pd.isna(value) else f"{value:.4f}"


def _aligned(labels: list[list[str]], values: list[list[str]], width: int) -> list[str]:
    """The lines of a table: label columns left-aligned, value columns right-aligned, two spaces
    apart; value columns that overflow ``width`` go to a further block (after a blank line)
    that repeats the labels."""
    left = [[cell.ljust(max(map(len, column))) for cell in column] for column in labels]
    right = [[cell.rjust(max(map(len, column))) for cell in column] for column in values]
    base = sum(len(column[0]) for column in left) + len(GAP) * (len(left) - 1)
    blocks: list[list[list[str]]] = [[]]
    used = base
    for column in right:
        if blocks[-1] and used + len(GAP) + len(column[0]) > width:
            blocks.append([])
            used = base
        blocks[-1].append(column)
        used += len(GAP) + len(column[0])
    lines: list[str] = []
    for block in blocks:
        if lines:
            lines.append("")
        lines += [GAP.join(row).rstrip() for row in zip(*left, *block, strict=True)]
    return lines
