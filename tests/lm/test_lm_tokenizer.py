"""Byte-level BPE: exact round trip on real text, EOS handling, save/load."""

from __future__ import annotations

import pytest

from curation.lm import (
    EOS_TOKEN,
    TokenizerConfig,
    build_tokenizer,
    eos_id,
    load_tokenizer,
    save_tokenizer,
    train_tokenizer,
)


def test_round_trip_is_exact_on_real_documents(texts, tokenizer):
    for text in texts:
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        assert tokenizer.decode(ids) == text


def test_vocabulary_size_and_eos(tokenizer):
    assert tokenizer.get_vocab_size() == 1024
    assert eos_id(tokenizer) == 0
    assert tokenizer.id_to_token(0) == EOS_TOKEN


def test_compresses_real_text(texts, tokenizer):
    chars = sum(len(t) for t in texts)
    tokens = sum(len(tokenizer.encode(t).ids) for t in texts)
    # A 1k-vocabulary BPE on English gives ~2.5-3.5 characters per token; bytes alone give ~1.
    assert chars / tokens > 2.0


def test_literal_eos_string_in_a_document_is_plain_text(tokenizer):
    text = "a document that mentions <|endoftext|> in its body"
    ids = tokenizer.encode(text).ids
    assert eos_id(tokenizer) not in ids
    assert tokenizer.decode(ids) == text


def test_unseen_characters_survive(texts):
    tok = train_tokenizer(texts[:20], vocab_size=300)
    text = "naïve café – 東京 🙂"  # bytes never merged still decode exactly
    assert tok.decode(tok.encode(text).ids) == text


def test_save_and_load_give_identical_ids(texts, tokenizer, tmp_path):
    path = save_tokenizer(tokenizer, tmp_path / "tok" / "tokenizer.json")
    loaded = load_tokenizer(path)
    for text in texts[:20]:
        assert loaded.encode(text).ids == tokenizer.encode(text).ids
    assert loaded.encode("x <|endoftext|> y").ids == tokenizer.encode("x <|endoftext|> y").ids


def test_too_small_vocabulary_is_refused(texts):
    with pytest.raises(ValueError, match="vocab_size"):
        train_tokenizer(texts[:5], vocab_size=200)


def test_build_tokenizer_trains_on_max_docs_or_loads_the_shipped_file(texts, tokenizer, tmp_path):
    trained = build_tokenizer(TokenizerConfig(vocab_size=400, max_docs=30), iter(texts))
    assert trained.get_vocab_size() == 400
    assert trained.get_vocab() == train_tokenizer(texts[:30], vocab_size=400).get_vocab()
    path = save_tokenizer(tokenizer, tmp_path / "shipped.json")
    shipped = build_tokenizer(TokenizerConfig(path=str(path)), iter(texts))
    assert shipped.get_vocab() == tokenizer.get_vocab()
