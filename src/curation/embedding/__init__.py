"""Sentence embeddings (sentence-transformers), no Kedro/MLflow/Hydra imports."""

from curation.embedding.embedder import (
    PACKAGED_MINILM,
    EmbedderConfig,
    EmbeddingResult,
    SentenceEmbedder,
    load_sentence_model,
    packaged_tokenizer_path,
)

__all__ = [
    "PACKAGED_MINILM",
    "EmbedderConfig",
    "EmbeddingResult",
    "SentenceEmbedder",
    "load_sentence_model",
    "packaged_tokenizer_path",
]
