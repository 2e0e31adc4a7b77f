"""Fixtures: the offline MiniLM loaded once per session, and real corpus texts."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

CORPUS = Path(__file__).resolve().parents[2] / "data" / "01_raw" / "corpus"


@pytest.fixture(scope="session")
def minilm():
    from curation.embedding import load_sentence_model

    return load_sentence_model()


@pytest.fixture(scope="session")
def texts() -> list[str]:
    """48 real documents of mixed length (one shard's first rows)."""
    path = CORPUS / "corpus-0002.parquet"
    if not path.exists():
        pytest.skip(f"corpus not found under {CORPUS}")
    return pd.read_parquet(path, columns=["text"])["text"].head(48).tolist()
