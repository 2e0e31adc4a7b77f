"""`curate pipeline=ufw_classifier` from a fresh project (Ultra-FineWeb Sec. 2.2-2.5, 3.2), in a real KedroSession.

A fresh project (no ingested documents, empty cache) runs the pipeline alone on 300 real documents with a micro
model and 3 items of one task: ingest, the five category pools each verified at 2 seeds, the classifier's two
rounds, the corpus scored and the P >= 0.5 filter. MLflow holds each pool's verification result and the
keep rate per category; the kept documents are exactly those the scores keep.
"""

from __future__ import annotations

import mlflow
import pandas as pd
import pytest

from curation.config_loader import compose_config
from curation.hydra_app import run_kedro
from tests.conftest import make_project

# Opt-in (`scripts/test.sh -m optin`): 10 min at load 9, several idle.
pytestmark = [pytest.mark.slow, pytest.mark.optin]  # ingest, a micro base model, 12 annealing runs and evaluations, 2 fastText rounds

MICRO = [
    "data.max_docs=300",
    "pretrain.tokenizer.vocab_size=512", "pretrain.tokenizer.max_docs=50",
    "pretrain.model.vocab_size=512", "pretrain.model.max_seq_len=32", "pretrain.model.n_layer=1",
    "pretrain.model.d_model=32", "pretrain.model.n_head=2", "pretrain.model.n_kv_head=1", "pretrain.model.d_ff=64",
    "pretrain.train.seq_len=32", "pretrain.train.batch_size=4", "pretrain.train.val_batches=1",
    "pretrain.train.num_threads=1", "eval.num_threads=1", "run.torch_threads=1",
    "verification.seed_loop.base_tokens=1280", "verification.seed_loop.candidate_tokens=64",
    "verification.seed_loop.seeds=[0,1]", "verification.seed_loop.tasks=[piqa]", "verification.seed_loop.limit=3",
    "verification.seed_loop.default_docs=100", "verification.seed_loop.train_docs=40",
]
POOLS = ["web", "encyclopedic", "books", "docs", "forum"]


def test_ufw_classifier_runs_alone_on_a_fresh_project_and_logs_pools_and_keep_rates(tmp_path):
    root = make_project(tmp_path / "project")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CURATION_PROJECT_ROOT", str(root))
        mp.chdir(root)
        run_kedro(compose_config(root / "conf", ["pipeline=ufw_classifier", *MICRO]), project_path=root)

    mlflow.set_tracking_uri(f"sqlite:///{root}/mlruns/mlflow.db")
    from curation.tracking.metric_names import with_flat_columns  # metrics.x beside metrics.<stage>/x

    run = with_flat_columns(mlflow.search_runs(experiment_names=["curation"], order_by=["start_time ASC"])).iloc[-1]
    assert run["status"] == "FINISHED" and run["tags.kedro.pipelines"] == "ufw_classifier"
    for pool in POOLS:  # each pool's verification result
        for key in ("mean_gain", "se", "helps", "positive"):
            assert f"metrics.pool_{pool}_{key}" in run and pd.notna(run[f"metrics.pool_{pool}_{key}"])
    for category in [*POOLS, "all"]:  # the classifier's keep rate per category
        assert 0.0 <= run[f"metrics.keep_rate_{category}"] <= 1.0

    decisions = pd.read_csv(root / "data/08_reporting/default/ufw_pool_verification.csv")
    assert sorted(decisions["pool"]) == sorted(POOLS) and (decisions["n_seeds"] == 2).all()
    assert decisions["positive"].any()
    gains = pd.read_csv(root / "data/07_model_output/default/ufw_pool_gains.csv")
    assert len(gains) == len(POOLS) * 2
    scores = pd.read_parquet(root / "data/04_feature/default/ufw_scores.parquet")
    kept = pd.read_parquet(root / "data/07_model_output/default/ufw_kept_documents.parquet")
    assert len(scores) == 300 and set(kept["id"]) == set(scores.loc[scores["keep"], "id"])
    assert (scores.loc[scores["keep"], "ufw_score"] >= 0.5).all()
    training = pd.read_parquet(root / "data/05_model_input/default/ufw_training_set.parquet")
    positives = set(decisions.loc[decisions["positive"], "pool"])
    first = training[training["round"] == 1]
    assert set(first.loc[first["label"] == 1, "origin"]) <= positives
    assert (first["label"] == 1).sum() == (first["label"] == 0).sum()
