"""fastText raters trained for real on a few hundred corpus documents."""

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from curation.scoring import FastTextConfig, FastTextRater, UltraFineWebConfig, UltraFineWebTokenizer, build_training_set
from curation.scoring.fasttext_rater import dclm_normalise, ultrafineweb_clean

# small hash table: the paper default (2M buckets) allocates 0.8-2 GB per model
SMALL = dict(bucket=50_000, thread=1, quantize=False)  # quantization: its own test below


def _split_pools(df):
    """Train on even rows of the encyclopedic/books vs web pools, test on odd rows."""
    unlabelled = df[df["quality_label"].isna()].reset_index(drop=True)
    pos = unlabelled[unlabelled["category"].isin(["encyclopedic", "books"])]
    neg = unlabelled[unlabelled["category"] == "web"]
    return (pos.iloc[::2], neg.iloc[::2]), (pos.iloc[1::2], neg.iloc[1::2])


@pytest.fixture(scope="module")
def dclm(corpus_sample):
    (p, n), _ = _split_pools(corpus_sample)
    return FastTextRater(FastTextConfig(**SMALL)).fit(p["text"].tolist(), n["text"].tolist())


@pytest.fixture(scope="module")
def ufw(corpus_sample):
    (p, n), _ = _split_pools(corpus_sample)
    return FastTextRater(UltraFineWebConfig(**SMALL)).fit(p["text"].tolist(), n["text"].tolist())


def test_recipe_defaults_are_the_papers():
    d, u = FastTextConfig(), UltraFineWebConfig()
    assert (d.word_ngrams, d.dim, d.epoch, d.min_count, d.lr) == (2, 100, 5, 1, 0.1)
    assert (u.dim, u.lr, u.word_ngrams, u.min_count, u.epoch, u.threshold) == (256, 0.1, 3, 5, 3, 0.5)


@pytest.mark.parametrize("which", ["dclm", "ufw"])
def test_trained_classifier_separates_held_out_documents(which, request, corpus_sample):
    rater = request.getfixturevalue(which)
    _, (p, n) = _split_pools(corpus_sample)
    s = rater.score(p["text"].tolist() + n["text"].tolist())
    y = np.r_[np.ones(len(p)), np.zeros(len(n))]
    assert np.all((s >= 0) & (s <= 1))
    assert roc_auc_score(y, s) > 0.85


def test_dclm_puts_a_document_on_one_line(by_id):
    text = by_id("stackexchange_dumps/history-meta/000143")
    assert dclm_normalise(text) == "Q: Proposed tag merge: ancient rome & roman empire what about merging these tags? ancient-rome + roman-empire"


def test_ultrafineweb_preprocessing(by_id):
    # a real Wikipedia lead with diacritics (façade) and a real Q&A with newlines
    tok = UltraFineWebTokenizer()
    facade = by_id("wikipedia_ovos/03054")
    assert "façade" in facade and "façade" not in ultrafineweb_clean(facade) and "facade" in ultrafineweb_clean(facade)
    qa = by_id("stackexchange_dumps/history-meta/000143")
    out = tok([qa])[0]
    assert out.startswith("q : proposed tag merge : ancient rome & roman empire \\n what about")
    assert out.count("\\n") == 2 and "\n" not in out
    blanks = by_id("cc_dolma_tests/CC-MAIN-2019-30-00140-076")  # "Context\n\nContext of ..."
    assert "\n\n" in blanks and tok([blanks])[0].startswith("context \\n context of")


def test_bad_input_is_scored_nan_and_counted(dclm, ufw, by_id):
    texts = [by_id("wikipedia_ovos/07878"), "", "   \n\n  ", None]
    for rater in (dclm, ufw):
        s, counts = rater.score_counted(texts)
        assert np.isfinite(s[0]) and np.isnan(s[1:]).all()
        assert counts == {"total": 4, "scored": 1, "empty_text": 3, "nan_score": 3}


def test_threshold_rule(ufw, corpus_sample):
    texts = corpus_sample["text"].tolist()[:50]
    keep = ufw.predict_keep(texts)
    assert keep.dtype == bool and (keep == (ufw.score(texts) >= 0.5)).all()
    with pytest.raises(ValueError, match="no threshold"):
        FastTextRater(FastTextConfig()).predict_keep(texts)


def test_save_load_and_pretrained_path(ufw, corpus_sample, tmp_path):
    texts = corpus_sample["text"].tolist()[:40]
    path = tmp_path / "ufw.bin"
    ufw.save(path)
    again = FastTextRater.load(path)
    assert isinstance(again.cfg, UltraFineWebConfig)
    np.testing.assert_array_equal(again.score(texts), ufw.score(texts))
    # the same .bin given as a "public" pretrained classifier
    pre = FastTextRater(UltraFineWebConfig(pretrained_path=str(path)))
    np.testing.assert_array_equal(pre.score(texts), ufw.score(texts))
    with pytest.raises(ValueError, match="not among the model's labels"):
        FastTextRater(FastTextConfig(pretrained_path=str(path)))  # DCLM label __label__hq is absent
    with pytest.raises(ValueError, match="does not fit"):
        pre.fit(texts, texts)


