"""A user's own corpus, as docs/data.md describes it (``id`` + ``text``), through the default job (issue 25).

One plain parquet made from 300 bundled rows, its columns in another order and with an unrelated
column: ``curate data.path=plain.parquet run.namespace=...`` runs ingest -> scoring -> pruning ->
selection on it with the raters that need labels trained on the reference corpus
(``scoring.training.source=reference``, the default); the same command twice with the cache off
selects exactly the same ids; a run killed with SIGKILL in the middle of scoring and run again
(the defaults: cache on, so it resumes from the killed run's finished work) selects them too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from curation.shards import ShardedDataset
from tests.conftest import CORPUS_SHARDS
from tests.processes import HELD_ENV, held_curate, wait_for

BIN = Path(sys.executable).parent
DOCS = 300


def _env(project: Path) -> dict[str, str]:
    return {**os.environ, "CURATION_PROJECT_ROOT": str(project), "KEDRO_DISABLE_TELEMETRY": "true"}


def _curate(project: Path, *overrides: str) -> subprocess.CompletedProcess:
    done = subprocess.run([str(BIN / "curate"), *overrides], cwd=project, env=_env(project), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def _selected(project: Path, namespace: str) -> list[str]:
    ids = pd.read_parquet(project / "data" / "07_model_output" / namespace / "selected_ids.parquet")["id"]
    return ids.tolist()


def _disk(*folders: Path) -> int:
    """Bytes of the files under ``folders``, each file once (hard links are one file); symlinks not followed."""
    seen: dict[tuple[int, int], int] = {}
    for folder in folders:
        for root, _, files in os.walk(folder):
            for name in files:
                st = os.lstat(os.path.join(root, name))
                seen[(st.st_dev, st.st_ino)] = st.st_size
    return sum(seen.values())


def _plain_corpus(project: Path) -> Path:
    rows = pd.read_parquet(CORPUS_SHARDS[1]).head(DOCS)
    plain = pd.DataFrame({"text": rows["text"], "note": "unrelated", "id": rows["id"]})  # not id, text
    path = project / "plain.parquet"
    plain.to_parquet(path, index=False)
    return path


# ~4.5 min on 2 cores (three default jobs and a kill): opt-in, `scripts/test.sh -m optin`.
@pytest.mark.slow  # every optin test is slow too: `-m "not slow"` replaces the default `-m 'not optin'`
@pytest.mark.optin
def test_a_plain_id_text_corpus_runs_the_default_job_the_same_every_time_and_after_a_kill(project):
    path = _plain_corpus(project)
    first = _curate(project, f"data.path={path}", "run.namespace=plain_a", "cache.enabled=false")
    documents = ShardedDataset(project / "data/02_intermediate/plain_a/documents").to_frame()
    assert set(documents.columns) >= {"id", "text"} and len(documents) == DOCS
    selected = _selected(project, "plain_a")
    assert len(selected) == DOCS // 10 and set(selected) <= set(documents["id"])  # budget.keep_ratio 0.1
    assert "ROC-AUC" in first.stdout  # measured on the reference's held-out human labels
    # disk: the run's own files are small, the quantized reference models are shared (not under this project)
    from curation.scoring.reference import shared_model_root

    manifest = json.loads((project / "data/06_models/plain_a/raters/manifest.json").read_text())
    used = {shared_model_root() / folder for folder in manifest["meta"]["reference"].values()}
    assert len(used) == 4  # fastText x2, the heads, DSIR
    assert _disk(project / "data") < 100 * 2**20 and 0 < _disk(*used) < 200 * 2**20

    # same input, same output: the cache off, nothing is reused, every step recomputed
    _curate(project, f"data.path={path}", "run.namespace=plain_b", "cache.enabled=false")
    assert _selected(project, "plain_b") == selected

    # kill -9 in the middle of the scoring pipeline (embeddings finished, scores not), then the same
    # command again: it resumes from what the killed run finished and selects the same ids (the
    # defaults: the cache on)
    cache = project / "data" / "04_feature" / "cache"
    held = project / "held"  # the run writes it on entering the scoring stage, then waits to be killed
    args = [*held_curate("curation.scoring.cached", "score_cached"), f"data.path={path}", "run.namespace=plain_killed"]
    proc = subprocess.Popen(args, cwd=project, env={**_env(project), HELD_ENV: str(held)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(held.exists, 600, "the run inside its scoring stage (embeddings finished)", proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert list(cache.glob("embeddings-*/manifest.json")) and not list(cache.glob("scoring-*/scores/manifest.json"))
    _curate(project, f"data.path={path}", "run.namespace=plain_killed")
    assert _selected(project, "plain_killed") == selected
