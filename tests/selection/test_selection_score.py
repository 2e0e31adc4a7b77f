"""``selection.score``: the scores column a selection ranks (issue #38 item 5: the default job selects top-k by
the Edu rater's own column, not the merged 0-15 quality). Same pick on shards and in memory, the merged
quality kept beside it in ``selected_ids``, a missing column refused naming the key, the default composed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from curation.config_loader import compose_config
from curation.configuration import ConfigError
from curation.pruning import PruningConfig, prune_shards
from curation.selection.corpus import run_selection, run_selection_shards
from tests.sharded_inputs import corpus_frames, write_array, write_frame

CONF = Path(__file__).resolve().parents[2] / "conf"
BUDGET = {"keep_ratio": 0.1, "docs": None, "ratio_of": "corpus", "candidates": None}


@pytest.fixture(scope="module")
def pruned(tmp_path_factory):
    """The first 600 corpus documents in 3 shards, scored by ``quality`` (log2 words) and a second real rater
    ``unique_share`` (distinct words / words), pruned on ``quality``."""
    root = tmp_path_factory.mktemp("score_inputs")
    docs, scores, vectors = corpus_frames(600)
    words = docs["text"].str.lower().str.split()
    scores = scores.assign(unique_share=[len(set(w)) / max(len(w), 1) for w in words])
    cuts = np.array_split(np.arange(len(docs)), 3)
    documents = write_frame(docs, root / "documents", cuts, "ingest")
    fp = documents.fingerprint
    scored = write_frame(scores, root / "scores", cuts, "scoring", inputs={"documents": fp}, aligned_with=fp)
    embedded = write_array(vectors, root / "embeddings", cuts, "scoring", inputs={"documents": fp}, aligned_with=fp)
    out = prune_shards(scored, embedded, PruningConfig(), root / "pruned")
    return documents, out.scores, out.embeddings


def test_a_selection_ranks_the_named_column_and_keeps_the_merged_quality_beside_it(pruned, tmp_path):
    documents, scores, embeddings = pruned
    selection = {"method": "topk_quality", "score": "unique_share"}
    run = run_selection_shards(scores, embeddings, documents, selection, BUDGET, 0, tmp_path / "w")
    frame = scores.to_frame()
    vectors = np.concatenate([a for _, a in embeddings.iter_arrays()])
    expected = run_selection(frame, vectors, documents.to_frame(), selection, BUDGET, 0)
    pd.testing.assert_frame_equal(run.selected_ids, expected.selected_ids)  # shards == in memory
    assert list(run.selected_ids.columns) == ["id", "quality", "unique_share"]
    n = len(run.selected_ids)
    # by hand: the n largest unique_share among the pruned candidates (ties to the earlier document)
    order = np.lexsort((np.arange(len(frame)), -frame["unique_share"].to_numpy()))
    assert set(run.selected_ids["id"]) == set(frame["id"].iloc[order[:n]])
    merged = frame.set_index("id")["quality"]
    assert run.selected_ids["quality"].tolist() == merged.loc[run.selected_ids["id"]].tolist()
    by_quality = run_selection_shards(scores, embeddings, documents, {"method": "topk_quality"}, BUDGET, 0,
                                      tmp_path / "q")
    assert set(by_quality.selected_ids["id"]) != set(run.selected_ids["id"])  # the option changes the pick
    assert list(by_quality.selected_ids.columns) == ["id", "quality"]


@pytest.mark.parametrize("where", ["shards", "frame"])
def test_a_score_column_the_scores_lack_is_refused_naming_the_key_and_the_columns(pruned, tmp_path, where):
    documents, scores, embeddings = pruned
    selection = {"method": "topk_quality", "score": "edu"}
    with pytest.raises(ConfigError, match=r"selection\.score.*'edu' is not a column of the pruned scores.*"
                                          r"'quality', 'unique_share'") as err:
        if where == "shards":
            run_selection_shards(scores, embeddings, documents, selection, BUDGET, 0, tmp_path / "w")
        else:
            run_selection(scores.to_frame(), np.concatenate([a for _, a in embeddings.iter_arrays()]),
                          documents.to_frame(), selection, BUDGET, 0)
    assert "turn that rater on" in str(err.value)
    assert not (tmp_path / "w" / "result.json").exists()


def test_the_default_job_selects_top_k_by_the_edu_rater_and_other_methods_keep_the_merged_quality():
    assert compose_config(CONF)["selection"] == {"method": "topk_quality", "score": "edu", "min_quality": None,
                                                  "max_items": None}
    for method in ("topk_quality", "datamask", "random", "greedy"):
        assert compose_config(CONF, [f"selection={method}"])["selection"]["score"] == "quality"
    with pytest.raises(ConfigError, match="selection.score"):
        compose_config(CONF, ["selection.score=' '"])


def test_a_score_column_of_strings_is_refused_in_one_line_naming_the_key(pruned):
    documents, scores, embeddings = pruned
    frame = scores.to_frame()
    frame = frame.assign(label=["a"] * len(frame))
    with pytest.raises(ConfigError, match=r"^selection\.score='label': the scores' column 'label' holds \w+ values, "
                                          r"not numbers\. Fix: set selection\.score to a numeric score column"):
        run_selection(frame, np.concatenate([a for _, a in embeddings.iter_arrays()]), documents.to_frame(),
                      {"method": "topk_quality", "score": "label"}, BUDGET, 0)
