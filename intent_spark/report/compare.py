"""The report's "beyond the paper" part: protocol table and agreement, leaks, seed
spread, cutoff sensitivity, transfer grid and KuaiRand's all-signals mode.

Everything here reads small tables: ``metrics`` rows, the transfers table, the CSV files of
``compare.py`` and, for the agreement intervals, one Spark aggregate over ``user_metrics``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.datasets import PROTOCOLS, DatasetRef, is_transfer, parse_dataset
from intent_spark.core.runconf import CompareConf
from intent_spark.lake.context import Lake
from intent_spark.lake.figures import interval_bars, pyplot, save_figure
from intent_spark.lake.reports import read_compare_csv
from intent_spark.report.section import Section
from intent_spark.split.protocols import CELL_LABELS, PROTOCOL_CELLS

PRIMARY = ("ndcg", 10)


def _primary_test(metrics: pd.DataFrame) -> pd.DataFrame:
    metric, k = PRIMARY
    return metrics[(metrics[S.SPLIT] == S.TEST) & (metrics["metric"] == metric) & (metrics["k"] == k)]


def own_primary_rows(metrics: pd.DataFrame, datasets: list[str]) -> pd.DataFrame:
    """Test NDCG@10 rows of ``datasets`` for the models trained on them (no ``model@source``)."""
    rows = _primary_test(metrics)
    return rows[rows[S.DATASET].isin(datasets) & ~rows[S.MODEL].map(is_transfer)]


def _score(row) -> str:
    if pd.isna(row["ci_low"]):
        return f"{row['value']:.3f}"
    return f"{row['value']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]"


def settings_of(metrics: pd.DataFrame, dataset: str, conf: CompareConf) -> list[str]:
    """The INTENT test cells, then each protocol's cells, in a fixed order."""
    present = set(metrics.loc[metrics[S.DATASET].isin([dataset, *conf.protocol_variants(dataset)]), S.CELL])
    ordered = [*S.CELLS, *dict.fromkeys(c for p in conf.protocols for c in sorted(set(PROTOCOL_CELLS[p])))]
    return [c for c in ordered if c in present]


def protocol_scores(metrics: pd.DataFrame, dataset: str, conf: CompareConf) -> pd.DataFrame:
    """Models down, settings (INTENT cells, leave-last-out, HORIZON 1a-1d) across: NDCG@10."""
    rows = own_primary_rows(metrics, [dataset, *conf.protocol_variants(dataset)])
    rows = rows.assign(text=rows.apply(_score, axis=1))
    wide = rows.pivot_table(index=S.MODEL, columns=S.CELL, values="text", aggfunc="first")
    return wide.reindex(columns=settings_of(metrics, dataset, conf)).fillna("")


def leak_table(leaks: pd.DataFrame, dataset: str, conf: CompareConf) -> pd.DataFrame:
    """Per setting: targets, and those some training event follows in time."""
    if leaks.empty:
        return pd.DataFrame()
    mine = leaks[leaks[S.DATASET].isin([dataset, *conf.protocol_variants(dataset)])].copy()
    order = {c: i for i, c in enumerate([*S.CELLS, *CELL_LABELS])}
    mine = mine.sort_values(S.CELL, key=lambda cells: cells.map(order))
    mine["leaked share"] = (mine["n_leaked"] / mine["n_targets"]).map(lambda v: f"{v:.1%}")
    mine["setting"] = mine[S.CELL].map(lambda c: CELL_LABELS.get(c, f"INTENT {c}"))
    return mine[["setting", "n_targets", "n_leaked", "leaked share"]].set_index("setting")


