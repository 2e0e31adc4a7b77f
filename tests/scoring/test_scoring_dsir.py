"""DSIR importance (hashed {1,2}-gram bag models) on real documents."""

import re

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from curation.scoring import DSIRConfig, DSIRImportance


@pytest.fixture(scope="module")
def pools(corpus_sample):
    df = corpus_sample[corpus_sample["quality_label"].isna()]
    return df[df["category"] == "books"]["text"].tolist(), df["text"].tolist(), df


def test_books_target_ranks_held_out_books_above_web(pools):
    books, raw, df = pools
    rater = DSIRImportance(DSIRConfig(target="books")).fit(books[::2], raw[::2])
    test = df.iloc[1::2]
    test = test[test["category"].isin(["books", "web"])]
    s = rater.score(test["text"].tolist())
    assert roc_auc_score((test["category"] == "books").to_numpy(), s) > 0.9
    assert rater.name == "books_importance"


def test_score_is_the_log_ratio_of_two_bag_models(pools, by_id):
    """Recompute Meta-rater Table 5's log p(doc)/q(doc) from explicit n-gram counts."""
    from sklearn.utils import murmurhash3_32

    books, raw, _ = pools
    cfg = DSIRConfig(target="books", buckets=1000)
    rater = DSIRImportance(cfg).fit(books, raw)

    def bucket_counts(texts):
        c = np.zeros(cfg.buckets)
        for t in texts:
            words = re.findall(r"\w+|[^\w\s]+", t.lower())
            for g in words + [f"{a} {b}" for a, b in zip(words, words[1:])]:
                c[abs(murmurhash3_32(g, seed=0)) % cfg.buckets] += 1
        return c

    p = bucket_counts(books) + 1.0
    q = bucket_counts(raw) + 1.0
    log_ratio = np.log(p / p.sum()) - np.log(q / q.sum())
    doc = by_id("wikipedia_ovos/07878")
    expected = bucket_counts([doc]) @ log_ratio
    assert rater.score([doc])[0] == pytest.approx(expected, rel=1e-9)


def test_empty_is_nan_and_counted_and_save_load(pools, tmp_path, by_id):
    books, raw, _ = pools
    rater = DSIRImportance(DSIRConfig(target="books", per_token=True)).fit(books, raw)
    texts = [by_id("wikipedia_ovos/07878"), "", "  \n "]
    s, counts = rater.score_counted(texts)
    assert np.isfinite(s[0]) and np.isnan(s[1:]).all()
    assert counts["empty_text"] == 2 and counts["nan_score"] == 2
    rater.save(tmp_path / "books.npz")
    again = DSIRImportance.load(tmp_path / "books.npz")
    assert again.cfg == rater.cfg
    np.testing.assert_array_equal(again.score(texts), s)


def test_fit_refuses_an_empty_target():
    with pytest.raises(ValueError, match="needs target and raw"):
        DSIRImportance().fit([], ["x"])


# --- issue #28: the survivors of mutation testing (benchmarks/results/mutation.csv) ---


def test_per_token_divides_by_the_number_of_ngrams():
    raw = DSIRImportance(DSIRConfig(target="t", buckets=64)).fit(["alpha beta gamma", "alpha"], ["delta epsilon"])
    per = DSIRImportance(DSIRConfig(target="t", buckets=64, per_token=True))
    per.log_diff = raw.log_diff
    # "alpha beta gamma": 3 unigrams + 2 bigrams; "alpha": one unigram, divided by 1
    np.testing.assert_allclose(per.score(["alpha beta gamma", "alpha"]),
                               raw.score(["alpha beta gamma", "alpha"]) / [5, 1], rtol=1e-12)


def test_lowercase_off_keeps_cased_words_apart():
    # "Book" and "book" share a bucket only when lowercased (DSIR's reference code lowercases; the switch is honoured)
    cased = DSIRImportance(DSIRConfig(target="t", buckets=4096, max_ngram=1, lowercase=False))
    lower = DSIRImportance(DSIRConfig(target="t", buckets=4096, max_ngram=1))
    assert (cased.features(["Book"]) != cased.features(["book"])).nnz == 2
    assert (lower.features(["Book"]) != lower.features(["book"])).nnz == 0


def test_refusals_name_what_is_missing(tmp_path):
    rater = DSIRImportance(DSIRConfig(target="t", buckets=1000))
    with pytest.raises(RuntimeError, match="^t_importance: call fit\\(\\) or load\\(\\) first$"):
        rater.score(["x"])
    with pytest.raises(RuntimeError, match="^nothing to save: not fitted$"):
        rater.save(tmp_path / "t.npz")
    with pytest.raises(ValueError, match="^999 bucket counts for a model of 1000 buckets$"):
        rater.fit_counts(np.ones(999), np.ones(1000))
    with pytest.raises(ValueError, match="^DSIR needs target and raw texts, got 1 and 0$"):
        rater.fit(["x"], [])
    rater.fit(["a b"], ["c"])  # one raw text is enough
    rater.save(tmp_path / "new" / "folder" / "t.npz")  # parent folders are made
    assert (tmp_path / "new" / "folder" / "t.npz").exists()


@pytest.mark.parametrize("cfg", [DSIRConfig(), DSIRConfig(buckets=997, max_ngram=3), DSIRConfig(max_ngram=1),
                                 DSIRConfig(lowercase=False)], ids=["default", "trigrams", "unigrams", "cased"])
def test_features_equal_sklearns_hashing_vectorizer(pools, cfg):
    """``features`` counts distinct n-grams before hashing; the matrix must be HashingVectorizer's, entry for
    entry, on real documents and on the cases where lowercasing or splitting could part ways (dotted capital I
    lowercases to two code points, a combining mark, words shorter than n, no word at all)."""
    _, raw, _ = pools
    texts = raw[:400] + ["", "   ", "İstanbul İİ ŞEHİR", "a", "a b", "e\u0301t\u00e9 ÉTÉ", "x\u200by", "ß ẞ ﬁ"]
    hasher = DSIRImportance(cfg)
    got, want = hasher.features(texts), hasher.reference_vectorizer().transform(texts)
    assert got.shape == want.shape == (len(texts), cfg.buckets) and got.has_sorted_indices
    assert np.array_equal(got.indptr, want.indptr)
    assert np.array_equal(got.indices, want.indices)
    assert np.array_equal(got.data, want.data) and got.dtype == want.dtype == np.float64
    assert got[-8].nnz == got[-7].nnz == 0 and got[-5].nnz == 1
    # the dotted capital I lowercases to "i" + U+0307, a mark that WORDPUNCT splits off as its own word
    assert dict(hasher.ngram_counts("İstanbul İİ")).get("\u0307") == (None if not cfg.lowercase else 3)
