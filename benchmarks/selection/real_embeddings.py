"""Real MiniLM embeddings of the bundled corpus for the selection benchmarks, cached on disk.

384-d: MiniLM of each document's first 1,500 characters; 768-d: that and the MiniLM of its last 1,500 characters
concatenated (two real views: no 768-d model is offline; not the output of a 768-d encoder).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "data" / "01_raw" / "corpus"
CACHE = ROOT / "data" / "04_feature" / "bench_selection_minilm_views.npz"


def real_embeddings(n: int = 3072, dim: int = 384) -> np.ndarray:
    """(n, dim) float32 real embeddings of the first n corpus documents (shard order)."""
    if dim not in (384, 768):
        raise ValueError(f"dim must be 384 or 768, got {dim}")
    if CACHE.exists():
        z = np.load(CACHE)
        if len(z["head"]) >= n:
            head, tail = z["head"][:n], z["tail"][:n]
            return head if dim == 384 else np.concatenate([head, tail], 1)
    from curation.embedding import EmbedderConfig, SentenceEmbedder

    texts = pd.concat([pd.read_parquet(p, columns=["text"]) for p in sorted(CORPUS.glob("corpus-*.parquet"))])
    texts = texts["text"].head(n).tolist()
    emb = SentenceEmbedder(EmbedderConfig(num_threads=1, max_seq_length=128, show_progress=False, max_chars=0))
    head = emb([t[:1500] for t in texts])
    tail = emb([t[-1500:] for t in texts])
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    np.savez(CACHE, head=head, tail=tail)
    return head if dim == 384 else np.concatenate([head, tail], 1)


if __name__ == "__main__":
    x = real_embeddings(int(sys.argv[1]) if len(sys.argv) > 1 else 3072, 768)
    print(x.shape, CACHE)
