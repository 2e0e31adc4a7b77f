"""Every pipeline on a user's plain corpus, a parquet of ``id`` and ``text`` only (issue #39, item 2).

- In a namespace without ingested documents, each pipeline that reads the default job's outputs (metarater,
  metarater_proxy, verification, table2, pretrain, evaluate) stops before its first node with one line naming
  the datasets, the namespace and the command that makes them (``curation.runtime_hooks.InputsHook``); it
  writes nothing there and opens no MLflow run. ``pipeline=table2`` without its settings names the
  experiment that carries them.
- After the default job on the plain corpus, each of them runs (tiny models, few steps) with no category,
  source or label column anywhere.
- ``ufw_classifier`` (its own ingest included) verifies the corpus's categories as seed pools; on a plain
  corpus it takes each value of a ``source`` column as a pool, the file pools alone when some are named,
  and otherwise stops after ingest with one line naming the option that adds a file pool.
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
from curation.errors import user_message
from curation.hydra_app import run_kedro
from curation.runtime_hooks import MissingInputError, missing_inputs_message
from curation.verification.config import PoolSpec, SeedLoopConfig
from curation.verification.seed_loop import (
    SeedPoolError,
    domain_pools,
    keep_rates,
    run_rounds,
    seed_pools,
    seed_training_set,
)
from tests.conftest import CORPUS_SHARDS, make_project

BIN = Path(sys.executable).parent
DOCS = 300

# tiny settings of the LM pipelines (tests/pipelines/test_lm_pipelines.py) and of Meta-rater
# (tests/metarater/test_metarater_pipeline.py)
MICRO = [
    "pretrain.tokenizer.vocab_size=512", "pretrain.tokenizer.max_docs=50",
    "pretrain.model.vocab_size=512", "pretrain.model.max_seq_len=32", "pretrain.model.n_layer=1",
    "pretrain.model.d_model=32", "pretrain.model.n_head=2", "pretrain.model.n_kv_head=1", "pretrain.model.d_ff=64",
    "pretrain.train.seq_len=32", "pretrain.train.batch_size=4", "pretrain.train.max_steps=6",
    "pretrain.train.val_batches=1", "pretrain.train.num_threads=1", "run.torch_threads=1",
    "eval.limit=5", "eval.tasks=[piqa,arc_easy]", "eval.num_threads=1",
]
VERIFICATION = ["verification.base_tokens=1024", "verification.anneal_steps=4", "verification.ratios=[0.5]",
                "verification.tasks=[piqa]", "verification.limit=5", "verification.default_docs=40"]
METARATER = [
    "metarater.num_proxies=12", "metarater.keep_frac=0.2", "metarater.validation.max_tokens=3000",
    "metarater.proxy.max_tokens=2048", "metarater.proxy.batch_size=4", "metarater.proxy.vocab_size=512",
    "metarater.proxy.tokenizer_docs=200", "metarater.proxy.num_threads=1",
    "metarater.validation.fraction=0.05", "metarater.validation.test_fraction=0.05",
    "metarater.validation.test_max_tokens=3000", "metarater.regression.protocol=separate_early_stop",
    "metarater.regression.min_child_samples=1", "metarater.regression.test_frac=0.34",
    "metarater.regression.early_stop_frac=0.17", "+metarater.regression.extra.min_data_in_bin=1",
    "metarater.search.n_candidates=4000", "metarater.search.top_k=16", "metarater.search.batch=2000",
    "metarater.comparisons.seeds=[0]", "metarater.comparisons.single_raters=false",
    "metarater.comparisons.num_proxies=[8,12]",
]
DEFAULT_JOB = ["embedding.show_progress=false", "selection=datamask", "selection.steps=20", "selection.history_every=5",
               "selection.group_size=16", "budget.keep_ratio=0.3"]

# pipeline -> (the overrides that select it, what it reads from the default job)
PIPELINES = {
    "metarater": (["pipeline=metarater"], "documents and scores"),
    "metarater_proxy": (["experiment=metarater_proxy", "metarater.proxy_id=0"], "documents and scores"),
    "verification": (["pipeline=verification"],
                     "documents, scores, embeddings, pruned_scores, pruned_embeddings and selected_documents"),
    "table2": (["experiment=table2_tiny", "table2.corpus=edu"],
               "documents, scores, embeddings, pruned_scores and pruned_embeddings"),
    "pretrain": (["pipeline=pretrain"], "documents and selected_documents"),
    "evaluate": (["pipeline=evaluate"], "lm_checkpoint"),
}


def _plain_corpus(path: Path, n: int = DOCS, **columns) -> Path:
    """The first ``n`` documents of the bundled corpus as a user's parquet: ``id`` and ``text`` only (and
    ``columns``, arrays of ``n`` values)."""
    frame = pd.read_parquet(CORPUS_SHARDS[0], columns=["id", "text"]).head(n)
    for name, values in columns.items():
        frame[name] = values
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(path, index=False)
    return path


def _run(root: Path, *overrides: str) -> None:
    run_kedro(compose_config(root / "conf", [f"data.path={root / 'plain.parquet'}", *overrides]), project_path=root)


def _runs(root: Path, experiment: str = "curation") -> pd.DataFrame:
    """The runs, each metric also by its name without the stage (``metrics.train_steps`` beside
    ``metrics.pretrain/train_steps``)."""
    from curation.tracking.metric_names import with_flat_columns

    mlflow.set_tracking_uri(f"sqlite:///{root}/mlruns/mlflow.db")
    return with_flat_columns(mlflow.search_runs(experiment_names=[experiment], order_by=["start_time ASC"]))


@pytest.fixture
def plain_project(tmp_path, monkeypatch) -> Path:
    """A fresh project (nothing ingested) whose ``plain.parquet`` holds 300 documents, ``id`` and ``text``."""
    root = make_project(tmp_path / "project")
    _plain_corpus(root / "plain.parquet")
    monkeypatch.setenv("CURATION_PROJECT_ROOT", str(root))
    monkeypatch.chdir(root)
    return root


# --- the message ---------------------------------------------------------------------------------------------


def test_the_missing_inputs_message_names_datasets_namespace_and_the_command_that_makes_them():
    fresh = missing_inputs_message(["metarater"], {"mine": ["documents", "scores"]}, {"mine": False},
                                   "/data/plain.parquet")
    assert fresh == ("pipeline=metarater reads documents and scores from namespace 'mine', which has no ingested "
                     "documents yet: run the default job there first, `curate run.namespace=mine "
                     "data.path=/data/plain.parquet` (ingest, scoring, pruning, selection), or point run.namespace "
                     "at a namespace that has them.")
    # documents there: only the stages from the first missing one on
    assert missing_inputs_message(["table2"], {"mine": ["pruned_scores", "pruned_embeddings"]}, {"mine": True}) == (
        "pipeline=table2 reads pruned_scores and pruned_embeddings from namespace 'mine', which has none yet: run "
        "`curate run.namespace=mine pipeline=pruning` first.")
    assert missing_inputs_message(["pretrain"], {"mine": ["scores", "selected_documents"]}, {"mine": True}) == (
        "pipeline=pretrain reads scores and selected_documents from namespace 'mine', which has none yet: run "
        "`curate run.namespace=mine pipeline=scoring+pruning+selection` first.")
    assert missing_inputs_message(["evaluate"], {"mine": ["lm_checkpoint"]}, {"mine": True}) == (
        "pipeline=evaluate reads lm_checkpoint from namespace 'mine', which has none yet: run "
        "`curate run.namespace=mine pipeline=pretrain` first.")
    # nothing at all: the default job, then pre-training
    assert "`curate run.namespace=x data.path=<your corpus>` (ingest, scoring, pruning, selection), then " \
           "`curate run.namespace=x pipeline=pretrain`" in missing_inputs_message(
               ["evaluate"], {"x": ["lm_checkpoint"]}, {"x": False})


# --- a namespace without ingested documents: one line, nothing written ---------------------------------------


@pytest.mark.slow  # six Kedro sessions in process: ~16 s on 2 busy cores
def test_each_pipeline_in_a_namespace_without_documents_stops_with_one_line_and_writes_nothing(plain_project):
    root = plain_project
    corpus = root / "plain.parquet"
    for name, (overrides, reads) in PIPELINES.items():
        with pytest.raises(MissingInputError) as err:
            _run(root, *overrides, "run.namespace=fresh")
        message = user_message(err.value)
        assert message == str(err.value) and "\n" not in message, name
        pipeline = "table2" if name == "table2" else name
        assert message.startswith(f"pipeline={pipeline} reads {reads} from namespace 'fresh', "), message
        if name == "evaluate":
            assert "then `curate run.namespace=fresh pipeline=pretrain`" in message, message
        else:
            assert f"`curate run.namespace=fresh data.path={corpus}` (ingest, scoring, pruning, selection)" in message
    # refused before its first node and before the MLflow run: no folder of the namespace, no run
    assert not [p for p in (root / "data").glob("*/fresh")], list((root / "data").glob("*/fresh"))
    assert _runs(root).empty


def test_table2_without_its_settings_names_the_experiment_that_carries_them(plain_project):
    with pytest.raises(MissingInputError, match=r"^pipeline=table2 reads params:table2, but the config has no "
                                                r"table2 settings: add experiment=table2_tiny\b"):
        _run(plain_project, "pipeline=table2")


@pytest.mark.slow  # a `curate` and two `kedro run` subprocesses
def test_curate_and_kedro_run_print_the_one_line_and_the_trace_only_when_asked(plain_project):
    root = plain_project
    env = {**os.environ, "CURATION_PROJECT_ROOT": str(root), "KEDRO_DISABLE_TELEMETRY": "true"}
    env.pop("HYDRA_FULL_ERROR", None)
    line = "pipeline=metarater reads documents and scores from namespace 'fresh', which has no ingested documents yet"
    curate = subprocess.run([str(BIN / "curate"), "pipeline=metarater", "run.namespace=fresh"], cwd=root, env=env,
                            capture_output=True, text=True, timeout=300)
    assert curate.returncode == 2 and curate.stderr.splitlines()[-2:][0].startswith(f"curate: error: {line}"), \
        curate.stderr[-3000:]
    assert "Traceback" not in curate.stderr
    kedro = [str(BIN / "kedro"), "run", "--pipelines", "metarater", "--params", "run.namespace=fresh"]
    short = subprocess.run(kedro, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert short.returncode == 2, short.stdout[-2000:] + short.stderr[-3000:]
    assert short.stderr.strip().splitlines() == [
        f"kedro run: error: {line}: run the default job there first, `curate run.namespace=fresh "
        f"data.path=data/01_raw/corpus` (ingest, scoring, pruning, selection), or point run.namespace at a "
        f"namespace that has them.",
        "(the full trace: run again with HYDRA_FULL_ERROR=1 or kedro run --verbose)"], short.stderr[-3000:]
    assert "Traceback" not in short.stdout + short.stderr
    full = subprocess.run([*kedro, "--verbose"], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert full.returncode != 0 and "Traceback" in full.stderr and "MissingInputError" in full.stderr, \
        full.stderr[-3000:]


# --- after the default job on the plain corpus, each pipeline runs --------------------------------------------


@pytest.fixture(scope="module")
def plain_default_job(tmp_path_factory) -> Path:
    """A project where the default job ran on the 300-document plain corpus (no category, source or label)."""
    root = make_project(tmp_path_factory.mktemp("plain") / "project")
    _plain_corpus(root / "plain.parquet")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CURATION_PROJECT_ROOT", str(root))
        patch.chdir(root)
        _run(root, *DEFAULT_JOB)
        documents = pd.read_parquet(root / "data/02_intermediate/default/documents/shards")
        assert len(documents) > 250 and not {"category", "source", "quality_label", "extra"} & set(documents)
        yield root


@pytest.fixture
def plain_job(plain_default_job, monkeypatch) -> Path:
    monkeypatch.setenv("CURATION_PROJECT_ROOT", str(plain_default_job))
    monkeypatch.chdir(plain_default_job)
    return plain_default_job


def _finished(root: Path, pipeline: str, experiment: str = "curation") -> pd.Series:
    runs = _runs(root, experiment)
    run = runs[runs["tags.kedro.pipelines"] == pipeline].iloc[-1]
    assert run["status"] == "FINISHED", run
    return run


@pytest.mark.slow  # a tokenizer, 6 steps of a micro LM, 5 items of 2 tasks
def test_pretrain_then_evaluate_run_on_the_plain_corpus(plain_job):
    _run(plain_job, "pipeline=pretrain", *MICRO)
    assert _finished(plain_job, "pretrain")["metrics.train_steps"] == 6
    _run(plain_job, "pipeline=evaluate", *MICRO)
    run = _finished(plain_job, "evaluate")
    assert 0 <= run["metrics.piqa_acc_norm"] <= 1 and 0 <= run["metrics.arc_easy_acc_norm"] <= 1


@pytest.mark.slow  # a micro base model and two annealing runs
def test_verification_runs_on_the_plain_corpus(plain_job):
    _run(plain_job, "pipeline=verification", *MICRO, *VERIFICATION)
    _finished(plain_job, "verification")
    table = pd.read_csv(plain_job / "data/08_reporting/default/verification_table8.csv")
    assert list(table["dataset"]) == ["base", "default_only", "raw", "selection"]


@pytest.mark.slow  # one Table 2 cell: the Edu corpus, a micro LM, its evaluation
def test_a_table2_cell_runs_on_the_plain_corpus(plain_job):
    _run(plain_job, "experiment=table2_tiny", "table2.corpus=edu", *MICRO)
    run = _finished(plain_job, "table2", "table2_tiny")
    assert run["metrics.corpus_docs"] > 0 and run["metrics.train_steps"] == 6


@pytest.mark.slow  # one proxy, then the 12-proxy Meta-rater run (11 more proxies, LightGBM, comparisons)
def test_metarater_proxy_then_metarater_run_on_the_plain_corpus(plain_job):
    _run(plain_job, "experiment=metarater_proxy", "metarater.proxy_id=0", *METARATER)
    _finished(plain_job, "metarater_proxy")
    _run(plain_job, "pipeline=metarater", *METARATER)
    run = _finished(plain_job, "metarater")
    assert run["metrics.proxies_ok"] == 12 and run["metrics.proxies_failed"] == 0
    held_out = pd.read_parquet(plain_job / "data/05_model_input/default/metarater_validation_ids.parquet")
    assert set(held_out["set"]) == {"validation", "test"}
    assert set(held_out["group"]) == {"all"}  # one domain: the corpus has no category column
    selected = pd.read_parquet(plain_job / "data/07_model_output/default/metarater_selected_ids.parquet")
    assert len(selected) > 0 and not set(selected["id"]) & set(held_out["id"])


# --- ufw_classifier: the user's domains as seed pools -------------------------------------------------------


@pytest.mark.slow  # ingest of 300 documents in a Kedro session, then the one line
def test_ufw_classifier_on_a_plain_corpus_stops_after_ingest_naming_the_option(plain_project):
    with pytest.raises(SeedPoolError) as err:
        _run(plain_project, "pipeline=ufw_classifier", *MICRO)
    message = user_message(err.value)
    assert message.startswith("verification.seed_loop.pools: the seed pools web, encyclopedic, books, docs and "
                              "forum are corpus categories, but the 300 ingested documents have no category "
                              "column"), message
    assert "'+verification.seed_loop.pools.good={path: /path/to/seeds.parquet}'" in message and "\n" not in message
    assert (plain_project / "data/02_intermediate/default/documents/manifest.json").is_file()  # ingest is kept
    assert not (plain_project / "data/02_intermediate/default/ufw_seed_pools.parquet").exists()


def _documents(n: int = 60, **columns) -> pd.DataFrame:
    frame = pd.DataFrame({"id": [f"d{i}" for i in range(n)], "text": [f"text number {i}" for i in range(n)]})
    for name, values in columns.items():
        frame[name] = values
    return frame


def test_seed_pools_of_a_corpus_with_sources_are_its_sources():
    docs = _documents(source=["forum a"] * 20 + ["wiki"] * 40)
    pools = seed_pools(docs, SeedLoopConfig())  # the default pools are categories
    assert pools.groupby("pool").size().to_dict() == {"source_forum_a": 20, "source_wiki": 40}
    assert pools["in_corpus"].all()


def test_seed_pools_of_a_corpus_without_domains_are_the_file_pools(tmp_path):
    _documents(5).assign(id=lambda f: "seed" + f["id"]).to_parquet(tmp_path / "seeds.parquet")
    cfg = SeedLoopConfig(pools={"web": PoolSpec(category="web"),
                                "good": PoolSpec(path=str(tmp_path / "seeds.parquet"))})
    assert list(domain_pools(_documents(), cfg)) == ["good"]
    pools = seed_pools(_documents(), cfg)
    assert set(pools["pool"]) == {"good"} and len(pools) == 5 and not pools["in_corpus"].any()
    with pytest.raises(SeedPoolError, match=r"and one source, 'only', so there is no domain"):
        seed_pools(_documents(source="only"), SeedLoopConfig())


def test_the_training_set_and_keep_rates_of_a_corpus_without_sources_use_one_domain():
    docs = _documents()
    pools = pd.DataFrame({"pool": "good", "id": [f"s{i}" for i in range(10)], "text": "x", "in_corpus": False})
    decisions = pd.DataFrame({"pool": ["good"], "positive": [True]})
    training = seed_training_set(docs, pools, decisions, SeedLoopConfig(train_docs=8))
    assert training.groupby(["label", "origin"]).size().to_dict() == {(0, "corpus"): 8, (1, "good"): 8}
    assert set(training.loc[training["label"] == 0, "id"]) <= set(docs["id"])
    rates = keep_rates(pd.DataFrame({"id": docs["id"], "keep": np.arange(60) < 15, "ufw_score": 0.5}))
    assert rates.to_dict("records") == [{"category": "all", "docs": 60, "kept": 15, "keep_rate": 0.25,
                                         "mean_score": 0.5}]
    by_source = keep_rates(pd.DataFrame({"source": ["a", "b"] * 30, "keep": True, "ufw_score": 1.0}))
    assert by_source["category"].tolist() == ["a", "b", "all"]


def test_the_classifier_rounds_run_on_a_corpus_without_category_source_or_labels():
    from curation.scoring.config import scoring_config_from_dict

    texts = pd.read_parquet(CORPUS_SHARDS[0], columns=["id", "text"]).head(200)
    pools = pd.DataFrame({"pool": "good", "id": texts["id"].head(40), "text": texts["text"].head(40),
                          "in_corpus": True})
    decisions = pd.DataFrame({"pool": ["good"], "positive": [True]})
    cfg = SeedLoopConfig(train_docs=40, rounds=2, epoch=2, bucket=10_000)
    training, scores, metrics = run_rounds(texts, pools, decisions, cfg,
                                           scoring_config_from_dict({}).fasttext_ultrafineweb)
    assert list(scores.columns[:1]) == ["id"] and not {"category", "source"} & set(scores.columns)
    assert len(scores) == 200 and scores["ufw_score"].between(0, 1).all()
    assert metrics["round1_positives"] == metrics["round1_negatives"] == 40
    assert set(training.loc[(training["round"] == 1) & (training["label"] == 0), "origin"]) == {"corpus"}