def test_training_set_helper_feeds_the_rater(corpus_sample):
    ts = build_training_set(corpus_sample)
    rater = FastTextRater(FastTextConfig(**SMALL, epoch=2)).fit(ts.positives, ts.negatives)
    assert rater.n_train_["positives"] == len(ts.positives) and rater.n_train_["negatives"] == len(ts.negatives)


def test_one_thread_is_bit_reproducible_and_quantize_shrinks_the_model_keeping_its_ranking(corpus_sample, tmp_path):
    from scipy.stats import spearmanr

    (p, n), (tp, tn) = _split_pools(corpus_sample)
    texts = tp["text"].tolist() + tn["text"].tolist()
    # dim 10 keeps fastText's product-quantizer k-means (its cost grows with dim) to seconds
    base = dict(bucket=50_000, dim=10, thread=1)
    full = FastTextRater(FastTextConfig(**base, quantize=False)).fit(p["text"].tolist(), n["text"].tolist())
    runs = [FastTextRater(FastTextConfig(**base, quantize_cutoff=20_000)).fit(p["text"].tolist(), n["text"].tolist())
            for _ in range(2)]
    for i, rater in enumerate(runs):
        rater.save(tmp_path / f"q{i}.bin")
    full.save(tmp_path / "full.bin")
    # the default thread count (1): the same training set gives the same model, byte for byte
    assert (tmp_path / "q0.bin").read_bytes() == (tmp_path / "q1.bin").read_bytes()
    assert runs[0].n_train_["quantized"] and (tmp_path / "q0.bin").stat().st_size < (tmp_path / "full.bin").stat().st_size / 5
    assert spearmanr(full.score(texts), runs[0].score(texts)).statistic > 0.9
    reloaded = FastTextRater.load(tmp_path / "q0.bin")
    np.testing.assert_array_equal(reloaded.score(texts), runs[0].score(texts))


# Texts that every step of the BERT normaliser changes: accents and compatibility forms, CJK padding,
# control and format characters (dropped), whitespace other than a space, private use, surrogate-free
# astral characters, case mappings that change length or context (final sigma, dotted I).
EDGE_TEXTS = [
    "Ünïcödé façade ﬁnance ＦＵＬＬＷＩＤＴＨ ℡ Ω Å K",
    "中文字符 and 日本語 かな カナ 한국어 𠀀",
    "tab\there\r\ncrlf\x0bvt\x0cff\x00nul\ufffdrepl\x7fdel",
    "soft\u00adhyphen zero\u200bwidth joiner\u200d bom\ufeff rtl\u200f",
    "private\ue000use \U000f0000 plane",
    "ΣΟΦΟΣ final sigma ς İstanbul ŉ ǅ ß ẞ",
    "emoji 🙂👍🏽 ™ ½ ² ㎏",
    "\u2028line\u2029para \u00a0nbsp \u3000ideographic\u2003em",
    "",
    "   \n\n  ",
]


def test_ultrafineweb_normaliser_run_per_character_gives_the_tokenizers_own_tokens():
    import unicodedata

    import pandas as pd

    from tests.conftest import CORPUS_SHARDS

    texts = pd.read_parquet(CORPUS_SHARDS[0], columns=["text"])["text"].head(1500).tolist() + EDGE_TEXTS
    fast, reference = UltraFineWebTokenizer(), UltraFineWebTokenizer(fast=False)
    assert fast.fast and not reference.fast
    assert fast(texts) == reference(texts)
    # the comparison covered what the per-character path rewrites, on real documents too
    rewritten = [t for t in map(ultrafineweb_clean, texts[:1500]) if not fast._changing.isdisjoint(t)]
    assert len(rewritten) >= 30
    assert {"Lo", "Cc", "Cf", "Co"} <= {unicodedata.category(c) for c in fast._changing}
    # a second batch looks up only characters it has not seen, and still agrees
    assert fast(EDGE_TEXTS[::-1]) == reference(EDGE_TEXTS[::-1])


def test_ultrafineweb_tokenizer_with_another_normaliser_runs_it_as_it_is(tmp_path):
    import json

    from curation.scoring.fasttext_rater import UltraFineWebTokenizer as Tok

    spec = json.loads(Tok(fast=False)._tok.to_str())
    spec["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]}
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec))
    tok = Tok(str(path))
    assert not tok.fast  # NFKC composes across characters: not one character at a time
    assert tok(["Café\n\nBAR"]) == ["cafe \\n bar"]
