"""Pre-training nodes: the corpus (Table 2 cells), tokenizer, packed tokens and a trained tiny LM.

The tokenizer is trained on the ingested corpus (``documents``), not on the
selection, so models trained on different selections share one vocabulary
and their evaluations compare data, not tokenizers. The core
(:mod:`curation.lm.cached`, :mod:`curation.selection.corpus`) caches every
stage by content in ``cache.dir``; ``cache.enabled=false`` recomputes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import tokenizers

from curation.lm.config import parse_config, parse_dataclass

if TYPE_CHECKING:  # torch: imported by the nodes when they run, not when `curate` lists the pipelines
    from curation.lm import PackedDataset
    from curation.lm.checkpoint import LMCheckpoint
else:  # Kedro reads every node's type hints when a run starts: they must resolve without torch
    PackedDataset = LMCheckpoint = Any


def select_named_corpus(
    documents: pd.DataFrame,
    scores: pd.DataFrame,
    embeddings: np.ndarray,
    pruned_scores: pd.DataFrame,
    pruned_embeddings: np.ndarray,
    table2: dict[str, Any],
    budget: dict[str, Any],
    run: dict[str, Any],
    cache: dict[str, Any],
) -> tuple[pd.DataFrame, dict[str, float]]:
    """``table2.corpus`` of ``table2.corpora`` (DATAMASK Table 2 rows) -> its documents and metrics."""
    from curation.selection.corpus import SELECTION, CorpusSpec, corpus_documents

    name = table2["corpus"]
    corpora = table2["corpora"]
    if name not in corpora:
        raise KeyError(f"table2.corpus={name!r} is not in table2.corpora; known: {sorted(corpora)}")
    key = f"table2.corpora.{name}"
    spec = parse_dataclass(CorpusSpec, corpora[name], prefix=f"{key}.").validate(key)
    if spec.method == SELECTION:
        raise ValueError("table2 corpora are computed here; method 'selection' is for verification candidates")
    return corpus_documents(documents, scores, embeddings, pruned_scores, pruned_embeddings, spec, budget,
                            int(run["seed"]), cache)


def train_tokenizer(
    documents: pd.DataFrame, pretrain: dict[str, Any], cache: dict[str, Any]
) -> tuple[tokenizers.Tokenizer, dict[str, float]]:
    """Byte-level BPE on the first ``pretrain.tokenizer.max_docs`` ingested documents (all when null),
    or the shipped ``pretrain.tokenizer.path``; cached by the texts and the tokenizer config."""
    from curation.lm.cached import cached_tokenizer

    return cached_tokenizer(documents, parse_config(pretrain).tokenizer, cache)


def tokenize_selection(
    selected_documents: pd.DataFrame, lm_tokenizer: tokenizers.Tokenizer, pretrain: dict[str, Any]
) -> tuple[PackedDataset, dict[str, float]]:
    """Pack the selection's ``text`` column as ``pretrain.train.seq_len`` windows."""
    if "text" not in selected_documents.columns:
        raise KeyError("selected_documents has no 'text' column")
    from curation.lm.cached import tokenize_texts

    return tokenize_texts(selected_documents["text"].tolist(), lm_tokenizer, parse_config(pretrain).train.seq_len)


def pretrain_model(
    lm_tokens: PackedDataset, lm_tokenizer: tokenizers.Tokenizer, pretrain: dict[str, Any], cache: dict[str, Any]
) -> tuple[LMCheckpoint, pd.DataFrame, dict[str, float]]:
    """Train ``pretrain.model`` for ``pretrain.train`` on the packed selection (:func:`curation.lm.cached.pretrain`):
    the checkpoint, the per-step history and the run's metrics."""
    from curation.lm.cached import pretrain as pretrain_lm

    return pretrain_lm(lm_tokens, lm_tokenizer, parse_config(pretrain), cache)
