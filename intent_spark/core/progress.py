"""The progress callback every long stage takes: one line of text at a time."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str], None]


def silent(_: object) -> None:
    """Says nothing: the default of every ``progress`` argument."""
