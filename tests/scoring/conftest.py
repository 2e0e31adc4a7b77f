"""Fixtures: a few hundred real corpus rows, read once per test session."""

from __future__ import annotations

import glob
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

CORPUS = Path(__file__).resolve().parents[2] / "data" / "01_raw" / "corpus"


@pytest.fixture(scope="session")
def full_corpus() -> pd.DataFrame:
    files = sorted(glob.glob(str(CORPUS / "corpus-*.parquet")))
    if not files:
        pytest.skip(f"corpus not found under {CORPUS}")
    df = pd.concat([pd.read_parquet(f, dtype_backend="numpy_nullable") for f in files], ignore_index=True)
    df["category"] = df["extra"].map(lambda s: json.loads(s)["category"])
    return df


@pytest.fixture(scope="session")
def corpus_sample(full_corpus) -> pd.DataFrame:
    """~700 real rows: all 496 human-labelled plus a fixed draw per category."""
    rng = np.random.default_rng(7)
    parts = [full_corpus[full_corpus["quality_label"].notna()]]
    rest = full_corpus[full_corpus["quality_label"].isna()]
    for cat, k in [("encyclopedic", 120), ("books", 80), ("web", 120), ("docs", 20), ("forum", 20)]:
        pool = rest[rest["category"] == cat]
        parts.append(pool.iloc[np.sort(rng.choice(len(pool), k, replace=False))])
    edu_rows = rest[rest["source"] == "fineweb_edu_scorer"].head(40)
    return pd.concat(parts + [edu_rows]).drop_duplicates("id").reset_index(drop=True)


@pytest.fixture(scope="session")
def by_id(full_corpus):
    """Look up one real document's text by id."""
    index = dict(zip(full_corpus["id"], full_corpus["text"]))
    return index.__getitem__


@pytest.fixture(scope="session")
def embed_subset(full_corpus) -> pd.DataFrame:
    """160 real rows for the embedding raters: LLM-scored, commerce pages, Wikipedia, web, human-labelled."""
    rng = np.random.default_rng(11)
    page_type = full_corpus["extra"].map(lambda s: json.loads(s).get("page_type"))
    unl = full_corpus["quality_label"].isna()
    groups = [
        full_corpus[full_corpus["source"] == "fineweb_edu_scorer"],
        full_corpus[page_type.isin(["product", "service", "listing", "collection"])],
        full_corpus[(full_corpus["category"] == "encyclopedic")],
        full_corpus[(full_corpus["category"] == "web") & unl & page_type.isna()],
        full_corpus[~unl],
    ]
    parts = [g.iloc[np.sort(rng.choice(len(g), 32, replace=False))] for g in groups]
    return pd.concat(parts).drop_duplicates("id").reset_index(drop=True)


@pytest.fixture(scope="session")
def embedder():
    """The offline MiniLM, loaded once; 128 tokens keeps the suite fast on 2 cores."""
    from curation.embedding import EmbedderConfig, SentenceEmbedder

    return SentenceEmbedder(EmbedderConfig(max_seq_length=128, max_chars=1024, batch_size=32))


@pytest.fixture(scope="session")
def subset_embeddings(embed_subset, embedder) -> np.ndarray:
    return embedder(embed_subset["text"].tolist())


def write_shards(data, root: Path, n_shards: int, *, stage: str = "ingest", aligned_with=None):
    """A frame or array cut into ``n_shards`` shards as a finished sharded dataset (test input)."""
    from curation.shards import ShardedDataset, ShardWriter, shard_names

    kind = "frame" if isinstance(data, pd.DataFrame) else "array"
    writer = ShardWriter(root, kind)
    names = shard_names(n_shards)
    for name, rows in zip(names, np.array_split(np.arange(len(data)), n_shards)):
        part = data.iloc[rows].reset_index(drop=True) if kind == "frame" else np.asarray(data)[rows]
        writer.mark_complete(writer.write(name, part))
    writer.finalize(names, stage=stage, aligned_with=aligned_with)
    return ShardedDataset(root)
