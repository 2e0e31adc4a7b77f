"""Fixtures: real corpus text, a byte-level BPE trained on it, and packed datasets (built once per session)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from curation.lm import pack_documents, train_tokenizer


@pytest.fixture(autouse=True)
def _modest_threads():
    # 2 shared cores: keep each test process to at most 2 intra-op threads.
    # per test, restored after it (tests/conftest.py also restores what the code under test sets)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def texts(corpus_sample: pd.DataFrame) -> list[str]:
    """300 real documents (the first rows of shard 0, every source represented)."""
    return corpus_sample["text"].head(300).tolist()


@pytest.fixture(scope="session")
def tokenizer(texts):
    return train_tokenizer(texts, vocab_size=1024)


@pytest.fixture(scope="session")
def packed(texts, tokenizer, tmp_path_factory):
    return pack_documents(texts[:150], tokenizer, tmp_path_factory.mktemp("packed"), seq_len=64)


@pytest.fixture(scope="session")
def packed_other(texts, tokenizer, tmp_path_factory):
    return pack_documents(texts[150:], tokenizer, tmp_path_factory.mktemp("packed_other"), seq_len=64)