def agreement_table(agreement: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """The agreement stage's Kendall tau-b of each protocol setting's model order against each
    INTENT deployment cell's, with its paired user-bootstrap 95% interval, as text."""
    if agreement.empty or dataset not in set(agreement[S.DATASET]):
        return pd.DataFrame()
    table = agreement[agreement[S.DATASET] == dataset].copy()
    table["tau"] = table.apply(
        lambda r: (
            "undefined (one side all tied)"
            if pd.isna(r["tau"])
            else f"{r['tau']:+.2f} [{r['ci_low']:+.2f}, {r['ci_high']:+.2f}]"
        ),
        axis=1,
    )
    return table[["setting_a", "setting_b", "n_models", "tau", "models_a", "models_b"]].rename(
        columns={"setting_a": "protocol setting", "setting_b": "INTENT cell", "models_a": "order (protocol)",
                 "models_b": "order (INTENT)"}
    ).set_index("protocol setting")  # fmt: skip


def seed_spread(metrics: pd.DataFrame, dataset: str, split_seed: int, conf: CompareConf) -> pd.DataFrame:
    """Every test cell's NDCG@10 under each holdout seed, with mean, spread and the typical
    width of one split's 95% interval."""
    variants: dict[str, int] = {
        dataset: split_seed,
        **{v: int(v.seed or 0) for v in conf.seed_variants(dataset)},
    }
    rows = own_primary_rows(metrics, list(variants))
    if rows[S.DATASET].nunique() < 2:
        return pd.DataFrame()
    rows = rows.assign(seed=rows[S.DATASET].map(variants), width=rows["ci_high"] - rows["ci_low"])
    out = []
    for (cell, model), group in rows.groupby([S.CELL, S.MODEL], sort=False):
        values = group.sort_values("seed")
        entry = {"cell": cell, "model": model}
        entry.update({f"seed {s}": f"{v:.3f}" for s, v in zip(values["seed"], values["value"], strict=True)})
        spread = values["value"].std(ddof=1) if len(values) > 1 else float("nan")
        entry["mean ± sd"] = f"{values['value'].mean():.3f} ± {spread:.3f}"
        entry["range"] = f"{values['value'].max() - values['value'].min():.3f}"
        entry["95% interval width (median)"] = f"{values['width'].median():.3f}"
        out.append(entry)
    order = {c: i for i, c in enumerate(S.CELLS)}
    table = pd.DataFrame(out)
    return table.sort_values(
        ["cell", "model"], key=lambda s: s.map(order) if s.name == "cell" else s
    ).set_index("cell")


def sensitivity_table(sensitivity: pd.DataFrame, dataset: str) -> pd.DataFrame:
    if sensitivity.empty:
        return pd.DataFrame()
    mine = sensitivity[sensitivity[S.DATASET] == dataset].drop(columns=[S.DATASET])
    mine = mine.assign(share=mine["share"].round(3), horizon_days=mine["horizon_days"].round(1))
    return mine.fillna({"cutoff": "none (no admissible boundary)"}).set_index("variant")


def transfer_grid(metrics: pd.DataFrame, transfers: pd.DataFrame, conf: CompareConf) -> pd.DataFrame:
    """One row per (source, target) and one for the target's own SASRec-F: NDCG@10 per target
    test cell, the share of targets the source's tokens reach, and the shared cutoffs."""
    rows = _primary_test(metrics)
    out = []
    for source, target in conf.transfer:
        mine = rows[rows[S.DATASET] == target]
        reach = transfers[(transfers[S.DATASET] == target) & (transfers[S.SOURCE] == source)]
        shared = reach["shared_cutoffs"].iloc[0] if len(reach) else []
        for label, model in ((f"{source} → {target}", f"sasrec_f@{source}"), (f"{target} (own)", "sasrec_f")):
            scored = mine[mine[S.MODEL] == model]
            entry = {"trained on → scored on": label}
            entry.update({r[S.CELL]: _score(r) for _, r in scored.iterrows()})
            if model != "sasrec_f":
                n, hit = reach["n_targets"].sum(), reach["n_with_tokens"].sum()
                entry["targets reached by tokens"] = f"{hit / n:.1%}" if n else "-"
                entry["shared admissible cutoffs"] = (
                    ", ".join(f"{pd.Timestamp(c):%Y-%m}" for c in shared) or "none"
                )
            out.append(entry)
    if not out:
        return pd.DataFrame()
    table = pd.DataFrame(out)
    cells = [c for c in S.CELLS if c in table.columns]
    rest = [c for c in table.columns if c not in cells and c != "trained on → scored on"]
    return table[["trained on → scored on", *cells, *rest]].fillna("").set_index("trained on → scored on")


def all_signals_table(metrics: pd.DataFrame, one: str, every: str) -> pd.DataFrame:
    """The same models on one event per impression and on every signal, cell by cell."""
    rows = own_primary_rows(metrics, [one, every])
    rows = rows.assign(
        text=rows.apply(_score, axis=1),
        mode=rows[S.DATASET].map({one: "one per impression", every: "all signals"}),
    )
    wide = rows.pivot_table(index=[S.CELL, S.MODEL], columns="mode", values="text", aggfunc="first")
    counts = rows.pivot_table(index=[S.CELL, S.MODEL], columns="mode", values="n_targets", aggfunc="first")
    wide = wide.join(counts.add_prefix("targets, "))
    order = {c: i for i, c in enumerate(S.CELLS)}
    table = wide.reset_index().sort_values(
        [S.CELL, S.MODEL], key=lambda s: s.map(order) if s.name == S.CELL else s
    )
    modes = ["one per impression", "all signals"]
    return table.set_index(S.CELL)[[S.MODEL, *modes, *(f"targets, {m}" for m in modes)]]


# --- figures --------------------------------------------------------------------------------


def plot_protocols(metrics: pd.DataFrame, dataset: str, conf: CompareConf, path: Path) -> Path:
    """NDCG@10 per setting and model with 95% intervals: the same models under each protocol."""
    plt = pyplot()
    rows = own_primary_rows(metrics, [dataset, *conf.protocol_variants(dataset)])
    settings = settings_of(metrics, dataset, conf)
    models = sorted(rows[S.MODEL].unique())
    fig, ax = plt.subplots(figsize=(12, 4.4))
    interval_bars(ax, rows, S.CELL, settings, models)
    ax.set_xlabel("INTENT cell or protocol setting")
    ax.set_ylabel("NDCG@10 (test, 95% interval)")
    ax.set_title(f"{dataset}: one set of models under three protocols")
    return save_figure(fig, path, f"{dataset} protocols")


def plot_seed_spread(
    metrics: pd.DataFrame, dataset: str, split_seed: int, conf: CompareConf, path: Path
) -> Path:
    """Each seed's NDCG@10 per cell and model (one dot per seed)."""
    plt = pyplot()
    variants: dict[str, int] = {
        dataset: split_seed,
        **{v: int(v.seed or 0) for v in conf.seed_variants(dataset)},
    }
    rows = own_primary_rows(metrics, list(variants))
    cells = [c for c in S.CELLS if c in set(rows[S.CELL])]
    models = sorted(rows[S.MODEL].unique())
    width = 0.8 / max(len(models), 1)
    fig, ax = plt.subplots(figsize=(11, 4.2))
    for j, model in enumerate(models):
        mine = rows[rows[S.MODEL] == model]
        x = mine[S.CELL].map({c: i for i, c in enumerate(cells)}) + (j - (len(models) - 1) / 2) * width
        ax.scatter(x, mine["value"], s=14, label=model)
    ax.set_xticks(range(len(cells)), cells, rotation=20, ha="right")
    ax.set_xlabel("cell")
    ax.set_ylabel("NDCG@10 (test), one dot per seed")
    ax.set_title(f"{dataset}: spread over holdout seeds {sorted(variants.values())}")
    ax.legend(fontsize=8)
    return save_figure(fig, path, f"{dataset} seed spread")


def plot_transfer(metrics: pd.DataFrame, conf: CompareConf, path: Path) -> Path:
    """NDCG@10 of SASRec-F per target cell: transferred against the target's own."""
    plt = pyplot()
    rows = _primary_test(metrics)
    labels, values = [], []
    cells = [c for c in S.CELLS if c != "known_past"]
    for source, target in conf.transfer:
        for label, model in ((f"{source}→{target}", f"sasrec_f@{source}"), (f"{target} own", "sasrec_f")):
            mine = rows[(rows[S.DATASET] == target) & (rows[S.MODEL] == model)].set_index(S.CELL)
            labels.append(label)
            values.append([mine["value"].get(c, np.nan) for c in cells])
    grid = np.array(values, dtype=float)
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(labels) + 2))
    image = ax.imshow(grid, cmap="viridis", aspect="auto", vmin=0)
    ax.set_xticks(range(len(cells)), cells, rotation=20, ha="right")
    ax.set_yticks(range(len(labels)), labels)
    for i in range(grid.shape[0]):
        for j in range(grid.shape[1]):
            if not np.isnan(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.3f}", ha="center", va="center", color="white", fontsize=8)
    ax.set_xlabel("target cell (test)")
    ax.set_ylabel("SASRec-F trained on → scored on")
    ax.set_title("Transfer: NDCG@10 on another source's cells")
    fig.colorbar(image, ax=ax).set_label("NDCG@10")
    return save_figure(fig, path, "transfer grid")


