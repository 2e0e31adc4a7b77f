"""The bundled corpus cut into shards, with a few faults injected (one per rule) so every count is exercised."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from curation.data import ValidationConfig

CORPUS = Path(__file__).resolve().parents[2] / "data" / "01_raw" / "corpus"
CONFIG = ValidationConfig()


def faulty_corpus(n: int = 3000) -> pd.DataFrame:
    """``n`` real documents + 30 ids repeated later (across and within shards), 4 empty texts,
    2 missing ids and 1 too-long text. Rows keep the corpus order."""
    frame = pd.read_parquet(sorted(CORPUS.glob("*.parquet"))[0]).iloc[:n].reset_index(drop=True)
    rng = np.random.default_rng(0)
    dup_src = rng.choice(n // 2, size=30, replace=False)
    dups = frame.iloc[dup_src].copy()
    dups["text"] = "a later copy of " + dups["id"]  # valid text: only the id rule can drop it
    frame = pd.concat([frame, dups], ignore_index=True)
    frame.loc[[5, 700, 1900, 2999], "text"] = "   "
    frame.loc[[11, 1500], "id"] = None
    frame.loc[42, "text"] = "x" * (CONFIG.max_chars + 1)
    # Shuffle the second half with the copies, so copies land in later shards and in their original's shard.
    tail = rng.permutation(np.arange(n // 2, n + 30))
    return frame.iloc[np.concatenate([np.arange(n // 2), tail])].reset_index(drop=True)


def write_shards(frame: pd.DataFrame, folder: Path, n_shards: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, part in enumerate(np.array_split(np.arange(len(frame)), n_shards)):
        frame.iloc[part].to_parquet(folder / f"shard-{i:03d}.parquet", index=False)
    return folder


@pytest.fixture(scope="session")
def corpus() -> pd.DataFrame:
    return faulty_corpus()


@pytest.fixture(scope="session")
def twelve_shards(corpus, tmp_path_factory) -> Path:
    return write_shards(corpus, tmp_path_factory.mktemp("raw12"), 12)


@pytest.fixture(scope="session")
def one_shard(corpus, tmp_path_factory) -> Path:
    return write_shards(corpus, tmp_path_factory.mktemp("raw1"), 1)
