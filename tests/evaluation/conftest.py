"""Fixtures for evaluation tests: a word-level tokenizer and a bigram model whose log-probabilities we set."""

from __future__ import annotations

import math

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers

from curation.lm.model import CausalLM, ModelConfig

WORDS = ["<|endoftext|>", "[UNK]", "the", "sky", "is", "blue", "green", "water", "very", "cold", "hot",
         "wet", "dry", "grass", "red", "say"]


@pytest.fixture(autouse=True)
def _modest_threads():
    # per test, restored after it (tests/conftest.py also restores what the code under test sets)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def word_tokenizer() -> Tokenizer:
    """One token per word, so every log-probability below can be computed by hand."""
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok


def _bigram_model(logits: dict[tuple[str, str], float]) -> CausalLM:
    """A CausalLM that is exactly a bigram table: logit(next | prev) = logits.get((prev, next), 0).

    With no layers, the output is lm_head(rmsnorm(embed(prev))). The embedding is
    the identity (d_model = vocabulary size), RMSNorm maps e_i to sqrt(V) * e_i,
    so column i of lm_head, divided by sqrt(V), is the logit row of token i.
    """
    V = len(WORDS)
    model = CausalLM(ModelConfig(vocab_size=V, max_seq_len=32, n_layer=0, d_model=V, n_head=1, n_kv_head=1,
                                 d_ff=4, tie_embeddings=False, norm_eps=1e-12))
    table = torch.zeros(V, V)
    for (prev, nxt), value in logits.items():
        table[WORDS.index(prev), WORDS.index(nxt)] = value
    with torch.no_grad():
        model.embed_tokens.weight.copy_(torch.eye(V))
        model.lm_head.weight.copy_(table.T / math.sqrt(V))
    return model.eval()


@pytest.fixture(scope="session")
def bigram_model():
    """Factory: ``bigram_model({(prev, next): logit, ...})`` -> CausalLM (see ``_bigram_model``)."""
    return _bigram_model


@pytest.fixture(scope="session")
def words() -> list[str]:
    return list(WORDS)