def compare_sections(lake: Lake, metrics: pd.DataFrame, conf: CompareConf, figures: Path) -> list[Section]:
    """Every comparison the run conf asked for, as report sections (title, table, note, figure)."""
    figures.mkdir(parents=True, exist_ok=True)
    leaks = read_compare_csv(lake.root, "leaks")
    agreement = read_compare_csv(lake.root, "agreement")
    sensitivity = read_compare_csv(lake.root, "sensitivity")
    splits = lake.read(S.SPLITS).where(F.col(S.SPLIT) == S.TEST).select(S.DATASET, "seed").toPandas()
    seeds = dict(zip(splits[S.DATASET], splits["seed"], strict=True))  # one row per dataset
    sections = []
    for dataset in conf.datasets:
        if conf.protocols:
            sections.append(
                Section(
                    f"{dataset}: protocols side by side (NDCG@10, test)",
                    protocol_scores(metrics, dataset, conf),
                    "The same models under the INTENT cells, leave-last-out and HORIZON's four settings "
                    "(cutoff and holdout of the INTENT test split); 95% intervals over users.",
                    plot_protocols(metrics, dataset, conf, figures / f"{dataset}_protocols.png"),
                )
            )
            sections.append(
                Section(
                    f"{dataset}: does the protocol change the model order? (Kendall tau-b)",
                    agreement_table(agreement, dataset),
                    f"Tau of the model orders (NDCG@10) of each protocol setting and each INTENT deployment "
                    f"cell; 95% interval from {conf.replicates} paired user-bootstrap replicates.",
                )
            )
            sections.append(
                Section(
                    f"{dataset}: targets scored on a period the model trained on",
                    leak_table(leaks, dataset, conf),
                    "Targets that some training event follows in time (any user's). The INTENT future "
                    "cells have none; `intent verify` fails a protocol variant that has any.",
                )
            )
        if conf.seeds:
            seed = int(seeds.get(dataset, 0))
            sections.append(
                Section(
                    f"{dataset}: spread over holdout seeds (NDCG@10, test)",
                    seed_spread(metrics, dataset, seed, conf),
                    "The whole split again with each holdout seed; compare the range with one split's "
                    "interval width.",
                    plot_seed_spread(metrics, dataset, seed, conf, figures / f"{dataset}_seeds.png"),
                )
            )
        table = sensitivity_table(sensitivity, dataset)
        if not table.empty:
            sections.append(
                Section(
                    f"{dataset}: cutoff sensitivity to the band and the 62-day switch",
                    table,
                    "The test cutoff each variant of the rule picks on the same events; `moved` when it "
                    "differs from the shipped rule's.",
                )
            )
    if conf.transfer and lake.has(S.TRANSFERS):
        transfers = lake.read(S.TRANSFERS).toPandas()  # pairs x cells
        sections.append(
            Section(
                "Transfer across sources (SASRec-F, NDCG@10, test)",
                transfer_grid(metrics, transfers, conf),
                "Trained on one source's training split, scored on another's cells, where every item is "
                "new to it; items meet through metadata tokens and their words.",
                plot_transfer(metrics, conf, figures / "transfer.png"),
            )
        )
    for one, every in conf.all_signals.items():
        sections.append(
            Section(
                f"{one}: one event per impression against every signal ({every})",
                all_signals_table(metrics, one, every),
                "Each dataset's own split and cells; the all-signals mode keeps likes, follows and "
                "comments that one-per-impression folds into one event. Its signals of one impression "
                "are consecutive events of the same item, which repeat-last predicts for free.",
            )
        )
    return sections


