"""The metarater pipelines in real KedroSessions, MLflow and a real Hydra multirun, on 300 real documents.

One story, in order: two proxies trained as `curate -m experiment=metarater_proxy` jobs; a
`pipeline=metarater` run killed while training its second proxy; the re-run reuses the three proxies
on disk, trains the other nine, fits LightGBM, searches w*, selects, compares and plots.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest

from curation.config_loader import compose_config
from curation.hydra_app import run_kedro
from curation.metarater.proxy import ProxyBench

pytestmark = pytest.mark.slow  # a `curate -m` multirun and two metarater Kedro jobs: ~3.5 min on 2 busy cores

# 12 proxies of 4 optimizer steps; LightGBM on 6 training rows needs leaves and bins of one row.
OVERRIDES = [
    "metarater.num_proxies=12", "metarater.keep_frac=0.2", "metarater.validation.max_tokens=3000",
    "metarater.proxy.max_tokens=2048", "metarater.proxy.batch_size=4", "metarater.proxy.vocab_size=512",
    "metarater.proxy.tokenizer_docs=200", "metarater.proxy.num_threads=1",
    # the raters never train on a reserved 20% of the reference corpus (this sample comes from it): D_v does too
    "scoring.training.holdout_fraction=0.2", "metarater.validation.fraction=0.05",
    "metarater.validation.test_fraction=0.05", "metarater.validation.test_max_tokens=3000",
    "metarater.regression.protocol=separate_early_stop",
    "metarater.regression.min_child_samples=1", "metarater.regression.test_frac=0.34",
    "metarater.regression.early_stop_frac=0.17", "+metarater.regression.extra.min_data_in_bin=1",
    "metarater.search.n_candidates=4000", "metarater.search.top_k=16", "metarater.search.batch=2000",
    "metarater.comparisons.seeds=[0]", "metarater.comparisons.single_raters=false",
    "metarater.comparisons.num_proxies=[8,12]",
]


def _runs(project: Path) -> pd.DataFrame:
    """The runs, each metric also by its name without the stage (``metrics.proxies_ok`` beside
    ``metrics.metarater/proxies_ok``)."""
    from curation.tracking.metric_names import with_flat_columns

    mlflow.set_tracking_uri(f"sqlite:///{project}/mlruns/mlflow.db")
    return with_flat_columns(mlflow.search_runs(experiment_names=["curation"], order_by=["start_time ASC"]))


def _write_inputs(project: Path, documents: pd.DataFrame, scores: pd.DataFrame) -> None:
    """`documents` and `scores` where the ingest and scoring pipelines would have written them."""
    from curation.datasets import ShardedDataset

    ShardedDataset(path=str(project / "data" / "02_intermediate" / "default" / "documents")).save(documents)
    ShardedDataset(path=str(project / "data" / "04_feature" / "default" / "scores")).save(scores)


@pytest.mark.optin  # opt-in (suite time, 2026-11-28): ~105 s in CI; tests/foundation/test_plain_corpus_pipelines.py runs the
# proxies and the Meta-rater job on a plain corpus in CI
def test_proxy_jobs_then_a_killed_and_resumed_metarater_run(project, documents, scores, monkeypatch):
    _write_inputs(project, documents, scores)

    # 1. Proxies 0 and 1 as a Hydra multirun of the proxy experiment (one MLflow child run per job), with
    #    2 torch threads each; the 1-thread pipeline runs below still reuse them (threads are not part of the key).
    curate = Path(sys.executable).parent / "curate"
    two_threads = [o for o in OVERRIDES if not o.startswith("metarater.proxy.num_threads")]
    # The two jobs run in parallel processes through Hydra's joblib launcher, as the README suggests.
    parallel = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]
    done = subprocess.run([str(curate), "-m", "experiment=metarater_proxy", "metarater.proxy_id=0,1", *parallel,
                           *two_threads],
                          cwd=project, env={**os.environ, "CURATION_PROJECT_ROOT": str(project)},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = _runs(project)
    jobs = runs[runs["tags.mlflow.parentRunId"].notna()].sort_values("metrics.proxy_id")
    assert jobs["metrics.proxy_id"].tolist() == [0.0, 1.0] and (jobs["status"] == "FINISHED").all()
    assert jobs["metrics.val_loss"].notna().all() and "metrics.w_doc_word_count" in jobs
    sweep_dirs = list((project / "data/06_models/default/metarater").glob("sweep-*"))
    assert len(sweep_dirs) == 1 and sorted(p.name for p in sweep_dirs[0].glob("proxy_*.json")) == [
        "proxy_00000.json", "proxy_00001.json"]

    # 2. pipeline=metarater, killed while training its second new proxy (proxy 3).
    params = compose_config(project / "conf", ["pipeline=metarater", *OVERRIDES])
    original = ProxyBench.evaluate
    calls = []

    def killed_on_second_call(self, rows, seed=None, on_step=None):
        calls.append(len(rows))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(self, rows, seed, on_step)

    monkeypatch.setattr(ProxyBench, "evaluate", killed_on_second_call)
    with pytest.raises(KeyboardInterrupt):
        run_kedro(params, project_path=project)
    mlflow.end_run(status="KILLED")  # what a real kill leaves behind is a run that never finished
    monkeypatch.setattr(ProxyBench, "evaluate", original)
    assert sorted(p.name for p in sweep_dirs[0].glob("proxy_*.json"))[-1] == "proxy_00002.json"
    stamps = {p.name: p.stat().st_mtime_ns for p in sweep_dirs[0].glob("proxy_*.json")}

    # 3. The re-run reuses proxies 0-2 untouched and finishes everything else.
    run_kedro(compose_config(project / "conf", ["pipeline=metarater", *OVERRIDES]), project_path=project)
    assert all(p.stat().st_mtime_ns == stamps[p.name] for p in sweep_dirs[0].glob("proxy_*.json") if p.name in stamps)
    runs = _runs(project)
    main = runs[runs["tags.kedro.pipelines"] == "metarater"].iloc[-1]
    assert main["status"] == "FINISHED"
    assert (main["metrics.proxies_reused"], main["metrics.proxies_trained"], main["metrics.proxies_ok"]) == (3, 9, 12)
    assert main["metrics.regression_n_test"] == 4
    # Spearman's rho recomputed from the stored proxies and regressor: the test split is the first
    # round(12 x 0.34) = 4 of a permutation seeded with regression.seed (42) over the ok proxies by id
    import pickle

    from scipy.stats import spearmanr

    models = project / "data/06_models/default/metarater"
    proxies = pd.read_parquet(models / "proxy_results.parquet").query("status == 'ok'").sort_values("proxy_id")
    regressor = pickle.loads((models / "regressor.pkl").read_bytes())
    test = np.random.default_rng(42).permutation(len(proxies))[:4]
    weights = proxies[[c for c in proxies.columns if c.startswith("w_")]].to_numpy(dtype=float)
    rho = spearmanr(regressor.predict(weights[test]), proxies["val_loss"].to_numpy()[test]).statistic
    assert main["metrics.regression_spearman_test"] == pytest.approx(rho, abs=1e-9)
    assert np.isfinite(main["metrics.val_loss_metarater_mean"]) and "metrics.val_loss_random_mean" in main
    children = runs[runs["tags.mlflow.parentRunId"] == main["run_id"]]
    kinds = children["tags.curation.metarater.kind"].value_counts().to_dict()
    assert kinds == {"proxy": 12, "comparison": 4, "num_proxies": 2}
    proxies = children[children["tags.curation.metarater.kind"] == "proxy"]
    assert (proxies["tags.curation.metarater.reused"] == "True").sum() == 3
    assert proxies["metrics.val_loss"].notna().all() and proxies["metrics.w_doc_word_count"].notna().all()
    n_at_8 = children[children["tags.mlflow.runName"] == "num_proxies metarater@N=12 seed 0"]
    assert n_at_8["tags.curation.metarater.reused"].tolist() == ["True"]  # = the w* comparison run, not retrained
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(main["run_id"], "plots")}
    assert {"plots/metarater_loss_landscape.png", "plots/metarater_num_proxies.png"} <= artifacts  # as on disk

    # Outputs on disk: w* table, final selection (never a validation document), comparisons, N curve.
    reporting, output = project / "data/08_reporting/default", project / "data/07_model_output/default"
    weights = pd.read_csv(reporting / "metarater_weights.csv")
    assert len(weights) == 11 and weights["weight_pct"].sum() == pytest.approx(100)  # 11 signals, no merge copies
    assert weights["weight_pct"].is_monotonic_decreasing and weights["rank"].tolist() == list(range(1, 12))
    selected = pd.read_parquet(output / "metarater_selected_ids.parquet")
    held_out = pd.read_parquet(project / "data/05_model_input/default/metarater_validation_ids.parquet")
    assert set(held_out["set"]) == {"validation", "test"} and not set(selected["id"]) & set(held_out["id"])
    # the paper's rule: 20% of the candidates' tokens in their own domain proportions (300 documents: coarse)
    assert abs(main["metrics.budget_error"]) < 0.05 and main["metrics.domain_share_max_gap"] < 0.05
    assert main["tags.curation.metarater.validation"].startswith("D_v (holdout): ")
    comparisons = pd.read_csv(reporting / "metarater_comparisons.csv")
    assert sorted(comparisons["method"]) == ["intersection", "metarater", "random", "uniform"]
    curve = pd.read_csv(reporting / "metarater_num_proxies.csv")
    assert curve["num_proxies"].tolist() == [8, 12]
