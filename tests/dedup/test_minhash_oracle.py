"""The numpy MinHash against datasketch (the oracle) on the same shingles: equal signatures, Jaccard
estimates within their standard error of the exact Jaccard, the same LSH candidate pairs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from curation.dedup.fuzzy import candidate_pairs, partition_bands, set_jaccard, shingle_sets
from curation.dedup.minhash import MAX_HASH, MinHashParams, candidate_probability, estimated_jaccard, signatures
from curation.dedup.synthetic import inject
from curation.dedup.text import Tokens, normalize, rolling, word_hashes, words

datasketch = pytest.importorskip("datasketch")
CORPUS = Path(__file__).resolve().parents[2] / "data" / "01_raw" / "corpus"
PARAMS = MinHashParams()


@pytest.fixture(scope="module")
def sample() -> pd.DataFrame:
    """300 real documents + 40 near-copies of them (3 % of words replaced) + 20 with 10 % replaced."""
    docs = pd.read_parquet(sorted(CORPUS.glob("*.parquet"))[1], columns=["id", "text"]).iloc[:300]
    near = inject(docs, 40, "words", rate=0.03, seed=1)
    far = inject(docs, 20, "words", rate=0.10, seed=2)
    return pd.concat([docs, near[["id", "text", "source_id"]], far[["id", "text", "source_id"]]], ignore_index=True)


def _datasketch(text: str) -> "datasketch.MinHash":
    shingles = rolling(word_hashes(words(text)), PARAMS.ngram) & MAX_HASH
    m = datasketch.MinHash(num_perm=PARAMS.num_perm, seed=PARAMS.seed, scheme="legacy", hashfunc=int)
    m.update_batch([int(s) for s in shingles])
    return m


def test_signatures_equal_datasketch_bit_for_bit(sample):
    ours = signatures(Tokens.of(sample["text"]), PARAMS)
    for i in range(0, len(sample), 7):
        assert np.array_equal(ours[i], _datasketch(sample["text"][i]).hashvalues.astype(np.uint32)), i


def test_jaccard_estimates_agree_and_are_within_their_standard_error(sample):
    ours = signatures(Tokens.of(sample["text"]), PARAMS)
    sets = shingle_sets(sample["text"].tolist(), PARAMS.ngram)
    ids = sample["id"].tolist()
    pairs = [(ids.index(src), k) for k, src in enumerate(sample["source_id"]) if isinstance(src, str)]
    z = []
    for a, b in pairs:
        exact = set_jaccard(sets[a], sets[b])
        est = float(estimated_jaccard(ours[a], ours[b]))
        assert est == pytest.approx(_datasketch(sample["text"][a]).jaccard(_datasketch(sample["text"][b])))
        se = np.sqrt(max(exact * (1 - exact), 1e-9) / PARAMS.num_perm)
        z.append(abs(est - exact) / se)
    z = np.asarray(z)
    # estimates are ~normal around the exact value: about 68 % within 1 SE, all within 4
    assert np.mean(z <= 1) >= 0.55 and np.all(z <= 4), np.round(z, 2)


def test_lsh_finds_the_same_candidate_pairs_as_datasketch(sample, tmp_path):
    sigs = signatures(Tokens.of(sample["text"]), PARAMS)
    half = len(sample) // 2  # two shards, so pairs across shards are found too
    for i, (lo, hi) in enumerate([(0, half), (half, len(sample))]):
        partition_bands(sigs[lo:hi], PARAMS, shard=f"s{i}", shard_index=i, bucket_dir=tmp_path, num_buckets=4)
    found = candidate_pairs(tmp_path, ["s0", "s1"], 4)
    ours = {(a * half + ra if a else ra, b * half + rb if b else rb)
            for a, ra, b, rb in found[["shard_a", "row_a", "shard_b", "row_b"]].itertuples(index=False)}
    lsh = datasketch.MinHashLSH(num_perm=PARAMS.num_perm, params=(PARAMS.bands, PARAMS.rows))
    hashes = [_datasketch(t) for t in sample["text"]]
    theirs = set()
    for i, m in enumerate(hashes):
        for j in lsh.query(m):
            theirs.add((min(i, j), max(i, j)))
        lsh.insert(i, m)
    # ours pairs each document with the earliest one of each colliding band (a star): same components
    assert {b for _, b in ours} == {b for _, b in theirs}
    assert ours <= theirs
    # 3 % of words replaced changes ~15 % of the shingles (Jaccard ~0.75: P(candidate) ~0.7 on the S-curve)
    assert len({b for _, b in theirs if 300 <= b < 340}) >= 28


def test_s_curve_of_the_default_bands():
    p = candidate_probability(np.array([0.7, 0.8, 0.9]), PARAMS.bands, PARAMS.rows)
    assert np.round(p, 3).tolist() == [0.565, 0.924, 1.0]
    assert PARAMS.num_perm == 112


def test_normalisation_and_ngrams_never_cross_documents():
    assert normalize("  Ｆｕｌｌ\u00a0WIDTH\n\tStraße ") == "full width strasse"
    assert words("Hello, World! It's 2024.") == ["hello", "world", "it", "s", "2024"]
    tokens = Tokens.of(["a b c", "d e f g", "", "h"])
    grams, owner = tokens.ngrams(3)
    assert owner.tolist() == [0, 1, 1]
    grams, owner = tokens.ngrams(3, short="whole")
    assert owner.tolist() == [0, 1, 1, 3]
    for n, g, o in tokens.ngrams_by_length([2, 3]):
        ref, ref_owner = tokens.ngrams(n)
        assert np.array_equal(g, ref) and np.array_equal(o, ref_owner)
