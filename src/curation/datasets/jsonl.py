"""JSON Lines shards (``.jsonl``/``.ndjson``, plain or gz, bz2, xz, zst) that survive bad lines, read whole or as
one range of lines (a piece of a large file), in bounded memory.

pandas' reader fails a whole shard on one undecodable byte or one broken
line. This dataset first tries pandas (fast); if that fails it re-reads the
shard line by line: a value with undecodable bytes is kept as ``bytes``
(later counted as ``invalid_utf8`` by validation) and a line that is not a JSON
object becomes a row with ``_parse_error`` set (counted as ``invalid_json``). Every row carries
``_line``, its 1-based line in the file, which validation writes next to each rejected row.

A large file is cut into pieces by :func:`plan_lines` (one streaming pass that finds line boundaries every
``piece_bytes`` of text and counts the lines and rows before each): a piece is the bytes ``[start, stop)`` of
the decompressed stream, so it costs its own text (~9x it while parsed), not the file's (issue #52: a 400 MB
file peaked at 3.8 GB). A plain file seeks to a piece; a compressed one decompresses and drops the bytes
before it (compressed streams cannot seek: time, not memory).
"""

from __future__ import annotations

import io
import json
from typing import Any

import fsspec
import pandas as pd
from kedro.io import AbstractDataset

from curation.data.pieces import ROW_OFFSET

PARSE_ERROR = "_parse_error"
LINE = "_line"  # the 1-based line of each row in the file (curation.data.validate.LINE)
BLOCK = 8 << 20  # bytes read at a time when scanning or skipping
PARSE_BYTES = 8 << 20  # bytes of lines parsed by pandas at a time

# the codecs read, by suffix (fsspec's names); ``.zstd`` is not in fsspec's own inference table
CODECS = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz", ".lzma": "lzma", ".zst": "zstd", ".zstd": "zstd"}


def compression_of(name: str) -> str | None:
    return next((codec for suffix, codec in CODECS.items() if name.endswith(suffix)), None)


