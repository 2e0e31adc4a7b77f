"""Parquet shards of a corpus, read whole or as one range of rows (a piece of a large file), in bounded memory.

A FineWeb parquet file is ~2 GB compressed; read whole, then converted to pandas, then held as Python
strings, it cost ~9x its text (issue #52). :class:`~curation.datasets.corpus.CorpusShardsDataset` cuts such a
file into pieces of rows (``rows=(start, stop)``); this dataset reads one piece by record batches of the row
groups that hold it, so a piece costs its own rows, not the file's. A file that is one piece is read as
``pandas.read_parquet`` reads it (the same frame, so the same ingest outputs as before pieces existed).

Text that is not valid UTF-8 is not an error of the file: parquet stores strings as bytes and does not check
them, and pandas failed later, on the first such value, with a slice of the document for a message. A string
column that fails Arrow's UTF-8 check is read as bytes instead (the text column: each bad value is then dropped
and counted as ``invalid_utf8`` by validation; any other column: decoded with U+FFFD replacing the bad bytes).
"""

from __future__ import annotations

from typing import Any

import fsspec
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from kedro.io import AbstractDataset

from curation.data.pieces import ROW_OFFSET

BATCH_ROWS = 4096  # rows decoded at a time inside a row group (~16 MB of web text)


def _to_pandas(table: pa.Table) -> pd.DataFrame:
    """The frame ``pandas.read_parquet`` makes of ``table`` (its own conversion, so dtypes match it exactly)."""
    try:
        from pandas.io._util import arrow_table_to_pandas
    except ImportError:  # pandas < 2.2
        return table.to_pandas()
    return arrow_table_to_pandas(table)


def _utf8_checked(table: pa.Table, text_column: str | None) -> pa.Table:
    """``table`` with every string column that holds invalid UTF-8 read as bytes (text) or repaired (others)."""
    for i, field in enumerate(table.schema):
        if not (pa.types.is_string(field.type) or pa.types.is_large_string(field.type)):
            continue
        column = table.column(i)
        try:
            column.validate(full=True)  # Arrow's UTF-8 check, vectorised: the common case costs one pass
            continue
        except pa.ArrowInvalid:
            pass
        binary = pa.large_binary() if pa.types.is_large_string(field.type) else pa.binary()
        raw = pa.chunked_array([pa.Array.from_buffers(binary, len(c), c.buffers(), c.null_count, c.offset)
                                for c in column.chunks], type=binary)
        if field.name != text_column:
            raw = pa.array([None if v is None else v.decode("utf-8", errors="replace") for v in raw.to_pylist()],
                           type=field.type)
        table = table.set_column(i, pa.field(field.name, raw.type), raw)
    return table


class ParquetShardDataset(AbstractDataset):
    """One parquet file, or rows ``[start, stop)`` of it.

    Args:
        filepath: local path or fsspec URL.
        rows: ``(start, stop)`` file rows to read; None = the whole file.
        text_column: the column read as bytes when it holds invalid UTF-8 (validation counts ``invalid_utf8``).
        load_args: ``columns`` (a list) is honoured; other keys are ignored.
    """

    def __init__(self, *, filepath: str, rows: tuple[int, int] | None = None, text_column: str | None = "text",
                 load_args: dict[str, Any] | None = None, credentials: dict[str, Any] | None = None,
                 fs_args: dict[str, Any] | None = None, metadata: dict[str, Any] | None = None) -> None:
        self._filepath = filepath
        self._rows = None if rows is None else (int(rows[0]), int(rows[1]))
        self._text_column = text_column
        self._columns = (load_args or {}).get("columns")
        self._storage = {**(credentials or {}), **(fs_args or {})}
        self.metadata = metadata

    def load(self) -> pd.DataFrame:
        fs, path = fsspec.core.url_to_fs(self._filepath, **self._storage)
        with fs.open(path, "rb") as handle:
            if self._rows is None:
                table = pq.read_table(handle, columns=self._columns)
                start = 0
            else:
                start = self._rows[0]
                table = self._read_rows(pq.ParquetFile(handle, pre_buffer=False))
        frame = _to_pandas(_utf8_checked(table, self._text_column))
        frame.attrs[ROW_OFFSET] = start
        return frame

    def _read_rows(self, parquet: pq.ParquetFile) -> pa.Table:
        """Rows ``[start, stop)``: only the row groups that hold them are read, batch by batch (a piece of a file
        written as one huge row group decodes the rows before it and drops them: a cost in time, not memory)."""
        start, stop = self._rows
        meta = parquet.metadata
        groups, first_row, at = [], None, 0
        for g in range(meta.num_row_groups):
            n = meta.row_group(g).num_rows
            if at + n > start and at < stop:
                groups.append(g)
                first_row = at if first_row is None else first_row
            at += n
        batches = []
        position = first_row or 0
        if groups:
            for batch in parquet.iter_batches(batch_size=BATCH_ROWS, row_groups=groups, columns=self._columns,
                                              use_threads=False):
                lo, hi = max(start - position, 0), min(stop - position, batch.num_rows)
                if hi > lo:
                    batches.append(batch.slice(lo, hi - lo))
                position += batch.num_rows
                if position >= stop:
                    break
        schema = parquet.schema_arrow if self._columns is None else pa.schema(
            [parquet.schema_arrow.field(c) for c in self._columns], metadata=parquet.schema_arrow.metadata)
        return pa.Table.from_batches(batches, schema=schema)

    def save(self, data: pd.DataFrame) -> None:
        raise NotImplementedError("ParquetShardDataset is read-only")

    def _describe(self) -> dict[str, Any]:
        return {"filepath": self._filepath, "rows": self._rows}


def plan_rows(filepath: str, piece_bytes: int, storage: dict[str, Any] | None = None) -> list[tuple[int, int]] | None:
    """Row ranges of about ``piece_bytes`` of uncompressed data each, cut at row-group boundaries where the row
    groups are small enough, inside a row group otherwise; None when the file is one piece (read whole).
    Reads the footer only."""
    fs, path = fsspec.core.url_to_fs(filepath, **(storage or {}))
    with fs.open(path, "rb") as handle:
        meta = pq.ParquetFile(handle).metadata
    groups = [(meta.row_group(g).num_rows, meta.row_group(g).total_byte_size) for g in range(meta.num_row_groups)]
    total = sum(size for _, size in groups)
    if total <= piece_bytes or meta.num_rows <= 1:
        return None
    pieces: list[tuple[int, int]] = []
    start = at = 0
    size = 0
    for rows, group_bytes in groups:
        if group_bytes > piece_bytes:  # one row group is several pieces: cut it by rows
            if at > start:
                pieces.append((start, at))
            per = max(1, int(rows * piece_bytes / max(group_bytes, 1)))
            for lo in range(at, at + rows, per):
                pieces.append((lo, min(at + rows, lo + per)))
            at += rows
            start, size = at, 0
            continue
        if size + group_bytes > piece_bytes and at > start:
            pieces.append((start, at))
            start, size = at, 0
        at += rows
        size += group_bytes
    if at > start:
        pieces.append((start, at))
    return pieces if len(pieces) > 1 else None
