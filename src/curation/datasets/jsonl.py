"""JSON Lines shards (``.jsonl``, ``.jsonl.gz``, ``.jsonl.zst``) that survive bad lines.

pandas' reader fails a whole shard on one undecodable byte or one broken
line. This dataset first tries pandas (fast); if that fails it re-reads the
shard line by line: a value with undecodable bytes is kept as ``bytes``
(later counted as ``invalid_utf8`` by validation) and a line that is not a JSON
object becomes a row with ``_parse_error`` set (counted as ``invalid_json``).
"""

from __future__ import annotations

import json
from typing import Any

import fsspec
import pandas as pd
from kedro.io import AbstractDataset

PARSE_ERROR = "_parse_error"


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
        try:
            with self._open() as handle:
                return pd.read_json(handle, lines=True, dtype=False, **self._load_args)
        except (ValueError, UnicodeError):
            return self._load_tolerant()

    def _load_tolerant(self) -> pd.DataFrame:
        rows: list[dict[str, Any]] = []
        with self._open() as handle:
            payload = handle.read()  # zstd streams do not iterate by line
            for number, raw in enumerate(payload.split(b"\n"), start=1):
                if not raw.strip():
                    continue
                line = raw.decode("utf-8", errors="surrogateescape")
                try:
                    row = json.loads(line)
                except ValueError as exc:
                    rows.append({PARSE_ERROR: f"line {number}: {exc}"})
                    continue
                if not isinstance(row, dict):
                    rows.append({PARSE_ERROR: f"line {number}: not an object"})
                    continue
                rows.append({k: _restore_bytes(v) for k, v in row.items()})
        return pd.DataFrame(rows)

    def save(self, data: pd.DataFrame) -> None:
        raise NotImplementedError("JSONLinesDataset is read-only")

    def _describe(self) -> dict[str, Any]:
        return {"filepath": self._filepath}