def _restore_bytes(value: Any) -> Any:
    """A string holding undecodable bytes goes back to ``bytes`` (Arrow strings must be valid UTF-8)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", errors="surrogateescape")
    return value


def _open(filepath: str, storage: dict[str, Any]):
    return fsspec.open(filepath, "rb", compression=compression_of(filepath), **storage)


def plan_lines(filepath: str, piece_bytes: int, storage: dict[str, Any] | None = None
               ) -> list[tuple[int, int, int, int]] | None:
    """Pieces ``(start, stop, first_line, first_row)`` of about ``piece_bytes`` of (decompressed) text each, cut
    at line ends; None when the file is one piece. ``first_line`` counts from 1, ``first_row`` (the rows before,
    i.e. the non-blank lines, as pandas counts them) from 0. One pass over the file, ``BLOCK`` bytes at a time."""
    pieces: list[tuple[int, int, int, int]] = []
    start, line, row = 0, 1, 0  # where the current piece starts
    at, lines_seen, rows_seen = 0, 1, 0  # the start of the current (unfinished) line and its counts
    tail = b""
    with _open(filepath, storage or {}) as handle:
        while True:
            block = handle.read(BLOCK)
            if not block:
                break
            data = tail + block
            parts = data.split(b"\n")
            tail = parts.pop()  # the unfinished line
            for raw in parts:
                at += len(raw) + 1
                lines_seen += 1
                rows_seen += bool(raw.strip())
                if at - start >= piece_bytes:
                    pieces.append((start, at, line, row))
                    start, line, row = at, lines_seen, rows_seen
    end = at + len(tail)
    if end > start:
        pieces.append((start, end, line, row))
    return pieces if len(pieces) > 1 else None


class JSONLinesDataset(AbstractDataset):
    """One JSON Lines file, or the bytes ``[start, stop)`` of its text (``piece``: ``(start, stop, first_line,
    first_row)`` from :func:`plan_lines`)."""

    def __init__(self, *, filepath: str, load_args: dict[str, Any] | None = None,
                 credentials: dict[str, Any] | None = None, fs_args: dict[str, Any] | None = None,
                 metadata: dict[str, Any] | None = None, piece: tuple[int, int, int, int] | None = None) -> None:
        self._filepath = filepath
        self._load_args = dict(load_args or {})
        self._storage = {**(credentials or {}), **(fs_args or {})}
        self._piece = None if piece is None else tuple(int(v) for v in piece)
        self.metadata = metadata

    def _read(self) -> bytes:
        with _open(self._filepath, self._storage) as handle:
            if self._piece is None:
                return handle.read()  # zstd streams do not iterate by line
            start, stop = self._piece[:2]
            if handle.seekable() and compression_of(self._filepath) is None:
                handle.seek(start)
            else:
                left = start
                while left > 0:
                    skipped = handle.read(min(BLOCK, left))
                    if not skipped:
                        break
                    left -= len(skipped)
            return handle.read(stop - start)

    def load(self) -> pd.DataFrame:
        payload = self._read()
        first_line, first_row = (self._piece[2], self._piece[3]) if self._piece else (1, 0)
        frame = self._parse(payload, first_line)
        frame.attrs[ROW_OFFSET] = first_row
        return frame

    def _parse(self, payload: bytes, first_line: int) -> pd.DataFrame:
        """The rows of ``payload``, parsed ``PARSE_BYTES`` of lines at a time: pandas' JSON Lines reader holds
        ~15x what it parses (a 64 MB piece peaked at 1.2 GB parsed at once); a payload of at most that size
        (every shard of a small file) is parsed in one call, as before pieces existed."""
        if len(payload) <= PARSE_BYTES:
            return self._parse_batch(payload, first_line)
        frames, start, line = [], 0, first_line
        while start < len(payload):
            cut = payload.find(b"\n", start + PARSE_BYTES)
            stop = len(payload) if cut < 0 else cut + 1
            chunk = payload[start:stop]
            frames.append(self._parse_batch(chunk, line))
            line += chunk.count(b"\n")
            start = stop
            del chunk
        frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        if LINE in frame.columns:
            frame[LINE] = frame[LINE].astype("int64")
        return frame

    def _parse_batch(self, payload: bytes, first_line: int) -> pd.DataFrame:
        # the line of each row (pandas skips blank lines), so that a rejected row can be found in the file
        numbers = [i for i, raw in enumerate(payload.split(b"\n"), start=first_line) if raw.strip()]
        try:
            frame = pd.read_json(io.BytesIO(payload), lines=True, dtype=False, **self._load_args)
        except (ValueError, UnicodeError):
            return self._load_tolerant(payload, first_line)
        if len(frame) != len(numbers) or LINE in frame.columns:
            return self._load_tolerant(payload, first_line)
        frame[LINE] = pd.Series(numbers, index=frame.index, dtype="int64")
        return frame

    def _load_tolerant(self, payload: bytes, first_line: int = 1) -> pd.DataFrame:
        rows: list[dict[str, Any]] = []
        for number, raw in enumerate(payload.split(b"\n"), start=first_line):
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
        return {"filepath": self._filepath, "piece": self._piece}


def looks_like_json_lines(filepath: str, storage: dict[str, Any] | None = None, columns: tuple[str, ...] = ("text",)
                          ) -> bool:
    """A ``.json`` file is read as JSON Lines (documents exported with the wrong suffix) when its first non-blank
    line is a whole JSON object and either a second line is one too or the first has one of ``columns`` (the
    text column); a pretty-printed, array or one-line JSON file of other keys is metadata (a corpus's
    ``provenance.json`` or ``stats.json``)."""
    head = b""
    found: list[bytes] = []
    with _open(filepath, storage or {}) as handle:
        while len(found) < 2:  # up to the end of the second non-blank line (a document can be long)
            block = handle.read(1 << 20)
            head += block
            found = [raw for raw in head.split(b"\n")[:-1] if raw.strip()][:2]
            if not block:
                found = [raw for raw in head.split(b"\n") if raw.strip()][:2]
                break
    objects = []
    for raw in found:
        try:
            objects.append(json.loads(raw))
        except ValueError:
            return False
    if not objects or not all(isinstance(o, dict) for o in objects):
        return False
    return len(objects) == 2 or any(c in objects[0] for c in columns)
