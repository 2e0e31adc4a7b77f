"""What a run tells its user: the closing summary, the MLflow run's name, description and
dataset inputs, and an experiment that the MLflow UI opens on its runs table."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest

from curation.tracking.store import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG
from curation.tracking.summary import NOTE_TAG
from tests.conftest import CORPUS_DIR

BIN = Path(sys.executable).parent


def _run(args: list[str], project: Path) -> str:
    env = {**os.environ, "CURATION_PROJECT_ROOT": str(project), "KEDRO_DISABLE_TELEMETRY": "true",
           "COLUMNS": "160"}
    done = subprocess.run(args, cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def _last_run(project: Path):
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{project}/mlruns/mlflow.db")
    experiment = client.get_experiment_by_name("curation")
    (run,) = client.search_runs([experiment.experiment_id], order_by=["start_time DESC"], max_results=1)
    return client, experiment, run


@pytest.mark.slow  # a `curate` subprocess
def test_curate_prints_a_summary_and_names_the_run(project):
    out = _run([str(BIN / "curate"), "pipeline=ingest", f"data.path={CORPUS_DIR}", "data.max_docs=40"], project)
    client, experiment, run = _last_run(project)
    # the port `mlflow ui` will use: 5000 (MLFLOW_PORT) unless that port is taken here
    port = int(re.search(r"--port (\d+)", out).group(1))
    base = f"http://127.0.0.1:{port}"

    # The experiment opens on the runs table in MLflow 3's UI, not on the GenAI overview.
    assert experiment.tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    # The run's name says what ran: the pipeline and the user's overrides (a path by its last part).
    assert run.info.run_name == "ingest path=corpus max_docs=40"
    assert run.data.tags["hydra.overrides"] == f"pipeline=ingest data.path={CORPUS_DIR} data.max_docs=40"

    # The closing summary: counts, where the outputs are, the run and how to open it.
    rejected = project / "data/02_intermediate/default/rejected_documents"
    assert (rejected / "manifest.json").is_file()  # a sharded dataset: a folder with its manifest
    # the first shard is read whole and its 10 near-duplicates of the bundled corpus are dropped (docs/data.md),
    # as duplicate ids are: read 50, kept the first 40
    for text in ("curation: ingest finished", "read", "50 rows from 1 of 4 files", "kept", "40 (80.0%)",
                 "near_duplicate 10",
                 "data/02_intermediate/default/rejected_documents", run.info.run_id,
                 f"mlflow ui --backend-store-uri sqlite:///{project}/mlruns/mlflow.db --port {port}",
                 # both URLs open in the model-training view (MLflow 3.17 opens a run under GenAI otherwise)
                 f"{base}/#/experiments/{experiment.experiment_id}/runs/{run.info.run_id}?workflowType=machine_learning",
                 f"{base}/#/experiments/{experiment.experiment_id}/runs?workflowType=machine_learning"):
        assert text in out, (text, out[-3000:])
        assert "@shards  data/" not in out  # outputs named as users know them (documents, not documents@shards)
    # ... and the same summary is the run's description in MLflow.
    note = run.data.tags[NOTE_TAG]
    assert "#### ingest" in note and "- read: 50 rows from 1 of 4 files" in note and "rejected_documents" in note

    # The corpus is a dataset input of the run: name, content digest and row count.
    (dataset_input,) = run.inputs.dataset_inputs
    dataset = dataset_input.dataset
    assert dataset.name == "corpus" and len(dataset.digest) == 16
    assert json.loads(dataset.source)["uri"] == str(CORPUS_DIR)
    assert json.loads(dataset.profile)["num_rows"] == 40
    assert {t.key: t.value for t in dataset_input.tags}["mlflow.data.context"] == "corpus"


@pytest.mark.slow  # the session's `kedro run` subprocess
def test_kedro_run_names_the_run_after_its_params_and_logs_its_inputs(kedro_ingest_run):
    out = kedro_ingest_run.stdout
    _, _, run = _last_run(kedro_ingest_run.project)
    assert run.info.run_name == "ingest max_docs=30 path=corpus"
    # max_docs counts kept documents: the first shard's near-duplicates are read and dropped on the way
    assert "curation: ingest finished" in out and re.search(r"kept\s+30 \(", out)
    assert [d.dataset.name for d in run.inputs.dataset_inputs] == ["corpus"]
    assert json.loads(run.inputs.dataset_inputs[0].dataset.profile)["num_rows"] == 30


@pytest.mark.parametrize("max_docs", [-3, 0, 2.5, True])
def test_a_bad_max_docs_is_named_before_ingest(max_docs):
    """The data group's schema refuses it by name (the same check runs at composition, before any node)."""
    from curation.configuration import ConfigError, parse_dataclass
    from curation.data.config import DataConfig

    with pytest.raises(ConfigError, match=r"data\.max_docs"):
        parse_dataclass(DataConfig, {"max_docs": max_docs}, path="data")
    assert parse_dataclass(DataConfig, {"max_docs": 7}, path="data").max_docs == 7


