"""The one-layer LM the verification tests anneal and evaluate (seconds on CPU, one thread)."""

from __future__ import annotations

import dataclasses

from curation.lm import get_config
from curation.lm.model import ModelConfig


def tiny_pretrain(*, d_model: int = 32, seq_len: int = 32, batch_size: int = 4, vocab_size: int = 512):
    """``get_config("tiny")`` shrunk to one layer of ``d_model`` (feed-forward 2 x d_model)."""
    pretrain = get_config("tiny")
    pretrain.tokenizer.vocab_size = vocab_size
    pretrain.model = ModelConfig(vocab_size=vocab_size, max_seq_len=seq_len, n_layer=1, d_model=d_model, n_head=2,
                                 n_kv_head=1, d_ff=2 * d_model)
    pretrain.train = dataclasses.replace(pretrain.train, seq_len=seq_len, batch_size=batch_size, num_threads=1)
    return pretrain
