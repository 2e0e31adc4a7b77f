"""The MLflow child runs (a Meta-rater proxy or comparison, a ``decide`` cell) name their metrics
``<stage>/<metric>`` like the pipeline runs (issue #53), and the readers still find them by the name without
the stage."""

from __future__ import annotations

import mlflow
import pytest

from curation.tracking.child_runs import CellRuns, ChildRuns
from curation.tracking.metric_names import history_key, with_flat_columns


@pytest.fixture
def parent(tmp_path):
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    mlflow.set_experiment("children")
    with mlflow.start_run() as run:
        yield run
    mlflow.set_tracking_uri(None)


def _children(parent):
    return mlflow.search_runs(experiment_ids=[parent.info.experiment_id],
                              filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")


def test_metarater_child_runs_log_staged_metrics(parent):
    ChildRuns()("proxy 0", "proxy", {"val_loss": 3.5, "seconds": 1.0, "history": [(0, 5.0), (1, 4.0)]},
                {"lr": 0.1}, {"w_doc_word_count": 0.25})
    runs = _children(parent)
    assert len(runs) == 1
    metrics = {c for c in runs.columns if c.startswith("metrics.")}
    assert {"metrics.metarater/val_loss", "metrics.metarater/seconds", "metrics.metarater/w_doc_word_count",
            "metrics.metarater/train_loss_curve"} == metrics
    flat = with_flat_columns(runs).iloc[0]  # the readers' names, without the stage
    assert flat["metrics.val_loss"] == 3.5 and flat["metrics.w_doc_word_count"] == 0.25
    client = mlflow.MlflowClient()
    run_id = runs["run_id"].iloc[0]
    key = history_key("train_loss_curve", client.get_run(run_id).data.metrics)
    assert key == "metarater/train_loss_curve"
    assert sorted((m.step, m.value) for m in client.get_metric_history(run_id, key)) == [(0, 5.0), (1, 4.0)]


def test_decide_cell_runs_log_staged_metrics(parent):
    CellRuns("decide")("random 1M seed 0", {"candidate": "random"}, {"average": 0.4, "corpus_docs": 10.0,
                                                                        "se": float("nan")})
    runs = _children(parent)
    assert len(runs) == 1 and runs["tags.curation.cell"].iloc[0] == "decide"
    assert {c for c in runs.columns if c.startswith("metrics.")} == {"metrics.decide/average",
                                                                     "metrics.decide/corpus_docs"}
    assert with_flat_columns(runs)["metrics.average"].iloc[0] == 0.4
