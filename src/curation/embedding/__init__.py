"""Sentence embeddings: torch (sentence-transformers), ONNX Runtime and static (model2vec)
backends behind one ``EmbedderConfig``; no Kedro/MLflow/Hydra imports."""

from curation.embedding.embedder import (
    BACKENDS,
    PACKAGED_MINILM,
    DevicePlan,
    EmbedderConfig,
    EmbeddingResult,
    SentenceEmbedder,
    load_sentence_model,
    make_embedder,
    model_fingerprint,
    packaged_tokenizer_path,
    plan_device,
)

__all__ = [
    "BACKENDS",
    "PACKAGED_MINILM",
    "DevicePlan",
    "EmbedderConfig",
    "EmbeddingResult",
    "SentenceEmbedder",
    "load_sentence_model",
    "make_embedder",
    "model_fingerprint",
    "packaged_tokenizer_path",
    "plan_device",
]
