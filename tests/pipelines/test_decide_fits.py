"""``decide`` sized for the user's corpus (issue #43 item 5): right after ingest, before scoring and any selection,
the job knows whether every candidate will hold the top rung's training tokens (<= 1 epoch); if not it stops in
one line naming the numbers and the settings that work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from curation.lm import parse_config
from curation.decide.cells import FIT_MARGIN, TooSmallForBudget, check_fits
from curation.pipelines.decide.pipeline import create_pipeline
from tests.conftest import CORPUS_SHARDS

BIN = Path(sys.executable).parent
SMALL = {"tokenizer": {"vocab_size": 512}, "model": {"vocab_size": 512, "max_seq_len": 64, "n_layer": 1, "d_model": 32,
                                                     "n_head": 2, "n_kv_head": 1, "d_ff": 64},
         "train": {"seq_len": 64, "batch_size": 4, "max_tokens": 2048, "val_batches": 2}}


def test_the_check_runs_right_after_ingest_before_scoring():
    names = [n.name for n in create_pipeline().nodes]
    assert names.index("check_decide_fits_node") == names.index("ingest_documents_node") + 1
    assert names.index("check_decide_fits_node") < min(i for i, n in enumerate(names) if "embed" in n or "score" in n)


def test_a_budget_that_fits_returns_its_numbers_and_one_that_does_not_names_the_fix(tmp_path):
    docs = pd.read_parquet(CORPUS_SHARDS[1], columns=["id", "text"]).head(300)
    cache = {"enabled": True, "dir": str(tmp_path / "cache")}
    numbers = check_fits(docs, {"token_ratio": 0.3}, parse_config(SMALL), None, cache)
    assert numbers["decide_epochs_expected"] <= 1 / FIT_MARGIN
    assert numbers["decide_candidate_lm_tokens_expected"] > 0 and numbers["decide_lm_per_reference_token"] > 0
    with pytest.raises(TooSmallForBudget) as err:
        check_fits(docs, {"token_ratio": 0.3}, parse_config(SMALL), [2048, 8_000_000], cache)
    text = str(err.value)
    assert "\n" not in text and "decide.rungs" in text and "a cell trains on 8,000,000" in text
    assert "the top of decide.rungs to at most" in text and "larger corpus" in text  # 8M > the whole corpus


@pytest.mark.optin  # ~75 s on 2 cores: the suite's 15 minutes; the check's message is tested above and the
# bad-input table's decide cases (test_bad_inputs.py) refuse a budget right after ingest in CI
def test_decide_on_a_2000_document_corpus_stops_in_one_line_before_any_selection(project):
    rows = pd.read_parquet(CORPUS_SHARDS[2], columns=["id", "text"]).head(2000)
    path = project / "plain.parquet"
    rows.to_parquet(path, index=False)
    env = {**os.environ, "CURATION_PROJECT_ROOT": str(project), "COLUMNS": "160"}
    env.pop("KEDRO_DISABLE_TELEMETRY", None)
    done = subprocess.run([str(BIN / "curate"), "experiment=decide", f"data.path={path}", "run.namespace=fits"],
                          cwd=project, env={**env, "KEDRO_DISABLE_TELEMETRY": "true"}, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("curate: error:")]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    line = errors[0]
    assert "a cell trains on 262,144" in line and "budget.token_ratio=" in line, line
    # stopped before scoring: nothing was scored, embedded or selected
    assert not (project / "data" / "04_feature" / "fits").exists() or not any(
        (project / "data" / "04_feature" / "fits").iterdir())
    assert not (project / "data" / "07_model_output" / "fits").exists()
