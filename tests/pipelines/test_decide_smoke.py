"""``curate experiment=decide_smoke data.path=<plain id + text parquet>`` (issue #38): the whole decide job
on a user's corpus that has only ``id`` and ``text``, in a fresh project, with seed rounds up to 4 seeds.

300 bundled documents written as a plain parquet; 3 candidates at one token budget, 2 seeds of a 1-layer
model, 2 tasks x 16 items. Checked: every candidate holds the same reference tokens within 1% and no
cell repeats a document; the decisions table has mean_diff / se / p / decided for every pair and metric
(the se recomputed from the cells); the recommendation names a candidate and the scale; MLflow has one
child run per cell under the job's run; the cells run again over the job's outputs load every one from the cache.
"""

from __future__ import annotations

import os
import subprocess
import sys
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import CORPUS_SHARDS

BIN = Path(sys.executable).parent
NS = "decide_smoke"


def _curate(project: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CURATION_PROJECT_ROOT": str(project), "KEDRO_DISABLE_TELEMETRY": "true", "COLUMNS": "160"}
    done = subprocess.run([str(BIN / "curate"), *overrides], cwd=project, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_decide_smoke_on_a_plain_corpus_writes_decisions_and_a_recommendation(project):
    rows = pd.read_parquet(CORPUS_SHARDS[2], columns=["id", "text"]).head(400)
    path = project / "plain.parquet"
    rows.to_parquet(path, index=False)
    first = _curate(project, "experiment=decide_smoke", "decide.max_seeds=4", f"data.path={path}",
                    f"run.namespace={NS}")
    report = project / "data" / "08_reporting" / NS
    cells = pd.read_csv(project / "data" / "07_model_output" / NS / "decide_cells.csv")
    assert set(cells["candidate"]) == {"random", "topk_quality", "datamask"}
    # issue #51: rounds of one seed where the leader is undecided, never past decide.max_seeds=4
    seeds = cells.groupby("candidate")["seed"].nunique()
    assert len(cells[cells["round"] == 1]) == 3 * 2 and (seeds >= 2).all() and (seeds <= 4).all()
    for r in sorted(set(cells["round"]))[1:]:  # each later round adds one new seed to the candidates it names
        assert cells[cells["round"] == r]["seed"].nunique() == 1 and len(cells[cells["round"] == r]) >= 2
    assert "[decide] stopped after" in first.stdout
    budget = cells["budget_tokens"].iloc[0]
    assert (abs(cells["corpus_tokens"] / budget - 1) <= 0.01).all()  # the same tokens for every candidate
    assert (cells["epochs"] <= 1).all() and cells["train_tokens"].nunique() == 1
    table = pd.read_csv(report / "decisions.csv")
    assert {"scale", "size", "corpus_a", "corpus_b", "metric", "mean_diff", "se_seed", "se_item", "se", "p", "p_holm",
            "decided"} <= set(table.columns)
    pairs = {frozenset(p) for p in combinations(["random", "topk_quality", "datamask"], 2)}
    assert {frozenset((a, b)) for a, b in zip(table["corpus_a"], table["corpus_b"])} == pairs
    row = table[table["metric"] == "mc_correct_prob_per_char"].iloc[0]
    a = cells[cells["candidate"] == row["corpus_a"]].set_index("seed")["mc_correct_prob_per_char"]
    b = cells[cells["candidate"] == row["corpus_b"]].set_index("seed")["mc_correct_prob_per_char"]
    common = a.index.intersection(b.index)
    d = a.loc[common] - b.loc[common]
    assert row["mean_diff"] == pytest.approx(d.mean(), rel=1e-6)
    assert row["se_seed"] == pytest.approx(d.std(ddof=1) / np.sqrt(len(d)), rel=1e-6)
    # the full se counts the items too, from the items the run wrote (decide_items.parquet)
    assert row["se_item"] > 0 and row["se"] == pytest.approx(np.hypot(row["se_seed"], row["se_item"]), rel=1e-9)
    items = pd.read_parquet(project / "data" / "07_model_output" / NS / "decide_items.parquet")
    assert set(items["candidate"]) == set(cells["candidate"]) and items["item"].max() == 15  # 16 items per task
    # each seed of the stochastic candidates trained on its own selection draw
    assert cells[cells["candidate"] == "random"]["corpus_digest"].nunique() == seeds["random"]
    assert cells[cells["candidate"] == "topk_quality"]["corpus_digest"].nunique() == 1
    text = (report / "recommendation.md").read_text()
    assert "**Answer: " in text and "reference tokens per candidate" in text and "Why the run stopped:" in text
    assert (report / "decisions.png").stat().st_size > 0 and (report / "item_vs_seed.csv").is_file()
    assert (report / "snr.csv").is_file() and (report / "tasks.csv").is_file() and (report / "ladder.png").is_file()
    assert "answer" in first.stdout and "decided" in first.stdout

    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{project}/mlruns/mlflow.db")
    experiment = client.get_experiment_by_name("decide_smoke")
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert len(parents) == 1 and len(children) == len(cells)
    assert {c.data.params["candidate"] for c in children} == {"random", "topk_quality", "datamask"}
    artifacts = {a.path for a in client.list_artifacts(parents[0].info.run_id, "tables")}
    assert "tables/decisions.csv" in artifacts  # named as on disk

    assert "[decide] cell 6/6" in first.stdout

    # Resumable per cell: the same cells again over the job's outputs and cache load every pick, model and
    # evaluation (a killed job re-run does the same; a half-trained model resumes from its checkpoint)
    from curation.config_loader import compose_config
    from curation.lm import parse_config
    from curation.decide.cells import Frames, run_cells
    from curation.reporting.decide import parse_decide
    from curation.shards import ShardedDataset

    cfg = compose_config(project / "conf", ["experiment=decide_smoke", f"data.path={path}", f"run.namespace={NS}"])
    layer = {"documents": "02_intermediate", "scores": "04_feature", "embeddings": "04_feature",
             "pruned_scores": "05_model_input", "pruned_embeddings": "05_model_input"}

    def read(name):
        data = ShardedDataset(project / "data" / layer[name] / NS / name)
        return data.to_frame() if data.manifest.kind == "frame" else np.concatenate([a for _, a in data.iter_arrays()])

    frames = Frames(*(read(n) for n in layer))
    decide = parse_decide(cfg["decide"])
    cache = {**cfg["cache"], "dir": str(project / cfg["cache"]["dir"])}
    again, _ = run_cells(frames, decide.candidates, decide.sizes, decide.seeds, cfg["budget"],
                         parse_config(cfg["pretrain"]), cfg["eval"], int(cfg["run"]["seed"]), cache,
                         rungs=decide.rungs, draws=decide.draws)
    assert (again["pretrain_cache_hit"] == 1).all() and (again["eval_cache_hit"] == 1).all()
    assert again["mc_correct_prob_per_char"].tolist() == pytest.approx(
        cells[cells["round"] == 1]["mc_correct_prob_per_char"].tolist())