def test_disk_usage_counts_each_file_once_and_names_the_hard_links(tmp_path):
    import os

    from curation.tracking.summary import RunRecord, build_sections, disk_usage

    cache = tmp_path / "cache" / "scoring-0123456789ab"
    cache.mkdir(parents=True)
    (cache / "model.bin").write_bytes(os.urandom(200_000))
    out = tmp_path / "data" / "06_models" / "ns" / "raters"
    out.mkdir(parents=True)
    os.link(cache / "model.bin", out / "model.bin")  # published from the cache by a hard link
    (out / "manifest.json").write_text("{}" * 3000)
    usage = disk_usage([out, out / "model.bin"], tmp_path / "cache", where="data/*/ns")
    model = (cache / "model.bin").stat().st_blocks * 512
    assert usage.files == 2 and usage.linked_bytes == model
    assert usage.outputs_bytes == model + (out / "manifest.json").stat().st_blocks * 512
    assert usage.cache_bytes == model
    rows = dict(next(s for s in build_sections(RunRecord(["__default__"], {}, disk=usage)) if s.title == "disk").rows)
    assert "in 2 files under data/*/ns" in rows["outputs"] and "hard-linked from the result cache" in rows["outputs"]
    assert usage.as_metrics()["disk/outputs_bytes"] == usage.outputs_bytes


def test_remove_staging_removes_the_namespace_stage_folders_but_not_a_nested_namespace(tmp_path):
    from curation.shards.work import STAGING, remove_staging

    base = tmp_path / STAGING
    (base / "ns" / "scoring-0123456789abcdef" / "fit").mkdir(parents=True)
    (base / "ns" / "scoring-0123456789abcdef" / "fit" / "model.bin").write_bytes(b"x" * 10_000)
    (base / "ns" / "ingest-89abcdef01234567").mkdir()
    sweep_job = base / "ns" / "multirun" / "2026-01-01_00-00-00" / "0" / "selection-0123456789abcdef"
    sweep_job.mkdir(parents=True)  # another namespace (a sweep job), maybe running: kept
    assert remove_staging(tmp_path, "ns") >= 10_000
    assert sorted(p.name for p in (base / "ns").iterdir()) == ["multirun"] and sweep_job.is_dir()
    assert remove_staging(tmp_path, "ns/multirun/2026-01-01_00-00-00/0") == 0  # empty folders: nothing to free
    assert not (base / "ns").exists() and base.is_dir()  # empty parents go, up to .staging


def test_run_tempdir_holds_the_runs_temporary_files_and_clears_a_killed_runs(tmp_path):
    import tempfile

    from curation.shards.work import STAGING, run_tempdir

    folder = tmp_path / STAGING / "ns" / "tmp"
    folder.mkdir(parents=True)
    (folder / "fasttext_model_left.bin").write_bytes(b"x" * 1000)  # left by a run killed before its finally
    before = tempfile.gettempdir()
    with run_tempdir(tmp_path, "ns") as held:
        assert held == folder and not (folder / "fasttext_model_left.bin").exists()
        fd, path = tempfile.mkstemp(prefix="fasttext_train_")
        os.close(fd)
        assert Path(path).parent == folder
        os.unlink(path)
    assert tempfile.gettempdir() == before
    assert not (tmp_path / STAGING / "ns").exists()  # empty: removed


