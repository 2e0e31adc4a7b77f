"""Packing: EOS after every document, exact token counts, shifted windows."""

from __future__ import annotations

import json

import numpy as np
import pytest

from curation.lm import PackedDataset, pack_documents
from curation.lm.packing import token_dtype


def test_stream_is_documents_each_followed_by_eos(texts, tokenizer, tmp_path):
    docs = texts[:7]
    ds = pack_documents(docs, tokenizer, tmp_path, seq_len=32, batch_docs=3)  # 3 batches: 3 + 3 + 1
    encoded = [tokenizer.encode(d, add_special_tokens=False).ids for d in docs]
    expected = np.concatenate([np.array(ids + [0]) for ids in encoded])
    tokens = np.asarray(ds.tokens)
    assert tokens.dtype == np.uint16
    assert ds.index.n_tokens == sum(len(ids) for ids in encoded) + len(docs)
    np.testing.assert_array_equal(tokens, expected)
    # EOS sits exactly at the end of each document, nowhere else.
    ends = np.cumsum([len(ids) + 1 for ids in encoded]) - 1
    np.testing.assert_array_equal(np.flatnonzero(tokens == 0), ends)
    assert ds.index.n_docs == len(docs)


def test_windows_are_non_overlapping_and_shifted(packed):
    T = packed.seq_len
    n = packed.index.n_tokens
    assert len(packed) == (n - 1) // T == packed.index.n_sequences
    assert packed.index.unused_tail_tokens == n - len(packed) * T
    tokens = np.asarray(packed.tokens).astype(np.int64)
    for i in (0, 1, len(packed) - 1):
        x, y = packed[i]
        assert x.shape == y.shape == (T,)
        np.testing.assert_array_equal(x.numpy(), tokens[i * T : (i + 1) * T])
        np.testing.assert_array_equal(y.numpy(), tokens[i * T + 1 : (i + 1) * T + 1])
    with pytest.raises(IndexError):
        packed[len(packed)]


def test_index_json_and_reopen_at_another_length(packed):
    meta = json.loads((packed.path / "index.json").read_text())
    assert meta["dtype"] == "uint16" and meta["eos_id"] == 0 and meta["vocab_size"] == 1024
    assert (packed.path / "tokens.bin").stat().st_size == 2 * meta["n_tokens"]
    again = PackedDataset(packed.path, seq_len=16)
    assert len(again) == (meta["n_tokens"] - 1) // 16
    np.testing.assert_array_equal(again[1][0].numpy(), np.asarray(packed.tokens[16:32]))


def test_dtype_grows_with_the_vocabulary():
    assert token_dtype(65536) == np.uint16
    assert token_dtype(65537) == np.uint32


def test_nothing_to_pack_is_refused(tokenizer, tmp_path):
    with pytest.raises(ValueError, match="no documents"):
        pack_documents([], tokenizer, tmp_path, seq_len=8)
    assert not any(tmp_path.iterdir())