def lake_compare_conf(lake: Lake, metrics: pd.DataFrame, datasets: list[str]) -> CompareConf:
    """The comparisons whose results are in the lake for these datasets (``intent report`` has
    no run conf): their evaluated variants and the transfers into them."""
    refs = [parse_dataset(d) for d in sorted(set(metrics[S.DATASET]))]
    # backtest origins have a part of their own (report/backtest.py)
    variants = [r for r in refs if r.is_variant and r.origin is None and r.source in datasets]
    protocols = tuple(p for p in PROTOCOLS if any(r.protocol == p for r in variants))
    seeds = sorted({r.seed for r in variants if r.seed is not None})
    transfer: tuple[tuple[DatasetRef, DatasetRef], ...] = ()
    if lake.has(S.TRANSFERS):
        pairs = lake.read(S.TRANSFERS).select(S.SOURCE, S.DATASET).distinct().collect()  # pairs
        found = sorted((r[S.SOURCE], r[S.DATASET]) for r in pairs if r[S.DATASET] in datasets)
        transfer = tuple((parse_dataset(s), parse_dataset(t)) for s, t in found)
    with_variants = sorted({r.source for r in variants})
    sensitivity = read_compare_csv(lake.root, "sensitivity")
    with_sensitivity = sorted(set(sensitivity[S.DATASET]) & set(datasets)) if not sensitivity.empty else []
    return CompareConf(
        datasets=tuple(parse_dataset(d) for d in sorted({*with_variants, *with_sensitivity})),
        protocols=protocols,
        seeds=tuple(seeds),
        transfer=transfer,
    )
