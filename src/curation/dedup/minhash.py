"""MinHash signatures and LSH banding (Broder 1997; Leskovec, Rajaraman & Ullman, *Mining of Massive
Datasets*, ch. 3), vectorised with numpy over a whole shard.

**Shingles.** Word 5-grams of :func:`curation.dedup.text.words` (Lee et al. 2022 and datatrove use
word 5-grams), each hashed to 32 bits (the low half of the 64-bit n-gram hash). A document with fewer
than 5 words is one shingle (all its words); one without any word has no signature and takes no part.

**Signatures.** ``K = bands * rows`` hash functions ``h_k(x) = ((a_k x + b_k) mod 2^64 mod p) & (2^32 - 1)``
with ``p = 2^61 - 1``: the classic universal-hash permutations, computed exactly as ``datasketch``'s
``MinHash(scheme="legacy")`` computes them, with its ``a_k, b_k`` drawn from ``RandomState(seed)``,
so that a signature here equals datasketch's on the same shingle hashes bit for bit (the tests check
it). ``mod p`` is done with shifts (``2^61 = 1 mod p``), not a division.

**Bands.** Two documents are candidates when all ``rows`` values of at least one of the ``bands``
bands agree; for Jaccard similarity ``s`` that happens with probability ``1 - (1 - s^rows)^bands``
(the S-curve, :func:`candidate_probability`). The default 14 bands x 8 rows (112 hashes) is datatrove's
``MinhashConfig`` default for its 0.8-ish threshold (NeMo Curator's 20 x 13 = 260 hashes is steeper
and 2.3x the work). With 14 x 8: P(candidate) = 0.565 at s = 0.7, 0.924 at s = 0.8, 0.9996 at s = 0.9;
the curve's midpoint ``(1/14)^(1/8)`` is 0.72.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from curation.dedup.text import Tokens, splitmix64

MERSENNE = np.uint64((1 << 61) - 1)
MAX_HASH = np.uint64((1 << 32) - 1)
EMPTY = np.uint32(0xFFFFFFFF)  # the signature value of a document without shingles (datasketch's init value)
_CHUNK = 1 << 11  # shingles per vectorised block: _CHUNK x K uint64 (1.8 MB at K = 112, cache-sized)


@dataclass(frozen=True)
class MinHashParams:
    ngram: int = 5  # words per shingle
    bands: int = 14  # LSH bands (datatrove's default)
    rows: int = 8  # hashes per band
    seed: int = 1  # permutation draw (datasketch's default seed)

    def __post_init__(self) -> None:
        for name in ("ngram", "bands", "rows"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    @property
    def num_perm(self) -> int:
        return self.bands * self.rows


def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(a, b)`` of datasketch's legacy scheme: ``RandomState(seed)`` draws ``a`` in [1, p) then ``b``
    in [0, p), alternating, once per hash function."""
    gen = np.random.RandomState(seed)
    pairs = [(gen.randint(1, MERSENNE, dtype=np.uint64), gen.randint(0, MERSENNE, dtype=np.uint64))
             for _ in range(num_perm)]
    arr = np.array(pairs, dtype=np.uint64)
    return arr[:, 0].copy(), arr[:, 1].copy()


def _mod_mersenne_low32(x: np.ndarray, high: np.ndarray) -> np.ndarray:
    """``(x mod (2^61 - 1)) & (2^32 - 1)`` for uint64 ``x``, in place, without a division:
    ``2^61 = 1 (mod p)``, so ``x = hi * 2^61 + lo`` is ``hi + lo`` (< p + 8) modulo p. The final
    subtraction of p is needed only when ``hi + lo >= p`` (probability ~8 / 2^61 per value), so it is
    checked for, not done on every value."""
    np.right_shift(x, np.uint64(61), out=high)
    x &= MERSENNE
    x += high
    if (x >= MERSENNE).any():
        x -= MERSENNE * (x >= MERSENNE)
    x &= MAX_HASH
    return x


def signatures_of_hashes(shingles: np.ndarray, owner: np.ndarray, n_docs: int,
                         a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(n_docs, K)`` uint32 MinHash signatures from 32-bit shingle hashes ``shingles`` owned by
    documents ``owner`` (sorted). Documents without shingles get :data:`EMPTY` everywhere."""
    k = len(a)
    out = np.full((n_docs, k), EMPTY, dtype=np.uint32)
    if not len(shingles):
        return out
    shingles = np.asarray(shingles, dtype=np.uint64)
    owner = np.asarray(owner, dtype=np.int64)
    if np.any(np.diff(owner) < 0):
        raise ValueError("shingle owners must be sorted by document")
    # cut blocks at document boundaries near every _CHUNK shingles (a document longer than a block
    # is split: its parts' minima are combined with np.minimum below)
    start = 0
    a = a[None, :]
    b = b[None, :]
    buf = np.empty((_CHUNK, k), dtype=np.uint64)
    high = np.empty((_CHUNK, k), dtype=np.uint64)
    with np.errstate(over="ignore"):
        while start < len(shingles):
            stop = min(start + _CHUNK, len(shingles))
            x, hi = buf[: stop - start], high[: stop - start]
            np.multiply(shingles[start:stop, None], a, out=x)
            x += b
            _mod_mersenne_low32(x, hi)
            docs = owner[start:stop]
            firsts = np.flatnonzero(np.r_[True, docs[1:] != docs[:-1]])
            mins = np.minimum.reduceat(x, firsts, axis=0).astype(np.uint32)
            rows = docs[firsts]
            out[rows] = np.minimum(out[rows], mins)
            start = stop
    return out


def signatures(tokens: Tokens, params: MinHashParams) -> np.ndarray:
    """``(documents, bands * rows)`` uint32 signatures of the documents in ``tokens``."""
    grams, owner = tokens.ngrams(params.ngram, short="whole")
    a, b = permutations(params.num_perm, params.seed)
    return signatures_of_hashes(grams & MAX_HASH, owner, len(tokens), a, b)


def band_keys(sigs: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """``(documents, bands)`` uint64 key of each band (a hash of its ``rows`` values and its index):
    equal keys = equal bands (up to 64-bit collisions)."""
    n = len(sigs)
    if sigs.shape[1] != bands * rows:
        raise ValueError(f"signatures have {sigs.shape[1]} values, expected bands * rows = {bands * rows}")
    view = sigs.reshape(n, bands, rows).astype(np.uint64)
    acc = np.zeros((n, bands), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for r in range(rows):
            acc = splitmix64(acc * np.uint64(0x100000001B3) + view[:, :, r])
    return acc


def has_signature(sigs: np.ndarray) -> np.ndarray:
    """Documents with at least one shingle (the others take no part in LSH)."""
    return ~np.all(sigs == EMPTY, axis=1)


def estimated_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> np.ndarray:
    """Fraction of equal signature values: an unbiased estimate of the Jaccard similarity with
    standard error ``sqrt(J (1 - J) / K)``."""
    return np.mean(np.asarray(sig_a) == np.asarray(sig_b), axis=-1)


def candidate_probability(similarity: float | np.ndarray, bands: int, rows: int) -> float | np.ndarray:
    """The LSH S-curve: P(a pair of Jaccard ``similarity`` shares at least one band)."""
    return 1.0 - (1.0 - np.asarray(similarity, dtype=float) ** rows) ** bands


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard similarity of two sets of hashes."""
    a, b = np.unique(a), np.unique(b)
    if not len(a) and not len(b):
        return 1.0
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)
