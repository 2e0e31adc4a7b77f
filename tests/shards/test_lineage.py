"""Lineage: a stage refuses inputs that were not made from each other (issue 14, item 6)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from curation.pipelines.selection.pipeline import create_pipeline
from curation.shards.lineage import LineageError, check_lineage, check_manifest_inputs

from tests.kedro_nodes import run_node
from tests.shards.conftest import CORPUS


def select_documents(pruned_scores, pruned_embeddings, documents, selection, budget, run):
    """The selection pipeline's ``select_documents_node`` on an in-memory catalog."""
    out = run_node(create_pipeline, "select_documents_node",
                   {"pruned_scores": pruned_scores, "pruned_embeddings": pruned_embeddings, "documents@frame": documents},
                   {"selection": selection, "budget": budget, "run": run})
    return out["selected_ids"], out["selected_documents"], out["selection_history"], out["selection_run_metrics"]


@pytest.fixture(scope="module")
def docs400() -> pd.DataFrame:
    return pd.read_parquet(sorted(CORPUS.glob("*.parquet"))[0], columns=["id", "text"]).iloc[:400]


def test_selection_refuses_pruned_scores_of_an_older_ingest(docs400):
    """Today's bug: ingest 400, score+prune, ingest 250, select -> 25 ids, 16 documents, exit 0.
    Now the selection node stops before selecting, naming the stale dataset and its command."""
    rng = np.random.default_rng(0)
    kept = np.sort(rng.choice(400, size=300, replace=False))  # pruning kept 300 of the 400
    pruned_scores = pd.DataFrame({"id": docs400["id"].to_numpy()[kept], "quality": rng.random(300)})
    pruned_embeddings = rng.standard_normal((300, 8)).astype("float32")
    docs250 = docs400.iloc[:250].reset_index(drop=True)  # re-ingested with data.max_docs=250
    with pytest.raises(LineageError, match=r"ids of pruned_scores are not in documents .*"
                                           r"curate pipeline=scoring\+pruning"):
        select_documents(pruned_scores, pruned_embeddings, docs250, {"method": "random"},
                         {"keep_ratio": 0.1}, {"seed": 0})
    # The inputs that belong together still select, and every selected id has its document.
    ids, selected, _, _ = select_documents(pruned_scores, pruned_embeddings, docs400, {"method": "random"},
                                           {"keep_ratio": 0.1}, {"seed": 0})
    assert len(selected) == len(ids) > 0


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
