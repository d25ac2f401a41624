"""Writing raw release files fast and byte-exactly: CSV/JSONL lines assembled by Arrow kernels.

Why: the generators must write hundreds of millions of rows without a Python loop per event,
and with full control over every byte (quoting, number formats, line endings), because the
ingest adapters must parse synthetic files through the same code path as the real ones.
Every event-log file goes through an `EventLogFile`, which counts data rows and splices in the
deliberately bad rows of dirty mode.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

Piece: TypeAlias = pa.Array | str


def as_text(values: np.ndarray | pa.Array) -> pa.Array:
    """Numbers or strings as an Arrow string array (integers print without decimals)."""
    array = values if isinstance(values, pa.Array) else pa.array(values)
    return array if pa.types.is_string(array.type) else array.cast(pa.string())


def join_lines(pieces: Sequence[Piece], separator: str = ",") -> pa.Array:
    """One line per row, pieces joined by `separator` and ended by LF; nulls print as empty."""
    body = pc.binary_join_element_wise(*pieces, separator, null_handling="replace", null_replacement="")
    return pc.binary_join_element_wise(body, "\n", "")


def line_bytes(lines: pa.Array, start: int = 0, stop: int | None = None) -> memoryview:
    """The raw bytes of lines[start:stop], without copying."""
    stop = len(lines) if stop is None else stop
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32, count=len(lines) + 1, offset=lines.offset * 4)
    return memoryview(lines.buffers()[2])[int(offsets[start]) : int(offsets[stop])]


def line_text(lines: pa.Array, row: int) -> str:
    """One line as a Python string, without its LF (a template for a bad row)."""
    return str(lines[row].as_py()).rstrip("\n")


BadLineMaker = Callable[[str], list[bytes]]


class EventLogFile:
    """An event-log file written in appended blocks, counting its data rows.

    In dirty mode the bad lines (made from the first good line written, so they look real)
    are spliced in at seeded positions of the first non-empty block, or appended at the end
    when the file never receives a row.
    """

    def __init__(
        self,
        path: Path,
        header: str | None,
        rng: np.random.Generator,
        make_bad_lines: BadLineMaker | None = None,
        fallback_template: str = "",
    ) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.rows = 0
        self.bad_rows = 0
        self._rng = rng
        self._make_bad_lines = make_bad_lines
        self._fallback_template = fallback_template
        self._handle = path.open("wb")
        if header is not None:
            self._handle.write(header.encode("utf-8") + b"\n")

    def write(self, lines: pa.Array) -> None:
        """Append good lines (each already ending in LF), splicing in pending bad lines."""
        if len(lines) == 0:
            return
        if self._make_bad_lines is None:
            self._handle.write(line_bytes(lines))
            self.rows += len(lines)
            return
        made = self._make_bad_lines(line_text(lines, 0))
        bad_lines = [made[i] for i in self._rng.permutation(len(made)).tolist()]
        self._make_bad_lines = None
        cuts = np.sort(self._rng.integers(1, len(lines) + 1, len(bad_lines)))
        start = 0
        for cut, bad_line in zip(cuts.tolist(), bad_lines, strict=True):
            self._handle.write(line_bytes(lines, start, cut))
            self._handle.write(bad_line)
            start = cut
        self._handle.write(line_bytes(lines, start))
        self.rows += len(lines) + len(bad_lines)
        self.bad_rows += len(bad_lines)

    def close(self) -> None:
        """Flush pending bad lines (if the file got no rows) and close."""
        if self._make_bad_lines is not None:
            bad_lines = self._make_bad_lines(self._fallback_template)
            self._make_bad_lines = None
            for bad_line in bad_lines:
                self._handle.write(bad_line)
            self.rows += len(bad_lines)
            self.bad_rows += len(bad_lines)
        self._handle.close()

    def __enter__(self) -> EventLogFile:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def csv_bad_lines(
    template: str,
    header: str,
    replacements: Sequence[tuple[int, str]],
    encoding_field: int,
) -> list[bytes]:
    """The standard set of bad CSV rows, built from one good row of the file.

    - one row with too few columns;
    - one row per (field index, bad value) replacement (bad time, empty ids, bad amount, ...);
    - one row whose `encoding_field` holds invalid UTF-8 bytes;
    - one copy of the header line in the middle of the data.
    """
    fields = template.split(",")
    lines = [",".join(fields[: max(1, len(fields) - 3)]).encode("utf-8") + b"\n"]
    for field_index, value in replacements:
        changed = list(fields)
        changed[field_index] = value
        lines.append(",".join(changed).encode("utf-8") + b"\n")
    before = ",".join(fields[:encoding_field]).encode("utf-8")
    after = ",".join(fields[encoding_field + 1 :]).encode("utf-8")
    broken = fields[encoding_field].encode("utf-8")
    broken = broken[:2] + b"\xff\xfe" + broken[2:]
    lines.append(
        (before + b"," if encoding_field else b"")
        + broken
        + (b"," + after if encoding_field < len(fields) - 1 else b"")
        + b"\n"
    )
    lines.append(header.encode("utf-8") + b"\n")
    return lines
