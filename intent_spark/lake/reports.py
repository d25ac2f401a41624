"""Small outcomes that are files, not Delta tables, under ``LAKE/reports/<kind>``: the split
reports, the audit, cutoff sensitivity, leak counts and protocol agreement."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def compare_folder(root: str) -> Path:
    return Path(root) / "reports" / "compare"


def read_compare_csv(root: str, kind: str) -> pd.DataFrame:
    """Every dataset's ``<dataset>.<kind>.csv`` in one frame (empty when none was written)."""
    paths = sorted(compare_folder(root).glob(f"*.{kind}.csv"))
    return pd.concat([pd.read_csv(p) for p in paths], ignore_index=True) if paths else pd.DataFrame()
