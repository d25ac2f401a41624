"""A section of the report: a title, a table and the figures beside it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd


@dataclass
class Section:
    title: str
    table: pd.DataFrame
    note: str
    figure: Path | None = None
