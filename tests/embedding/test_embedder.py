"""SentenceEmbedder: unit norm, deterministic, original order, dtype, empty counted."""

import numpy as np
import pytest

from curation.embedding import EmbedderConfig, SentenceEmbedder

# 128 tokens keep the tests fast on 2 cores; the behaviour tested does not depend on it
FAST = dict(max_seq_length=128, max_chars=1024, batch_size=16, show_progress=False)


def test_unit_norm_shape_and_deterministic(minilm, texts):
    emb = SentenceEmbedder(EmbedderConfig(**FAST), model=minilm)
    a = emb.encode(texts)
    assert a.embeddings.shape == (len(texts), 384) and a.embeddings.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(a.embeddings, axis=1), 1.0, atol=1e-5)
    b = emb.encode(texts)
    np.testing.assert_array_equal(a.embeddings, b.embeddings)
    assert a.n_docs == len(texts) and a.docs_per_s > 0


def test_sorting_restores_the_callers_order(minilm, texts):
    sorted_ = SentenceEmbedder(EmbedderConfig(**FAST), model=minilm).encode(texts).embeddings
    unsorted = SentenceEmbedder(EmbedderConfig(**FAST | {"sort_by_length": False}), model=minilm).encode(texts).embeddings
    # same vectors row for row (padding differs, so allow float noise)
    np.testing.assert_allclose(sorted_, unsorted, atol=1e-5)
    # and a single document alone gets the same vector as in the batch
    one = SentenceEmbedder(EmbedderConfig(**FAST), model=minilm).encode([texts[7]]).embeddings[0]
    np.testing.assert_allclose(one, sorted_[7], atol=1e-5)


def test_matches_plain_sentence_transformers_encode(minilm, texts):
    minilm.max_seq_length = 128
    try:
        plain = minilm.encode([t[:1024] for t in texts[:16]], normalize_embeddings=True, batch_size=16)
    finally:
        minilm.max_seq_length = 256
    ours = SentenceEmbedder(EmbedderConfig(**FAST), model=minilm).encode(texts[:16]).embeddings
    assert minilm.max_seq_length == 256  # our max_seq_length=128 is restored too
    np.testing.assert_allclose(ours, plain, atol=1e-5)


def test_float16_and_empty_texts_counted(minilm, texts):
    res = SentenceEmbedder(EmbedderConfig(**FAST | {"dtype": "float16"}), model=minilm).encode(texts[:6] + ["", "  \n"])
    assert res.embeddings.dtype == np.float16
    np.testing.assert_allclose(np.linalg.norm(res.embeddings.astype(np.float32), axis=1), 1.0, atol=2e-3)
    assert res.n_empty == 2 and res.metrics()["embed_empty_text"] == 2


def test_config_mismatch_fails_loudly(minilm):
    with pytest.raises(ValueError, match="384-d"):
        SentenceEmbedder(EmbedderConfig(dim=768), model=minilm)
    with pytest.raises(ValueError, match="dtype"):
        SentenceEmbedder(EmbedderConfig(dtype="int8"), model=minilm)


def test_int8_quantisation_is_opt_in_and_leaves_the_shared_model_alone(minilm, texts):
    before = SentenceEmbedder(EmbedderConfig(**FAST), model=minilm).encode(texts[:4]).embeddings
    q = SentenceEmbedder(EmbedderConfig(**FAST | {"quantize": "int8"}), model=minilm)
    assert q.model is not minilm
    v = q.encode(texts[:4]).embeddings
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert (v * before).sum(1).min() > 0.7  # close to, not equal to, the float vectors
    after = SentenceEmbedder(EmbedderConfig(**FAST), model=minilm).encode(texts[:4]).embeddings
    np.testing.assert_array_equal(before, after)
