"""Errors a user can act on (issue #25, "Smaller"): a corpus that yields no document stops at ingest
with the counts by cause; a list or dict id is refused naming file and row; rejected JSONL lines keep
their line; a known failure prints one short message (the trace behind HYDRA_FULL_ERROR=1 /
--verbose); a full disk is named as such."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from curation.datasets import CorpusShardsDataset
from curation.errors import EmptyCorpusError, InvalidIdError, format_failure, user_message
from curation.data.ingest import ingest_corpus
from tests.conftest import CORPUS_SHARDS

BIN = Path(sys.executable).parent
DATA = {"id_column": "id", "text_column": "text", "max_chars": 1_000_000, "max_docs": None,
        "keep_columns": ["source"]}


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return pd.read_parquet(CORPUS_SHARDS[0], columns=["text"]).head(20)["text"].tolist()


def _ingest(path: Path, tmp_path: Path):
    shards = CorpusShardsDataset(path=str(path)).load()
    return ingest_corpus(shards, {**DATA, "path": str(path)}, work_root=tmp_path / "staging")


def test_a_corpus_of_zero_rows_stops_at_ingest(tmp_path, texts):
    pd.DataFrame({"id": pd.Series([], dtype="string"), "text": pd.Series([], dtype="string")}).to_parquet(
        tmp_path / "empty.parquet")
    with pytest.raises(EmptyCorpusError, match=r"empty\.parquet: no document to select from: the 1 shard\(s\) "
                                               r"read hold 0 rows"):
        _ingest(tmp_path / "empty.parquet", tmp_path)


def test_a_corpus_whose_rows_are_all_dropped_stops_at_ingest_with_the_counts_by_cause(tmp_path, texts):
    pd.DataFrame({"id": [f"d{i}" for i in range(8)] + [None, ""],
                  "text": ["  "] * 6 + ["", None] + texts[:2]}).to_parquet(tmp_path / "blank.parquet")
    with pytest.raises(EmptyCorpusError) as err:
        _ingest(tmp_path / "blank.parquet", tmp_path)
    message = str(err.value)
    assert "10 rows read from 1 shard(s), all dropped (empty_text 8, missing_id 2)" in message
    assert "data.text_column" in message and "data.id_column" in message  # what to check
    rejected = Path(message.rsplit(" is in ", 1)[1].rstrip("."))
    frame = pd.read_parquet(rejected)  # the dropped rows, with their place in the file
    assert list(frame["row"]) == list(range(10)) and frame["line"].isna().all()


@pytest.mark.parametrize("kind", ["list", "dict"])
def test_an_id_that_is_a_list_or_a_dict_is_refused_with_file_and_row(tmp_path, texts, kind):
    ids = [f"d{i}" for i in range(5)]
    if kind == "list":
        frame = pd.DataFrame({"id": [[i, i + 1] for i in range(5)], "text": texts[:5]})
        frame.to_parquet(tmp_path / "ids.parquet")
        path, where = tmp_path / "ids.parquet", r"ids\.parquet: row 0 \(counted from 0\): the id \('id'\) is a list, \[0, 1\]"
    else:
        rows = [{"id": ids[0], "text": texts[0]}, {"id": ids[1], "text": texts[1]}, {"id": {"a": 2}, "text": texts[2]}]
        (tmp_path / "ids.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        path, where = tmp_path / "ids.jsonl", r"ids\.jsonl: row 2 \(counted from 0\), line 3: the id \('id'\) is a dict"
    with pytest.raises(InvalidIdError, match=where) as err:
        _ingest(path, tmp_path)
    assert "data.id_column" in str(err.value)  # the fix


def test_rejected_jsonl_lines_keep_their_file_and_line(tmp_path, texts):
    lines = [json.dumps({"id": "a", "text": texts[0]}),
             "",  # a blank line: not a row, but it counts as a line
             json.dumps({"id": "b", "text": "   "}),  # empty_text, line 3
             '{"id": "c", "te',  # invalid_json, line 4
             json.dumps({"id": "a", "text": texts[1]}),  # duplicate_id, line 5
             json.dumps({"id": "d", "text": texts[2]})]
    (tmp_path / "part.jsonl").write_text("\n".join(lines) + "\n")
    result = _ingest(tmp_path / "part.jsonl", tmp_path)
    rejected = result.rejected.to_frame()
    assert list(zip(rejected["reason"], rejected["line"], rejected["row"])) == [
        ("empty_text", 3, 1), ("invalid_json", 4, 2), ("duplicate_id", 5, 3)]
    assert set(rejected["source_file"]) == {"part.jsonl"}
    assert list(result.documents.to_frame()["id"]) == ["a", "d"]
    # a file pandas reads in one go (no broken line) has its lines too
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "part.jsonl").write_text("\n".join([lines[0], "", lines[2], lines[5]]) + "\n")
    rejected = _ingest(tmp_path / "ok" / "part.jsonl", tmp_path / "ok").rejected.to_frame()
    assert list(zip(rejected["reason"], rejected["line"])) == [("empty_text", 3)]


def test_a_full_disk_is_named_with_the_file_and_the_fix():
    with pytest.raises(OSError) as err:
        with open("/dev/full", "wb", buffering=0) as handle:  # the kernel's always-full device: a real ENOSPC
            handle.write(b"x" * 4096)
    message = user_message(err.value)
    assert message is not None and message.startswith("the disk is full")
    assert "run the same command again" in message
    # a bug is not a known failure: it keeps its trace
    assert user_message(KeyError("extra")) is None


@pytest.mark.slow  # `curate` subprocesses
def test_curate_prints_one_short_message_for_bad_input_and_the_trace_on_request(project, texts):
    pd.DataFrame({"id": [[i, i] for i in range(5)], "text": texts[:5]}).to_parquet(project / "listid.parquet")
    args = [str(BIN / "curate"), "pipeline=ingest", f"data.path={project / 'listid.parquet'}", "tracking.enabled=false"]
    env = {**os.environ, "CURATION_PROJECT_ROOT": str(project), "KEDRO_DISABLE_TELEMETRY": "true"}
    env.pop("HYDRA_FULL_ERROR", None)
    short = subprocess.run(args, cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert short.returncode == 2
    assert "Traceback" not in short.stderr + short.stdout
    assert "failed with error" not in short.stdout + short.stderr  # Kedro's copy of the message is dropped
    expected = format_failure("listid.parquet: row 0 (counted from 0): the id ('id') is a list, [0, 0]; an id must")
    assert expected.split(" must")[0] in short.stderr, short.stderr
    assert len([line for line in short.stderr.splitlines() if line.strip()]) == 2, short.stderr
    full = subprocess.run([*args, "--verbose"], cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert full.returncode != 0
    assert "Traceback" in full.stderr and "InvalidIdError" in full.stderr and "validate.py" in full.stderr
