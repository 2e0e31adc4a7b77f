"""Lineage: a stage refuses inputs that were not made from each other (issue 14, item 6)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from curation.pipelines.selection.pipeline import create_pipeline
from curation.shards.lineage import LineageError, check_lineage, check_manifest_inputs

from tests.kedro_nodes import run_node
from tests.shards.conftest import CORPUS


def select_documents(pruned_scores, pruned_embeddings, documents, selection, budget, run, cache):
    """The selection pipeline's ``select_documents_node`` on an in-memory catalog of sharded datasets."""
    out = run_node(create_pipeline, "select_documents_node",
                   {"pruned_scores@shards": pruned_scores, "pruned_embeddings@shards": pruned_embeddings,
                    "documents@shards": documents},
                   {"selection": selection, "budget": budget, "run": run, "data": {"engine": "local"},
                    "cache": cache})
    return (out["selected_ids"], out["selected_documents@shards"], out["selection_history"],
            out["selection_run_metrics"])


@pytest.fixture(scope="module")
def docs400() -> pd.DataFrame:
    return pd.read_parquet(sorted(CORPUS.glob("*.parquet"))[0], columns=["id", "text"]).iloc[:400]


def test_selection_refuses_pruned_scores_of_an_older_ingest(docs400, tmp_path):
    """Today's bug: ingest 400, score+prune, ingest 250, select -> 25 ids, 16 documents, exit 0.
    Now the selection node stops before selecting, naming the stale dataset and its command."""
    from curation.pruning import PruningConfig, prune_shards
    from tests.sharded_inputs import write_array, write_frame

    rng = np.random.default_rng(0)
    cuts = [np.arange(0, 150), np.arange(150, 400)]
    documents = write_frame(docs400, tmp_path / "documents", cuts, "ingest")
    fp = documents.fingerprint
    scores = write_frame(pd.DataFrame({"id": docs400["id"], "quality": rng.uniform(0, 15, 400)}), tmp_path / "scores",
                         cuts, "scoring", inputs={"documents": fp}, aligned_with=fp)
    embeddings = write_array(rng.standard_normal((400, 8)).astype("float32"), tmp_path / "embeddings", cuts,
                             "scoring", inputs={"documents": fp}, aligned_with=fp)
    pruned = prune_shards(scores, embeddings, PruningConfig(), tmp_path / "pruned")  # pruning kept ~290 of 400
    docs250 = write_frame(docs400.iloc[:250], tmp_path / "documents250", [np.arange(0, 150), np.arange(150, 250)],
                          "ingest")  # re-ingested with data.max_docs=250
    cache = {"dir": str(tmp_path / "cache"), "enabled": True}
    with pytest.raises(LineageError, match=r"pruned_scores was made from documents .* but the current documents is "
                                           r".*curate pipeline=scoring\+pruning"):
        select_documents(pruned.scores, pruned.embeddings, docs250, {"method": "random"},
                         {"keep_ratio": 0.1}, {"seed": 0}, cache)
    # The inputs that belong together still select, and every selected id has its document.
    ids, selected, _, _ = select_documents(pruned.scores, pruned.embeddings, documents, {"method": "random"},
                                           {"keep_ratio": 0.1}, {"seed": 0}, cache)
    assert len(selected) == len(ids) == 40


def test_embeddings_not_aligned_with_scores_are_refused(docs400):
    scores = pd.DataFrame({"id": docs400["id"], "quality": 0.0})
    with pytest.raises(LineageError, match="pruned_embeddings has 399 rows but pruned_scores has 400"):
        check_lineage("selection", "documents", docs400, {"pruned_scores": scores},
                      aligned={"pruned_embeddings": (np.zeros((399, 4)), "pruned_scores")})


def test_recorded_fingerprints_win_over_ids(docs400):
    """Same ids, other content: only the recorded fingerprints can tell, and they do."""
    documents = docs400.copy()
    documents.attrs["fingerprint"] = "new-fp"
    scores = pd.DataFrame({"id": docs400["id"], "quality": 0.0})
    scores.attrs["inputs"] = {"documents": "old-fp"}
    with pytest.raises(LineageError, match="scores was made from documents old-fp.*current documents is new-fp"):
        check_lineage("pruning", "documents", documents, {"scores": scores})
    with pytest.raises(LineageError, match="embeddings was made from documents a1.*`curate pipeline=scoring`"):
        check_manifest_inputs("pruning", "embeddings", {"documents": "a1"}, {"documents": "b2"})
    check_manifest_inputs("pruning", "embeddings", {"documents": "a1"}, {"documents": "a1"})
