"""Validate raw documents and count every row that is dropped, by reason.

The rules follow datatrove's ``BaseFilter`` habit: each rule answers keep or
drop-with-a-reason, the caller counts ``dropped_<reason>``, and the dropped
rows are returned (not discarded) so they can be written to an exclusion file.

Reasons, in the order they are checked (a row gets the first that applies):

``invalid_json``    the line of a JSONL shard is not a JSON object (column
                    ``_parse_error`` set by the reader)
``missing_id``      id is null or empty
``not_text``        text is a value that is not a string: a JSON object or array, a number or a
                    boolean in some rows of a JSONL file, a list or struct cell of parquet (stringified,
                    it would be scored as its Python repr); a text column with no string at all is
                    refused instead, as a numeric one is
``invalid_utf8``    text is bytes that do not decode as UTF-8, or a str that
                    holds lone surrogates (how pandas' ``encoding_errors=
                    "surrogateescape"`` keeps undecodable bytes of a JSONL file)
``empty_text``      text is null, empty, or only white space
``too_long``        more than ``max_chars`` characters (a 5 MB page of a bad
                    extraction would dominate token budgets and memory)
``outside_language`` (``data.language=drop`` only) the text is not in the raters' language, English
                    (:mod:`curation.data.language`: script, function words, accents). With the default
                    ``keep`` such documents are kept and counted (``outside_language`` in the metrics
                    and the summary); ``off`` skips the check
``duplicate_id``    an id already kept earlier in the stream (first one wins)

An id that is a list, an array or a dict is not dropped but refused (:class:`~curation.errors.InvalidIdError`,
naming file, row and line): it means the id column is the wrong one, and stringifying it would make
ids that look valid. Each rejected row keeps its place: ``row`` (from 0) and, for JSON Lines, ``line``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import pandas as pd

from curation.data.language import outside_language
from curation.errors import InvalidIdError, UserError

PARSE_ERROR = "_parse_error"  # set by curation.datasets.jsonl for lines that are not JSON objects
LINE = "_line"  # set by curation.datasets.jsonl: the 1-based line of each row in its file
REASONS = ("invalid_json", "missing_id", "not_text", "invalid_utf8", "empty_text", "too_long", "outside_language",
           "duplicate_id")
LANGUAGE = ("keep", "drop", "off")  # what ingest does with documents outside the raters' language


class SchemaError(UserError, ValueError):
    """A shard lacks a required column; the message names the file and the column."""


_SCALAR_IDS = (str, int, float, bool, np.integer, np.floating, np.bool_)


def _bad_id(raw_id: object) -> bool:
    """An id that is not one scalar value (a list, an array, a dict, a set): refused, not stringified."""
    return raw_id is not None and raw_id is not pd.NA and not isinstance(raw_id, _SCALAR_IDS)


_TEXT_TYPES = (str, bytes, bytearray, memoryview)  # bytes are decoded as UTF-8 (invalid_utf8 otherwise)


def _missing(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value))


def _not_text(value: object) -> bool:
    """A text cell that is neither missing nor a string (nor bytes): a dict, a list, an array, a number, a bool."""
    return not _missing(value) and not isinstance(value, _TEXT_TYPES)


def _kind(value: object) -> str:
    if isinstance(value, dict):
        return "JSON objects (dict)"
    if isinstance(value, (list, tuple, np.ndarray)):
        return "arrays (list)"
    return f"{type(value).__name__} values"


def _where(position: int, line: object) -> str:
    return f"row {position} (counted from 0)" + (f", line {int(line)}" if line is not None and not pd.isna(line) else "")


def invalid_id_error(source_name: str, position: int, line: object, raw_id: object, id_column: str,
                     columns: Iterable[str]) -> InvalidIdError:
    preview = repr(raw_id.tolist() if isinstance(raw_id, np.ndarray) else raw_id)
    preview = preview if len(preview) <= 80 else preview[:77] + "..."
    kind = "list" if isinstance(raw_id, (list, tuple, np.ndarray)) else type(raw_id).__name__
    return InvalidIdError(
        f"{source_name}: {_where(position, line)}: the id ({id_column!r}) is a {kind}, "
        f"{preview}; an id must be one string or number per row. Fix: set data.id_column to a column that "
        f"holds one (columns present: {sorted(map(str, columns))}), or correct the row.")


@dataclass
class ValidationConfig:
    id_column: str = "id"  # name of the unique document id column in the input
    text_column: str = "text"  # name of the text column in the input (FineWeb/DCLM: "text")
    max_chars: int | None = 1_000_000  # drop longer documents; None turns the rule off
    keep_columns: tuple[str, ...] = ("source", "url", "quality_label", "extra")  # optional columns carried over when present
    language: str = "keep"  # documents outside the raters' language (English): keep (counted) | drop (counted) | off


@dataclass
class ValidationReport:
    """Counts of one validation pass; reports add up across shards."""

    rows_read: int = 0
    rows_kept: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: {r: 0 for r in REASONS})
    outside_language: int = 0  # rows found outside the raters' language, kept or dropped (0 with language=off)

    def __add__(self, other: "ValidationReport") -> "ValidationReport":
        return ValidationReport(
            rows_read=self.rows_read + other.rows_read,
            rows_kept=self.rows_kept + other.rows_kept,
            dropped={r: self.dropped.get(r, 0) + other.dropped.get(r, 0) for r in REASONS},
            outside_language=self.outside_language + other.outside_language,
        )

    def as_metrics(self) -> dict[str, int]:
        out = {"rows_read": self.rows_read, "rows_kept": self.rows_kept, "outside_language": self.outside_language}
        out.update({f"dropped_{r}": n for r, n in self.dropped.items()})
        out["rows_dropped"] = sum(self.dropped.values())
        return out


def check_schema(frame: pd.DataFrame, config: ValidationConfig, source_name: str, row_offset: int = 0) -> None:
    """Raise :class:`SchemaError` naming ``source_name`` and the missing column."""
    if frame.empty and not len(frame.columns):
        # a 0-byte file: "column 'id' is missing, set data.id_column" would send the user to the config
        raise SchemaError(f"{source_name}: the file is empty (no row, no column). Fix: remove it from data.path, "
                          "or replace it with a complete copy if a copy or download was interrupted.")
    for col in (config.id_column, config.text_column):
        if col not in frame.columns:
            raise SchemaError(
                f"{source_name}: required column {col!r} is missing "
                f"(columns present: {sorted(map(str, frame.columns))}). "
                f"Set data.{'id' if col == config.id_column else 'text'}_column in the config "
                "if your corpus names it differently."
            )
    text = frame[config.text_column]
    if text.notna().any() and (pd.api.types.is_numeric_dtype(text.dtype) or pd.api.types.is_bool_dtype(text.dtype)):
        # numbers or flags are not documents: kept, they would be stringified into "0", "1", ... and scored
        # as text without a word said (issue #39: a wrong type is named, not silently converted)
        raise SchemaError(
            f"{source_name}: the text column {config.text_column!r} holds {text.dtype} values, not text "
            f"(columns present: {sorted(map(str, frame.columns))}). Fix: set data.text_column to the column "
            f"that holds the documents' text.")
    if text.dtype == object:
        values = text.tolist()
        # no string at all (a struct or list column, or every JSONL text an object): the wrong column, refused as a
        # numeric one is; some rows of another type are dropped as not_text (validate_documents), and counted
        if not any(isinstance(v, _TEXT_TYPES) for v in values):
            first = next((i for i, v in enumerate(values) if _not_text(v)), None)
            if first is not None:
                raise SchemaError(
                    f"{source_name}: the text column {config.text_column!r} holds {_kind(values[first])}, not text "
                    f"(row {row_offset + first}, counted from 0, is the first; columns present: {sorted(map(str, frame.columns))})."
                    f" Fix: set data.text_column to the column that holds the documents' text as strings.")


def _repaired(value: object) -> object:
    """Bytes outside the text column as a string, U+FFFD for what is not UTF-8; any other value as it is."""
    return bytes(value).decode("utf-8", errors="replace") if isinstance(value, (bytes, bytearray)) else value


def _as_json(value: object) -> object:
    """A struct, list or array cell of a carried column (``extra`` as a parquet struct) as its JSON text: every
    shard then has one schema for the column whatever each file held (issue #52: a struct in one shard and a
    string, or nothing, in another made document statistics fail with "data type 'struct<...>' not
    understood"), and ``category`` is read from it as from the bundled corpus's JSON ``extra``."""
    if isinstance(value, (dict, list, tuple, np.ndarray)):
        import json

        return json.dumps(value, default=lambda v: v.tolist() if hasattr(v, "tolist") else str(v), ensure_ascii=False)
    return value


def _decode(value: object) -> tuple[str | None, bool]:
    """Return (text, ok). ``ok`` is False when the value is not valid UTF-8."""
    if value is None or (isinstance(value, float) and pd.isna(value)) or value is pd.NA:
        return None, True
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            return bytes(value).decode("utf-8"), True
        except UnicodeDecodeError:
            return None, False
    text = str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates from surrogateescape decoding
        return None, False
    return text, True


def validate_documents(
    frame: pd.DataFrame,
    config: ValidationConfig,
    *,
    source_name: str = "<frame>",
    seen_ids: set[str] | None = None,
    check_duplicates: bool = True,
    row_numbers: bool = False,
    row_offset: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame, ValidationReport]:
    """Validate one shard.

    Returns ``(kept, rejected, report)``. ``kept`` has columns ``id``, ``text``
    and whichever of ``config.keep_columns`` exist; ``rejected`` has ``id``,
    ``reason``, ``source_file``, ``row`` and ``line`` for every dropped row. ``seen_ids`` carries
    the ids kept by earlier shards so duplicates across shards are caught; it
    is updated in place. ``check_duplicates=False`` leaves the ``duplicate_id`` rule to a
    later pass over all shards (:mod:`curation.shards.dedup`: no set of every id in memory);
    ``row_numbers=True`` adds ``_row`` (the row's position in ``frame``) to ``kept`` and
    ``rejected`` so that pass can put its rejections back in row order. ``row_offset``: the file row of
    ``frame``'s first row (a piece of a large file, issue #52): every ``row`` and ``_row`` is a row of the file.

    A value read as bytes because it is not valid UTF-8 (a parquet string column that failed Arrow's check, a
    JSON Lines value with undecodable bytes) is ``invalid_utf8`` in the text column; in the id and the carried
    columns it is decoded with U+FFFD for the bad bytes (a parquet column must be all strings).
    """
    parse_errors = frame.pop(PARSE_ERROR) if PARSE_ERROR in frame.columns else None
    lines = frame.pop(LINE) if LINE in frame.columns else None
    if parse_errors is not None and parse_errors.notna().all():
        raise SchemaError(f"{source_name}: no line parses as a JSON object ({parse_errors.iloc[0]})")
    check_schema(frame, config, source_name, row_offset)
    seen = seen_ids if seen_ids is not None else set()
    report = ValidationReport(rows_read=len(frame))
    keep_mask: list[bool] = []
    texts: list[str | None] = []
    ids: list[str | None] = []
    rejected: list[tuple[str | None, str]] = []
    rejected_rows: list[int] = []

    raw_ids: Iterable = frame[config.id_column].tolist()
    raw_texts: Iterable = frame[config.text_column].tolist()
    broken: Iterable = parse_errors.notna().tolist() if parse_errors is not None else [False] * len(frame)
    line_of = lines.tolist() if lines is not None else None
    for position, (raw_id, raw_text, is_broken) in enumerate(zip(raw_ids, raw_texts, broken)):
        if isinstance(raw_id, (bytes, bytearray)):
            raw_id = _repaired(raw_id)
        if not is_broken and _bad_id(raw_id):
            raise invalid_id_error(source_name, row_offset + position, line_of[position] if line_of else None,
                                   raw_id, config.id_column, frame.columns)
        doc_id = None if raw_id is None or (not isinstance(raw_id, str) and pd.isna(raw_id)) else str(raw_id)
        text, utf8_ok = _decode(raw_text)
        reason = None
        if is_broken:
            reason = "invalid_json"
        elif not doc_id:
            reason = "missing_id"
        elif _not_text(raw_text):
            reason = "not_text"
            text = None
        elif not utf8_ok:
            reason = "invalid_utf8"
        elif text is None or not text.strip():
            reason = "empty_text"
        elif config.max_chars is not None and len(text) > config.max_chars:
            reason = "too_long"
        elif config.language != "off" and outside_language(text) is not None:
            report.outside_language += 1
            reason = "outside_language" if config.language == "drop" else None
        if reason is None and check_duplicates and doc_id in seen:
            reason = "duplicate_id"
        if reason is None:
            if check_duplicates:
                seen.add(doc_id)
            keep_mask.append(True)
        else:
            report.dropped[reason] += 1
            rejected.append((doc_id, reason))
            rejected_rows.append(position)
            keep_mask.append(False)
        ids.append(doc_id)
        texts.append(text)

    mask = pd.Series(keep_mask, index=frame.index, dtype=bool)
    kept = pd.DataFrame(
        {
            "id": pd.Series(ids, index=frame.index, dtype="string")[mask],
            "text": pd.Series(texts, index=frame.index, dtype="string")[mask],
        }
    )
    for col in config.keep_columns:
        if col in frame.columns:
            values = frame.loc[mask, col]
            if values.dtype == object:
                cells = values.tolist()
                if any(isinstance(v, (bytes, bytearray)) for v in cells):
                    values = values.map(_repaired)
                if any(isinstance(v, (dict, list, tuple, np.ndarray)) for v in cells):
                    values = values.map(_as_json)
            kept[col] = values
    if row_numbers:
        kept["_row"] = pd.Series(range(row_offset, row_offset + len(frame)), index=frame.index, dtype="int64")[mask]
        if lines is not None:
            kept[LINE] = pd.Series(lines.to_numpy(), index=frame.index, dtype="Int64")[mask]
    report.rows_kept = int(mask.sum())
    rejected_frame = pd.DataFrame(
        {
            "id": pd.Series([r[0] for r in rejected], dtype="string"),
            "reason": pd.Series([r[1] for r in rejected], dtype="string"),
            "source_file": pd.Series([source_name] * len(rejected), dtype="string"),
            # where the row is in its file: row (from 0), and for JSON Lines the line (from 1)
            "row": pd.Series(rejected_rows, dtype="int64") + row_offset,
            "line": pd.Series([line_of[r] for r in rejected_rows] if line_of else [None] * len(rejected),
                              dtype="Int64"),
        }
    )
    if row_numbers:
        rejected_frame["_row"] = pd.Series(rejected_rows, dtype="int64") + row_offset
    return kept.reset_index(drop=True), rejected_frame, report
