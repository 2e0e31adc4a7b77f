"""Byte-level BPE tokenizer trained on the corpus with HF ``tokenizers``.

Byte-level (GPT-2 style): every string maps to bytes first, so nothing is out
of vocabulary and ``decode(encode(text)) == text`` exactly. Special token
``<|endoftext|>`` (id 0) separates documents when they are packed
(:mod:`curation.lm.packing`); the literal string ``<|endoftext|>`` inside a
document is encoded as ordinary text (``encode_special_tokens``), so only the
packer places EOS ids. The vocabulary size is a knob (8192 for the tiny
models; Meta-rater's proxies use LLaMA's 32,000, seeds/004 App. D).

    tok = train_tokenizer(texts, vocab_size=8192)
    save_tokenizer(tok, "tokenizer.json"); tok = load_tokenizer("tokenizer.json")
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

EOS_TOKEN = "<|endoftext|>"


@dataclass
class TokenizerConfig:
    vocab_size: int = 8192  # tokens in the vocabulary, special tokens and the 256 byte symbols included
    min_frequency: int = 2  # a pair must occur at least this many times to be merged
    max_docs: Optional[int] = None  # train on at most this many documents (None = all given)
    path: Optional[str] = None  # a shipped tokenizer.json to use instead of training one (None = train)


def train_tokenizer(texts: Iterable[str], vocab_size: int = 8192, min_frequency: int = 2) -> Tokenizer:
    """Train a byte-level BPE on ``texts``; ``<|endoftext|>`` gets id 0."""
    if vocab_size < 257 + 1:
        raise ValueError(f"vocab_size={vocab_size} must exceed the 256 byte symbols plus {EOS_TOKEN}")
    tokenizer = Tokenizer(models.BPE())
    # add_prefix_space=False keeps the exact text (no leading space is invented),
    # so decode(encode(text)) == text.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes, even unseen ones
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    tokenizer.encode_special_tokens = True
    return tokenizer


def build_tokenizer(config: TokenizerConfig, texts: Iterable[str]) -> Tokenizer:
    """The shipped tokenizer at ``config.path``, else one trained on the first ``config.max_docs`` texts."""
    if config.path is not None:
        return load_tokenizer(config.path)
    if config.max_docs is not None:
        texts = itertools.islice(texts, config.max_docs)
    return train_tokenizer(texts, config.vocab_size, config.min_frequency)


def save_tokenizer(tokenizer: Tokenizer, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(path))
    return path


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Load a tokenizer.json; it must define ``<|endoftext|>``."""
    tokenizer = Tokenizer.from_file(str(path))
    eos_id(tokenizer)
    tokenizer.encode_special_tokens = True  # runtime flag, not saved in tokenizer.json
    return tokenizer


def eos_id(tokenizer: Tokenizer) -> int:
    token_id = tokenizer.token_to_id(EOS_TOKEN)
    if token_id is None:
        raise KeyError(f"tokenizer has no {EOS_TOKEN!r} token")
    return token_id