def test_a_selection_read_from_the_cache_says_its_time_is_the_original_runs():
    from curation.tracking.summary import RunRecord, build_sections

    def rows(hit: float) -> dict:
        run = {"budget_docs": 50.0, "candidates": 381.0, "selection_seconds": 811.61, "selection_cache_hit": hit}
        record = RunRecord(["__default__"], {"selection": {"method": "datamask"}}, {"selection_run_metrics": run})
        return dict(next(s for s in build_sections(record) if s.title.startswith("selection")).rows)

    assert rows(1.0)["selected"] == "50 of 381 candidates in 811.61 s (from cache: the time of the run that made it)"
    assert rows(0.0)["selected"] == "50 of 381 candidates in 811.61 s"


def test_the_roc_auc_line_says_whose_labels_it_is_on():
    """On a user's corpus the default raters' ROC-AUC is measured on the bundled corpus's held-out labels: the
    line says so, and says "this corpus's" with training.source=corpus (issue #53)."""
    from curation.tracking.summary import RunRecord, build_sections

    def line(reference: float, params: dict | None = None) -> str:
        scoring = {"quality_mean": 6.5, "roc_auc_quality": 0.753, "roc_auc_n_eval": 242.0,
                   "training_source_reference": reference}
        record = RunRecord(["__default__"], params or {}, {"scoring_metrics": scoring})
        return dict(next(s for s in build_sections(record) if s.title == "scoring").rows)["ROC-AUC"]

    assert line(1.0) == "merged quality 0.753 on the bundled corpus's 242 held-out human labels"
    assert line(0.0) == "merged quality 0.753 on this corpus's 242 held-out human labels"
    # the bundled corpus only where it is the reference corpus (scoring.training.reference_path)
    bundled = {"scoring": {"training": {"reference_path": "data/01_raw/corpus"}}}
    assert line(1.0, bundled) == "merged quality 0.753 on the bundled corpus's 242 held-out human labels"
    other = {"scoring": {"training": {"reference_path": "/data/labelled"}}}
    assert line(1.0, other) == ("merged quality 0.753 on 242 held-out human labels of the reference corpus "
                                "/data/labelled")


