"""Embeddings on shards: one float array shard per document shard (issue 14).

:func:`embed_shard` is the per-shard function ``fn(frame, name) -> ShardResult`` that
:func:`curation.shards.run_shards` runs over the ``documents`` shards, locally (one shard
at a time) or as Ray tasks. The output is a sharded array dataset aligned with the
documents (dolma's attributes convention: same shard names, same row counts; manifest
``aligned_with`` = the documents' fingerprint), so memory is one shard of text and
vectors, never the corpus.

The embedder (a model) is built once per worker process, not once per shard: a
module-level cache keyed by the whole config (:func:`shared_embedder`). Under Ray a
worker process is reused across tasks, so each worker loads the model once (a task on
a fresh worker loads it again).

Every backend embeds each document independently of the others in its batch (the
static model is a per-token lookup: bit-identical whatever the shard boundaries; the
transformer backends mask padding, so a document batched with other neighbours moves
only by float rounding, ~1e-7). ``tests/embedding/test_sharded_embeddings.py`` checks
shards against one whole-corpus ``encode``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from curation.cache import config_key
from curation.embedding.embedder import EmbedderConfig, make_embedder, model_fingerprint, plan_device
from curation.shards import EngineConfig, ShardedDataset, ShardResult, ShardTask, ShardWriter, run_shards

log = logging.getLogger(__name__)

EMBED_REMAKE = "curate pipeline=scoring"
_EMBEDDERS: dict[str, Any] = {}


def shared_embedder(config: EmbedderConfig):
    """The embedder of ``config``, built once per process (the last config used is kept)."""
    key = json.dumps(asdict(config), sort_keys=True, default=str)
    if key not in _EMBEDDERS:
        _EMBEDDERS.clear()  # one model in memory per worker
        _EMBEDDERS[key] = make_embedder(config)
    return _EMBEDDERS[key]


def read_shard(root: str, name: str, columns: tuple[str, ...] | None = None) -> pd.DataFrame:
    """One parquet shard of a sharded frame dataset (a module-level function: pickles for Ray)."""
    return pd.read_parquet(ShardWriter(root, "frame").shard_path(name), columns=list(columns) if columns else None)


def embed_shard(frame: pd.DataFrame, name: str, *, config: EmbedderConfig) -> ShardResult:
    """Embeddings of one document shard, row for row; counts add up across shards."""
    if not len(frame):
        return ShardResult({"embeddings": np.zeros((0, config.dim), dtype=config.dtype)}, {"embedding_docs": 0})
    result = shared_embedder(config).encode(frame["text"].tolist())
    return ShardResult({"embeddings": result.embeddings}, {
        "embedding_docs": result.n_docs, "embedding_empty_text": result.n_empty,
        "embedding_zero_vector": result.n_zero, "embedding_seconds": result.seconds})


def embedding_digest(config: EmbedderConfig) -> str:
    """Config digest of the vectors: every knob but the progress bar, plus the model's fingerprint."""
    knobs = {k: v for k, v in asdict(config).items() if k != "show_progress"}
    return config_key("embeddings-v2", knobs, model_fingerprint(config))


def embed_shards(documents: ShardedDataset, config: EmbedderConfig, folder: str | Path,
                 engine: EngineConfig | None = None, *, keep: bool = False) -> tuple[ShardedDataset, bool]:
    """Embed every document shard into ``folder`` (a sharded array dataset); returns it and
    whether it was already complete (a cache hit). Finished shards of a killed run are kept."""
    folder = Path(folder)
    if (folder / "manifest.json").is_file():
        done = ShardedDataset(folder, keep=keep)
        done.check_aligned_with(documents, name="embeddings")
        return done, True
    tasks = [ShardTask(n, partial(read_shard, str(documents.root), n, ("id", "text"))) for n in documents.names]
    if engine is not None and engine.engine == "ray" and config.device != "cpu":
        # a model on cuda/auto: each Ray task reserves a GPU when the cluster has one (else none, on CPU)
        engine = replace(engine, ray_num_gpus="auto")
    elif engine is not None and engine.engine == "local" and engine.workers > 1 and config.device != "cpu" \
            and plan_device(config).device != "cpu":
        # a model on this machine's GPU: one process feeds it (N shard workers would each load the model
        # onto the same GPU and contend for it)
        engine = replace(engine, workers=1)
    try:
        run_shards(partial(embed_shard, config=config), tasks, {"embeddings": (folder, "array")}, engine,
                   desc="embeddings")
    finally:
        _EMBEDDERS.clear()  # the local engine's model is not needed by the stages that follow
    ShardWriter(folder, "array").finalize(
        documents.names, stage="embedding", inputs={"documents": documents.fingerprint},
        config_digest=embedding_digest(config), remake=EMBED_REMAKE, aligned_with=documents.fingerprint)
    return ShardedDataset(folder, keep=keep), False
