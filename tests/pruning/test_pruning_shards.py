"""Pruning on shards (issue #14): equal to prune() on the concatenated frame, resumable (Ray == local:
tests/selection/test_selection_shards.py runs pruning and selection under Ray in one session)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from curation.pruning import PruningConfig, prune, prune_shards, quality_histogram
from tests.sharded_inputs import sharded_inputs

MODES = [PruningConfig(), PruningConfig(mode="bottom_pct", bottom_pct=45.0),
         PruningConfig(mode="bottom_pct", bottom_pct=12.5), PruningConfig(mode="threshold", threshold=7.0)]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("pruning_inputs")
    return sharded_inputs(root / "six", 6), sharded_inputs(root / "one", 1)


@pytest.mark.parametrize("config", MODES,
                         ids=lambda c: f"{c.mode}-{c.threshold if c.mode == 'threshold' else c.bottom_pct}")
def test_sharded_pruning_equals_prune_on_the_concatenated_frame(inputs, tmp_path, config):
    (documents, scores, embeddings, (docs, frame, vectors)), one = inputs
    assert frame["quality"].value_counts().max() > 100  # integer scores: many ties at any cut
    keep, report = prune(frame, config)
    out = prune_shards(scores, embeddings, config, tmp_path / "six")
    pruned = out.scores.to_frame()
    assert pruned.equals(frame.loc[keep].reset_index(drop=True))
    stacked = np.concatenate([a for _, a in out.embeddings.iter_arrays()])
    assert np.array_equal(stacked, vectors[keep])
    assert out.scores.names == scores.names and out.embeddings.names == scores.names  # documents' layout
    assert [s.rows for s in out.embeddings.manifest.shards] == [s.rows for s in out.scores.manifest.shards]
    for key in ("docs_in", "kept", "dropped_low_quality", "dropped_nan_quality", "kept_share", "cut_quality"):
        assert out.report[key] == report[key] or (np.isnan(out.report[key]) and np.isnan(report[key])), key
    assert out.report["dropped_nan_quality"] == 4
    for key in ("quality_mean_before", "quality_mean_after"):
        assert out.report[key] == pytest.approx(report[key], rel=1e-12)
    expected = quality_histogram(frame["quality"].to_numpy(), keep)
    pd.testing.assert_frame_equal(out.table, expected, check_dtype=False)
    # one shard gives the same rows
    single = prune_shards(one[1], one[2], config, tmp_path / "one")
    assert single.scores.to_frame().equals(pruned)
    # lineage: the pruned set records what it was made from
    assert out.scores.manifest.inputs == {"scores": scores.fingerprint, "embeddings": embeddings.fingerprint,
                                          "documents": documents.fingerprint}
    assert out.embeddings.manifest.aligned_with == out.scores.fingerprint


def test_bottom_pct_ties_split_across_shards_in_shard_then_row_order(tmp_path):
    from tests.sharded_inputs import write_array, write_frame

    q = np.array([5.0, 1.0, 5.0, 5.0, 2.0, 9.0, 5.0, 3.0, 5.0, 8.0, 5.0, 5.0])
    frame = pd.DataFrame({"id": [f"d{i}" for i in range(len(q))], "quality": q})
    cuts = [np.arange(0, 1), np.arange(1, 4), np.arange(4, 4), np.arange(4, 12)]  # incl. an empty shard
    scores = write_frame(frame, tmp_path / "s", cuts, "scoring")
    emb = write_array(np.eye(len(q), dtype=np.float32), tmp_path / "e", cuts, "scoring")
    config = PruningConfig(mode="bottom_pct", bottom_pct=50.0)  # 6 dropped: 1, 2, 3 and three tied 5s
    keep, _ = prune(frame, config)
    out = prune_shards(scores, emb, config, tmp_path / "w")
    assert out.scores.to_frame()["id"].tolist() == frame["id"][keep].tolist()
    assert np.flatnonzero(~keep).tolist() == [0, 1, 2, 3, 4, 7]  # the first three tied 5s span two shards


def test_a_killed_run_resumes_and_a_finished_one_is_read_back(inputs, tmp_path):
    (documents, scores, embeddings, _), _ = inputs
    config = PruningConfig(mode="bottom_pct", bottom_pct=45.0)
    first = prune_shards(scores, embeddings, config, tmp_path / "a")
    # simulate a kill after three shards: remove the manifests, the report and the last markers
    work = tmp_path / "a"
    for path in [work / "report.json", work / "pruned_scores" / "manifest.json",
                 work / "pruned_embeddings" / "manifest.json"]:
        path.unlink()
    for name in scores.names[3:]:
        (work / "pruned_scores" / "completions" / name).unlink()
    stamp = {n: (work / "pruned_scores" / "shards" / f"{n}.parquet").stat().st_mtime_ns for n in scores.names[:3]}
    again = prune_shards(scores, embeddings, config, work)
    assert again.scores.fingerprint == first.scores.fingerprint
    assert again.embeddings.fingerprint == first.embeddings.fingerprint
    assert {n: (work / "pruned_scores" / "shards" / f"{n}.parquet").stat().st_mtime_ns
            for n in scores.names[:3]} == stamp  # finished shards were not redone
    assert json.loads((work / "report.json").read_text())["report"] == first.report


def test_misaligned_inputs_and_nan_error_are_refused(inputs, tmp_path):
    from curation.shards.lineage import LineageError

    (documents, scores, embeddings, _), (_, one_scores, one_emb, _) = inputs
    with pytest.raises(LineageError, match="not aligned"):
        prune_shards(scores, one_emb, PruningConfig(), tmp_path / "x")
    with pytest.raises(ValueError, match="4 documents have no finite 'quality'"):
        prune_shards(scores, embeddings, PruningConfig(mode="bottom_pct", nan_policy="error"), tmp_path / "y")
    with pytest.raises(ValueError, match="no finite 'quality' score"):
        prune_shards(scores, embeddings, PruningConfig(nan_policy="error"), tmp_path / "z")
