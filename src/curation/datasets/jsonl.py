"""JSON Lines shards (``.jsonl``, ``.jsonl.gz``, ``.jsonl.zst``) that survive bad lines.

pandas' reader fails a whole shard on one undecodable byte or one broken
line. This dataset first tries pandas (fast); if that fails it re-reads the
shard line by line: a value with undecodable bytes is kept as ``bytes``
(later counted as ``invalid_utf8`` by validation) and a line that is not a JSON
object becomes a row with ``_parse_error`` set (counted as ``invalid_json``). Every row carries
``_line``, its 1-based line in the file, which validation writes next to each rejected row.
"""

from __future__ import annotations

import io
import json
from typing import Any

import fsspec
import pandas as pd
from kedro.io import AbstractDataset

PARSE_ERROR = "_parse_error"
LINE = "_line"  # the 1-based line of each row in the file (curation.data.validate.LINE)


def _restore_bytes(value: Any) -> Any:
    """A string holding undecodable bytes goes back to ``bytes`` (Arrow strings must be valid UTF-8)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", errors="surrogateescape")
    return value


class JSONLinesDataset(AbstractDataset):
    def __init__(self, *, filepath: str, load_args: dict[str, Any] | None = None,
                 credentials: dict[str, Any] | None = None, fs_args: dict[str, Any] | None = None,
                 metadata: dict[str, Any] | None = None) -> None:
        self._filepath = filepath
        self._load_args = dict(load_args or {})
        self._storage = {**(credentials or {}), **(fs_args or {})}
        self.metadata = metadata

    def _open(self):
        return fsspec.open(self._filepath, "rb", compression="infer", **self._storage)

    def load(self) -> pd.DataFrame:
        with self._open() as handle:
            payload = handle.read()  # zstd streams do not iterate by line
        # the line of each row (pandas skips blank lines), so that a rejected row can be found in the file
        numbers = [i for i, raw in enumerate(payload.split(b"\n"), start=1) if raw.strip()]
        try:
            frame = pd.read_json(io.BytesIO(payload), lines=True, dtype=False, **self._load_args)
        except (ValueError, UnicodeError):
            return self._load_tolerant(payload)
        if len(frame) != len(numbers) or LINE in frame.columns:
            return self._load_tolerant(payload)
        frame[LINE] = pd.Series(numbers, index=frame.index, dtype="int64")
        return frame

    def _load_tolerant(self, payload: bytes) -> pd.DataFrame:
        rows: list[dict[str, Any]] = []
        for number, raw in enumerate(payload.split(b"\n"), start=1):
            if not raw.strip():
                continue
            line = raw.decode("utf-8", errors="surrogateescape")
            try:
                row = json.loads(line)
            except ValueError as exc:
                rows.append({PARSE_ERROR: f"line {number}: {exc}", LINE: number})
                continue
            if not isinstance(row, dict):
                rows.append({PARSE_ERROR: f"line {number}: not an object", LINE: number})
                continue
            rows.append({**{k: _restore_bytes(v) for k, v in row.items()}, LINE: number})
        return pd.DataFrame(rows)

    def save(self, data: pd.DataFrame) -> None:
        raise NotImplementedError("JSONLinesDataset is read-only")

    def _describe(self) -> dict[str, Any]:
        return {"filepath": self._filepath}
