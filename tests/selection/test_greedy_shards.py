"""Greedy DiSF streamed from shards (curation.selection.greedy_shards): the in-memory picks, one batch held at a
time, no pool limit, resumable by chunk; objectives that read the whole pool keep the limit."""

from __future__ import annotations

import json
import logging

import numpy as np
import pandas as pd
import pytest

from curation.pruning import PruningConfig, prune_shards
from curation.selection.config import parse_selection_config
from curation.selection.corpus import run_selection, run_selection_shards
from curation.selection.greedy_shards import batch_local, run_greedy_batches
from curation.selection.sharded import ScaleLimitError
from tests.sharded_inputs import sharded_inputs

BUDGET = {"keep_ratio": 0.1, "docs": None, "ratio_of": "corpus", "candidates": None}
# DiSF as the preset has it (diversity only, per-set standardisation, random first picks), batches of 64 so the
# ~1,150 candidates make 18 batches; max_items far below the pool: the streamed path must not need it
DISF = {"method": "greedy", "diversity": "disf", "lam": 0.0, "batch_size": 64, "max_items": 100}


@pytest.fixture(scope="module")
def pruned(tmp_path_factory):
    root = tmp_path_factory.mktemp("greedy_shards")
    documents, scores, embeddings, _ = sharded_inputs(root, 6)
    out = prune_shards(scores, embeddings, PruningConfig(), root / "pruned")
    return documents, out.scores, out.embeddings


def _in_memory(pruned, selection, seed):
    documents, scores, embeddings = pruned
    vectors = np.concatenate([a for _, a in embeddings.iter_arrays()])
    return run_selection(scores.to_frame(), vectors, documents.to_frame(), selection, BUDGET, seed)


@pytest.mark.parametrize("selection", [
    DISF,
    {**DISF, "lam": 0.4, "standardize": False, "min_quality": 5.0},  # Eq. 12 raw, with in-place pruning
    {**DISF, "diversity": "pws", "lam": 0.3, "standardize": False},
], ids=["disf", "disf-quality-min_quality", "pws"])
def test_streamed_batches_pick_what_greedy_picks_on_the_whole_pool(pruned, selection, tmp_path):
    documents, scores, embeddings = pruned
    run = run_selection_shards(scores, embeddings, documents, selection, BUDGET, 5, tmp_path / "w")
    expected = _in_memory(pruned, {**selection, "max_items": None}, 5)
    assert run.metrics["candidates"] > 10 * selection["max_items"]
    pd.testing.assert_frame_equal(run.selected_ids, expected.selected_ids)
    assert run.metrics["info_n_batches"] == expected.metrics["info_n_batches"] > 10
    assert run.metrics["info_evaluations"] == expected.metrics["info_evaluations"]


def test_a_killed_run_resumes_at_its_first_unfinished_chunk(pruned, tmp_path, caplog):
    documents, scores, embeddings = pruned
    cfg = parse_selection_config("greedy", {k: v for k, v in DISF.items() if k != "method"})
    quality = scores.to_frame()["quality"].to_numpy()
    positions = np.arange(len(quality), dtype=np.int64)
    whole, history, info = run_greedy_batches(quality, positions, embeddings, 115, cfg, 2, tmp_path / "a",
                                              chunk_rows=200)
    chunks = info["streamed_chunks"]
    assert chunks == -(-info["n_batches"] // 3) >= 5 and info["chunks_resumed"] == 0  # 3 batches of 64 per chunk
    assert len(history) == info["n_batches"]
    # as if killed during chunk 3: chunks 0-2 finished, the rest never written
    folder = tmp_path / "a" / "greedy"
    for c in range(3, chunks):
        for path in folder.glob(f"chunk_{c:05d}.*"):
            path.unlink()
    (folder / "chunk_00003.selected.npy").write_bytes(b"half-written")  # no marker: redone
    with caplog.at_level(logging.INFO, logger="curation.selection.greedy_shards"):
        again, history_again, info_again = run_greedy_batches(quality, positions, embeddings, 115, cfg, 2,
                                                              tmp_path / "a", chunk_rows=200)
    assert info_again["chunks_resumed"] == 3 and "3 read back from an earlier run" in caplog.text
    assert np.array_equal(again, whole)
    pd.testing.assert_frame_equal(history_again.drop(columns="wall_time_s"), history.drop(columns="wall_time_s"))
    # another chunking of the same work folder starts over rather than mixing chunks that do not line up
    other, _, info_other = run_greedy_batches(quality, positions, embeddings, 115, cfg, 2, tmp_path / "a",
                                              chunk_rows=500)
    assert np.array_equal(other, whole) and info_other["chunks_resumed"] == 0
    assert json.loads((folder / "plan.json").read_text())["batches_per_chunk"] == 7


def test_objectives_that_read_the_whole_pool_keep_the_limit(pruned, tmp_path):
    documents, scores, embeddings = pruned
    assert not batch_local(parse_selection_config("greedy", {}))  # PWS, lam 0.3, standardised: pool statistics
    assert not batch_local(parse_selection_config("greedy", {"diversity": "fl", "lam": 0.0}))
    assert not batch_local(parse_selection_config("greedy", {"diversity": "disf_block", "lam": 0.0}))
    for selection in ({**DISF, "diversity": "fl"}, {**DISF, "standardize": True, "lam": 0.3},
                      {**DISF, "diversity": "pws", "standardize": False, "batch_size": None}):  # one batch: the pool
        with pytest.raises(ScaleLimitError, match=r"limit is 100 items.*greedy streams its batches"):
            run_selection_shards(scores, embeddings, documents, selection, BUDGET, 0, tmp_path / "refused")


@pytest.mark.parametrize("selection", [DISF, {**DISF, "min_quality": 6.0}], ids=["disf", "disf-min_quality"])
def test_a_token_budget_streams_too_and_picks_the_in_memory_documents(pruned, selection, tmp_path):
    documents, scores, embeddings = pruned
    budget = {**BUDGET, "token_ratio": 0.1}
    run = run_selection_shards(scores, embeddings, documents, selection, budget, 4, tmp_path / "w")
    documents_frame = documents.to_frame()
    vectors = np.concatenate([a for _, a in embeddings.iter_arrays()])
    expected = run_selection(scores.to_frame(), vectors, documents_frame, {**selection, "max_items": None}, budget, 4)
    pd.testing.assert_frame_equal(run.selected_ids, expected.selected_ids)
    assert abs(run.metrics["selected_token_error"]) <= 0.01 and run.metrics["info_token_solve_runs"] >= 1
    assert sorted((tmp_path / "w").glob("tokens-S*/greedy/plan.json"))  # each solved size streamed, resumable
