"""Fixtures: real documents with real rater scores (the 11 RedPajama signals + DSIR), a tokenizer, a
small validation config; proxies train for a few steps with one torch thread."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from curation.scoring.redpajama import RedPajamaSignals


@pytest.fixture(autouse=True)
def _one_thread():
    # per test, restored after it (tests/conftest.py also restores what the code under test sets)
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # 2 shared cores
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def documents(corpus_sample: pd.DataFrame) -> pd.DataFrame:
    """300 real documents with the `category` column ingest derives from `extra`."""
    docs = corpus_sample.head(300).copy()
    docs["category"] = docs["extra"].map(
        lambda e: json.loads(e).get("category") if isinstance(e, str) else None).astype("string")
    return docs.reset_index(drop=True)


@pytest.fixture(scope="session")
def scores(documents: pd.DataFrame) -> pd.DataFrame:
    """The 11 RedPajama signals of each document (aligned with `documents`), plus the merge columns the
    scoring pipeline writes (`quality`, a `*_0_5` copy) that Meta-rater must not treat as raters."""
    frame = RedPajamaSignals().score_frame(documents["text"].tolist())
    frame.insert(0, "id", documents["id"].to_numpy())
    frame["doc_word_count_0_5"] = frame["doc_word_count"] / frame["doc_word_count"].max() * 5
    frame["quality"] = frame["doc_frac_unique_words"] * 3
    return frame

