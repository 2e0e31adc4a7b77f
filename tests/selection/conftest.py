"""Shared setup for the selection engine tests."""

import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread():
    # The engine tests use tiny tensors: one thread is faster and does not fight
    # other processes for the cores. Restored afterwards for the rest of the suite.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def minilm_views():
    """Real MiniLM embeddings of 128 corpus documents, two views: (head, tail), each (128, 384).

    head = the document's first 300 characters, tail = its last 300 (32 tokens each). The 768-d
    tests concatenate the two real views (no 768-d model is available offline).
    """
    from pathlib import Path

    import numpy as np
    import pandas as pd

    from curation.embedding import EmbedderConfig, SentenceEmbedder

    shard = Path(__file__).resolve().parents[2] / "data" / "01_raw" / "corpus" / "corpus-0000.parquet"
    texts = pd.read_parquet(shard, columns=["text"])["text"].head(128).tolist()
    emb = SentenceEmbedder(EmbedderConfig(num_threads=1, max_seq_length=32, show_progress=False, max_chars=0))
    head, tail = emb([t[:300] for t in texts]), emb([t[-300:] for t in texts])
    return np.asarray(head, dtype=np.float32), np.asarray(tail, dtype=np.float32)
