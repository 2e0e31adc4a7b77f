"""Injected copies of known edit rates, to measure the dedup stages (tests and benchmarks/dedup).

* :func:`word_edit`: a near-copy with ``rate`` of its words (at least one) replaced by other words;
* :func:`paragraph_shift`: the same paragraphs, the first one moved to the end (a boilerplate-shifted
  mirror: the shingle set loses only the few shingles across the moved boundary);
* :func:`exact_variant`: the same text with case and white space changed (an exact copy after
  normalisation).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from curation.dedup.fuzzy import set_jaccard, shingle_sets


def word_edit(text: str, rate: float, rng: np.random.Generator, vocabulary: list[str]) -> str:
    tokens = text.split()
    if not tokens:
        return text
    k = max(1, int(round(rate * len(tokens))))
    for i in rng.choice(len(tokens), size=min(k, len(tokens)), replace=False):
        tokens[i] = vocabulary[int(rng.integers(len(vocabulary)))]
    return " ".join(tokens)


def paragraph_shift(text: str) -> str:
    paragraphs = [p for p in text.split("\n") if p.strip()]
    if len(paragraphs) < 2:
        words = text.split()
        cut = max(1, len(words) // 5)
        return " ".join(words[cut:] + words[:cut])
    return "\n".join(paragraphs[1:] + paragraphs[:1])


def exact_variant(text: str) -> str:
    return "  " + text.upper().replace(" ", "  \t") + "\n"


def vocabulary_of(texts: list[str], size: int = 5000, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    words = [w for t in texts[:200] for w in t.split() if w.isalpha()]
    return list(rng.choice(np.unique(words), size=min(size, len(set(words))), replace=False))


def inject(originals: pd.DataFrame, n: int, kind: str, *, rate: float = 0.01, seed: int = 0,
           vocabulary: list[str] | None = None, min_words: int = 50) -> pd.DataFrame:
    """``n`` copies of randomly drawn originals (with at least ``min_words`` words) under new ids
    ``<id>#<kind>``, with ``source_id`` and the exact 5-gram ``jaccard`` to their original."""
    rng = np.random.default_rng(seed)
    long_enough = originals[originals["text"].str.split().str.len() >= min_words]
    picked = long_enough.iloc[rng.choice(len(long_enough), size=n, replace=False)].reset_index(drop=True)
    vocabulary = vocabulary or vocabulary_of(originals["text"].tolist())
    if kind == "exact":
        texts = [exact_variant(t) for t in picked["text"]]
    elif kind == "words":
        texts = [word_edit(t, rate, rng, vocabulary) for t in picked["text"]]
    elif kind == "paragraphs":
        texts = [paragraph_shift(t) for t in picked["text"]]
    else:
        raise ValueError(f"kind must be exact, words or paragraphs, got {kind!r}")
    copies = picked.copy()
    copies["source_id"] = picked["id"].to_numpy()
    copies["id"] = picked["id"] + f"#{kind}{rate:g}" + "-" + pd.Series(range(n)).astype(str)
    copies["text"] = texts
    a, b = shingle_sets(picked["text"].tolist(), 5), shingle_sets(texts, 5)
    copies["jaccard"] = [set_jaccard(x, y) for x, y in zip(a, b)]
    return copies
