"""Text normalisation, words and n-gram hashes shared by exact dedup, MinHash and decontamination.

One normalisation for every stage, so "the same text" means the same thing everywhere:

* :func:`normalize`: Unicode NFKC (compatibility forms: full-width letters, ligatures, non-breaking
  spaces), ``str.casefold`` (case, including ß -> ss), every run of white space -> one space, stripped.
  Exact dedup hashes this string (punctuation kept: two texts that differ only in punctuation are
  near-duplicates, for MinHash to find).
* :func:`words`: the normalised text's ``\\w+`` runs (letters, digits, underscore; punctuation dropped),
  the tokens of MinHash shingles (datatrove's ``simplify_text`` + word tokenizer does the same) and of
  the 13-grams of decontamination (GPT-3, Brown et al. 2020, App. C: lower-cased, punctuation ignored).

Words are hashed to 64 bits with pandas' fixed-key SipHash (the same in every process and run), and an
n-gram hash is a polynomial of its word hashes modulo 2^64, finalised with the splitmix64 mixer; both
are computed for a whole shard at once (:class:`Tokens`), never one Python object per n-gram.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

_WORD = re.compile(r"\w+")
_SPACE = re.compile(r"\s+")
_BLOCK = 1 << 16  # words hashed per call (bounds the Python strings alive at once)
_MULT = np.uint64(0x9E3779B97F4A7C15)  # odd multiplier of the n-gram polynomial (the golden-ratio constant)


def normalize(text: str) -> str:
    """NFKC, case-folded, white space collapsed to single spaces, stripped.

    ``" ".join(s.split())``, which is ``_SPACE.sub(" ", s).strip()`` at half the cost: ``str.split()`` cuts at
    exactly the characters ``\\s`` matches (both are ``str.isspace``; checked over every code point in
    ``tests/dedup``)."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def words(text: str) -> list[str]:
    """The ``\\w+`` words of the normalised text (punctuation dropped)."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser (Steele et al. 2014): a bijective 64-bit mixer, elementwise."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def word_hashes(tokens: Sequence[str]) -> np.ndarray:
    """64-bit hash of each word (pandas' SipHash with its fixed key: stable across processes)."""
    if not len(tokens):
        return np.empty(0, dtype=np.uint64)
    return pd.util.hash_array(np.asarray(tokens, dtype=object), categorize=False)


@dataclass
class Tokens:
    """The words of many documents as one flat array of word hashes and per-document offsets:
    document ``i`` is ``hashes[offsets[i]:offsets[i + 1]]``."""

    hashes: np.ndarray  # uint64, all documents' word hashes in order
    offsets: np.ndarray  # int64, len = documents + 1

    @classmethod
    def of(cls, texts: Iterable[str]) -> "Tokens":
        """Words of ``texts``, hashed in blocks of ~64k words: never more than one block of Python
        strings alive at once (8 bytes per word kept, not a ~55-byte str)."""
        parts: list[np.ndarray] = []
        pending: list[str] = []
        offsets = [0]
        total = 0
        for text in texts:
            ws = words(text)
            pending.extend(ws)
            total += len(ws)
            offsets.append(total)
            if len(pending) >= _BLOCK:
                parts.append(word_hashes(pending))
                pending = []
        parts.append(word_hashes(pending))
        return cls(np.concatenate(parts) if len(parts) > 1 else parts[0], np.asarray(offsets, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def ngrams_by_length(self, lengths: Iterable[int]) -> Iterable[tuple[int, np.ndarray, np.ndarray]]:
        """``(n, hashes, owner)`` for each n in ``lengths`` (short documents give nothing), the
        polynomial extended one word at a time (n passes for the longest n, not one per length)."""
        wanted = sorted(set(int(n) for n in lengths))
        if not wanted or wanted[0] < 1:
            return
        total = len(self.hashes)
        doc_of = np.repeat(np.arange(len(self), dtype=np.int64), self.lengths)
        ends = self.offsets[1:][doc_of]
        acc = self.hashes.copy()
        with np.errstate(over="ignore"):
            for n in range(1, wanted[-1] + 1):
                if n > 1:
                    if total - n + 1 <= 0:
                        return
                    acc = acc[:-1] * _MULT + self.hashes[n - 1:]
                if n in wanted:
                    count = total - n + 1
                    valid = np.arange(count, dtype=np.int64) + n <= ends[:count]
                    yield n, splitmix64(acc[valid] ^ np.uint64(n)), doc_of[:count][valid]

    def ngrams(self, n: int, short: str = "drop") -> tuple[np.ndarray, np.ndarray]:
        """Every word n-gram's 64-bit hash and the document it belongs to (n-grams never cross
        documents). ``short``: what a document with fewer than ``n`` (but at least one) words gives:
        ``"drop"`` nothing, ``"whole"`` one n-gram of all its words (hashed as an n-gram of its length)."""
        if n < 1:
            raise ValueError(f"n-gram length must be >= 1, got {n}")
        lengths = self.lengths
        docs = np.arange(len(self), dtype=np.int64)
        total = len(self.hashes)
        grams = np.empty(0, dtype=np.uint64)
        owner = np.empty(0, dtype=np.int64)
        if total >= n:
            grams = rolling(self.hashes, n)
            starts = np.arange(len(grams), dtype=np.int64)
            doc_of = np.repeat(docs, lengths)[: len(grams)]
            valid = starts + n <= self.offsets[1:][doc_of]
            grams, owner = grams[valid], doc_of[valid]
        if short == "whole":
            few = np.flatnonzero((lengths > 0) & (lengths < n))
            if len(few):
                extra = np.array([rolling(self.hashes[self.offsets[d]:self.offsets[d + 1]], int(lengths[d]))[0]
                                  for d in few], dtype=np.uint64)
                grams, owner = np.concatenate([grams, extra]), np.concatenate([owner, few])
                order = np.argsort(owner, kind="stable")
                grams, owner = grams[order], owner[order]
        elif short != "drop":
            raise ValueError(f"short must be 'drop' or 'whole', got {short!r}")
        return grams, owner


def rolling(hashes: np.ndarray, n: int) -> np.ndarray:
    """Hash of every window of ``n`` consecutive word hashes: ``mix(sum_k h[i+k] * M^(n-1-k) mod 2^64)``."""
    hashes = np.asarray(hashes, dtype=np.uint64)
    count = len(hashes) - n + 1
    if count <= 0:
        return np.empty(0, dtype=np.uint64)
    acc = hashes[:count].copy()
    with np.errstate(over="ignore"):
        for k in range(1, n):
            acc *= _MULT
            acc += hashes[k: k + count]
    return splitmix64(acc ^ np.uint64(n))  # the length enters the hash: a 5-gram never equals a 13-gram


def ngram_hashes(text: str, n: int) -> np.ndarray:
    """The word n-gram hashes of one text (a convenience for tests and small inputs)."""
    return rolling(word_hashes(words(text)), n)
