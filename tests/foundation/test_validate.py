"""Ingest validation: every dropped row is counted under its reason."""

from __future__ import annotations

import pandas as pd
import pytest

from curation.data import ValidationConfig, ValidationReport, validate_documents
from curation.data.validate import SchemaError


def _frame(rows):
    return pd.DataFrame(rows, columns=["id", "text", "source"])


def test_each_reason_counted_and_rejected_rows_kept_for_audit(corpus_sample):
    real = corpus_sample.iloc[0]
    limit = len(real["text"]) + 10
    frame = _frame(
        [
            (real["id"], real["text"], real["source"]),
            ("empty", "", "web"),
            ("blank", " \n\t  ", "web"),
            ("null-text", None, "web"),
            (None, "text without id", "web"),
            ("bad-bytes", b"caf\xe9 \xff\xfe", "web"),
            ("surrogate", "abc\udcff", "web"),
            ("huge", "x" * (limit + 1), "web"),
            (real["id"], "a second copy of the id", "web"),
        ]
    )
    kept, rejected, report = validate_documents(frame, ValidationConfig(max_chars=limit), source_name="s0")
    assert list(kept["id"]) == [real["id"]]
    assert kept["text"].iloc[0] == real["text"]
    assert report.rows_read == 9 and report.rows_kept == 1
    assert report.dropped == {"invalid_json": 0, "missing_id": 1, "not_text": 0, "invalid_utf8": 2, "empty_text": 3,
                              "too_long": 1, "outside_language": 0, "duplicate_id": 1}
    assert sorted(rejected["reason"]) == sorted(
        ["empty_text"] * 3 + ["missing_id", "invalid_utf8", "invalid_utf8", "too_long", "duplicate_id"])
    assert set(rejected["source_file"]) == {"s0"}
    metrics = report.as_metrics()
    assert metrics["rows_dropped"] == 8 and metrics["dropped_invalid_utf8"] == 2


def test_text_that_is_an_object_array_or_number_is_dropped_as_not_text(corpus_sample):
    """Issue #44: a JSON object as text was stored as its Python repr, then scored. Some rows of another type:
    dropped and counted as not_text; a column without any string: refused, as a numeric one is."""
    real = corpus_sample.head(3)
    frame = _frame([(real["id"].iloc[0], real["text"].iloc[0], "web"),
                    ("obj", {"body": real["text"].iloc[1]}, "web"),
                    ("arr", [real["text"].iloc[2]], "web"),
                    ("num", 42, "web"),
                    ("flag", True, "web"),
                    ("none", None, "web")])
    kept, rejected, report = validate_documents(frame, ValidationConfig(), source_name="mixed.jsonl")
    assert list(kept["id"]) == [real["id"].iloc[0]] and kept["text"].iloc[0] == real["text"].iloc[0]
    assert report.dropped["not_text"] == 4 and report.dropped["empty_text"] == 1
    assert list(rejected.loc[rejected["reason"] == "not_text", "row"]) == [1, 2, 3, 4]
    assert report.as_metrics()["dropped_not_text"] == 4
    objects = _frame([("a", {"body": "x"}, "web"), ("b", None, "web"), ("c", {"body": "y"}, "web")])
    with pytest.raises(SchemaError, match=r"^objs\.jsonl: the text column 'text' holds JSON objects \(dict\), not "
                                          r"text \(row 0, counted from 0, is the first; .*Fix: set data\.text_column"):
        validate_documents(objects, ValidationConfig(), source_name="objs.jsonl")
    arrays = pd.DataFrame({"id": ["a", "b"], "text": [[1, 2], [3]]})
    with pytest.raises(SchemaError, match=r"holds arrays \(list\), not text"):
        validate_documents(arrays, ValidationConfig(), source_name="lists.parquet")


def test_valid_utf8_bytes_are_decoded():
    kept, _, report = validate_documents(_frame([("a", "café".encode(), "web")]), ValidationConfig())
    assert kept["text"].iloc[0] == "café" and report.rows_kept == 1


def test_duplicates_across_shards_use_shared_seen_ids():
    seen: set[str] = set()
    validate_documents(_frame([("a", "one", "web")]), ValidationConfig(), seen_ids=seen)
    kept, _, report = validate_documents(_frame([("a", "two", "web"), ("b", "three", "web")]),
                                         ValidationConfig(), seen_ids=seen)
    assert list(kept["id"]) == ["b"] and report.dropped["duplicate_id"] == 1


def test_missing_text_column_names_file_and_column():
    frame = pd.DataFrame({"id": ["a"], "content": ["hello"]})
    with pytest.raises(SchemaError, match=r"shard-7\.jsonl.*'text'"):
        validate_documents(frame, ValidationConfig(), source_name="shard-7.jsonl")


def test_configurable_text_column():
    frame = pd.DataFrame({"doc_id": ["a"], "content": ["hello"]})
    kept, _, _ = validate_documents(frame, ValidationConfig(id_column="doc_id", text_column="content"))
    assert list(kept.columns[:2]) == ["id", "text"] and kept["text"].iloc[0] == "hello"


def test_reports_add_up():
    a = ValidationReport(rows_read=3, rows_kept=2, dropped={"empty_text": 1})
    b = ValidationReport(rows_read=2, rows_kept=1, dropped={"too_long": 1})
    total = a + b
    assert (total.rows_read, total.rows_kept) == (5, 3)
    assert total.dropped["empty_text"] == 1 and total.dropped["too_long"] == 1
