"""Shared fixtures: the real bundled corpus and an isolated copy of the project.

Tests that run Kedro or Hydra work in a temporary copy of the project's
``conf/`` and ``pyproject.toml`` (``CURATION_PROJECT_ROOT`` points at it), so
their data layers and MLflow store never touch the checkout.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
CORPUS_DIR = REPO / "data" / "01_raw" / "corpus"
CORPUS_SHARDS = sorted(CORPUS_DIR.glob("corpus-*.parquet"))

os.environ.setdefault("KEDRO_DISABLE_TELEMETRY", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# one cache of derived embedding models (static, ONNX) for every test project: built once per checkout
os.environ.setdefault("CURATION_EMBEDDING_ARTIFACTS", str(REPO / "data" / "06_models" / "embedding"))


@pytest.fixture(scope="session")
def corpus_sample() -> pd.DataFrame:
    """The first 600 rows of the real corpus (shards are shuffled, so every source appears)."""
    return pd.read_parquet(CORPUS_SHARDS[0], dtype_backend="numpy_nullable").head(600).reset_index(drop=True)


def make_project(root: Path) -> Path:
    """A runnable project folder: conf/ and pyproject.toml of the checkout, empty data layers."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "conf", root / "conf", ignore=shutil.ignore_patterns("local"))
    (root / "conf" / "local").mkdir(exist_ok=True)
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    (root / "src").mkdir(exist_ok=True)  # kedro checks that source_dir exists; the package is installed
    return root


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An isolated project; its MLflow store is ``<project>/mlruns/mlflow.db``."""
    root = make_project(tmp_path / "project")
    monkeypatch.setenv("CURATION_PROJECT_ROOT", str(root))
    monkeypatch.chdir(root)
    return root