def test_the_printed_ui_port_is_one_the_ui_can_use(monkeypatch):
    """``mlflow ui`` listens on MLFLOW_PORT (default 5000): the summary prints that port when it is free, the
    next free one when something else holds it, and no command when an MLflow UI of this store answers there
    (it knows the run: ``/api/2.0/mlflow/runs/get``)."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from curation.tracking import ui

    class FakeMlflow(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 -- http.server's name
            run_id = self.path.partition("run_id=")[2]
            known = run_id == "a" * 32
            self.send_response(200 if known else 404)
            self.end_headers()
            self.wfile.write(json.dumps({"run": {"info": {"run_id": run_id}}} if known else {}).encode())

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), FakeMlflow)
    busy = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("MLFLOW_PORT", str(busy))
        serving = ui.ui_address("sqlite:////tmp/x/mlflow.db", "a" * 32)  # a UI of this store: no command
        assert serving.command is None and serving.serving and serving.base == f"http://127.0.0.1:{busy}"
        other = ui.ui_address("sqlite:////tmp/x/mlflow.db", "b" * 32)  # another store's UI holds the port
        port = int(other.command.rsplit(" ", 1)[1])
        assert port > busy and other.base == f"http://127.0.0.1:{port}" and not other.serving
    finally:
        server.shutdown()
        server.server_close()
    assert ui.ui_address("sqlite:////tmp/x/mlflow.db").command.endswith(f"--port {busy}")  # free again
    assert ui.ui_address("http://mlflow.internal:5000/").base == "http://mlflow.internal:5000"
    assert ui.run_url("http://h:1", "3", "abc") == "http://h:1/#/experiments/3/runs/abc?workflowType=machine_learning"


def test_sweep_summary_puts_the_swept_parameters_first_and_reads_old_stores():
    import pandas as pd

    from curation.tracking.metric_names import history_key, staged, unstaged, with_flat_columns
    from curation.tracking.naming import sweep_name
    from curation.tracking.sweep_summary import key_metric_columns, summary_frame

    assert staged("document_stats_metrics", "docs") == "ingest/docs" and unstaged("selection/joint") == "joint"
    assert history_key("joint", ["selection/datamask_joint", "selection/joint"]) == "selection/joint"
    assert history_key("joint", ["joint"]) == "joint"  # a store from before the stages
    name = sweep_name(["pipeline=selection", "selection=datamask", "selection.lam=0.1,0.3",
                       "tracking.uri=sqlite:////very/long/path/mlflow.db"], {"selection": {"method": "datamask"}})
    assert name == "sweep selection datamask lam=0.1,0.3"
    children = pd.DataFrame({
        "run_id": ["b", "a"], "status": ["FINISHED"] * 2, "start_time": [2, 1], "tags.hydra.job.num": ["1", "0"],
        "tags.mlflow.runName": ["selection datamask lam=0.3 #1", "selection datamask lam=0.1 #0"],
        "params.aaa": ["x", "x"], "params.run.namespace": ["n/1", "n/0"], "params.selection.lam": ["0.3", "0.1"],
        "metrics.selection/selected_quality_mean": [9.0, 8.0], "metrics.aaa/zzz": [1.0, 2.0],
        "metrics.time/pipeline_seconds": [3.0, 4.0]})
    table = summary_frame(children, ["pipeline=selection", "selection.lam=0.1,0.3"])
    assert list(table.columns[:5]) == ["params.selection.lam", "tags.hydra.job.num", "tags.mlflow.runName",
                                       "status", "metrics.selection/selected_quality_mean"]
    assert list(table["params.selection.lam"]) == ["0.1", "0.3"]  # job order
    assert "params.aaa" not in table and "params.run.namespace" in table  # params that differ only
    old = children.rename(columns=lambda c: "metrics." + unstaged(c[8:]) if c.startswith("metrics.") else c)
    assert key_metric_columns(old) == ["metrics.selected_quality_mean", "metrics.pipeline_seconds"]
    flat = with_flat_columns(children)
    assert list(flat["metrics.selected_quality_mean"]) == [9.0, 8.0] and "metrics.selection/selected_quality_mean" in flat


def test_the_datamask_warning_names_one_fix_per_problem_for_the_final_mask_in_use():
    """The summary's WARNING names the setting that fixes each problem, as the log's warning does: the sampled
    mask's shortfall -> final=topk; the last top-S's (final=topk) -> final=best; an early collapse -> a lower lr."""
    from curation.tracking.summary import RunRecord, build_sections

    def warning(final: str, below: float, premature: float) -> str:
        run = {"budget_docs": 50.0, "candidates": 381.0, "selection_seconds": 1.0, "info_blocks_warned": 1.0,
               "info_blocks_below_topk": below, "info_blocks_premature": premature, "info_n_blocks": 1.0,
               "info_returned_shortfall_max": 0.05, "info_final_entropy_min": 0.1}
        record = RunRecord(["selection"], {"selection": {"method": "datamask", "final": final}},
                           {"selection_run_metrics": run})
        return dict(next(s for s in build_sections(record) if s.title.startswith("selection")).rows)["WARNING"]

    assert warning("sample", 1.0, 0.0).endswith("Fix: selection.final=topk returns the learned top-S "
                                                 "(docs/selection.md)")
    assert "selection.final=best" in warning("topk", 1.0, 0.0) and "final=topk" not in warning("topk", 1.0, 0.0)
    both = warning("sample", 1.0, 1.0)
    assert "selection.final=topk" in both and "a lower selection.lr" in both
    assert "final=" not in warning("sample", 0.0, 1.0)
