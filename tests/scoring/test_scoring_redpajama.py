"""Each RedPajama signal (Meta-rater Table 5) on real documents, values worked out by hand.

Working for doc A = stackexchange_dumps/history-meta/000143:
  "Q: Proposed tag merge: ancient rome & roman empire\\nwhat about merging these tags?\\nancient-rome + roman-empire"
  raw words (\\w+|[^\\w\\s]+): 24, of which 7 have no letter (: : & ? - + -)
  normalised words (punctuation gone, so "ancient-rome" -> "ancientrome"): 15, all distinct, 86 chars
  lines: 3; only line 2 ends in "?"; line 1 has 2 capitals in 51 chars (50 + "\\n")
  sentences: "Q: ... tags?" and "ancient-rome + roman-empire" -> 2
Doc B = cc_dolma_tests/CC-MAIN-2019-30-00140-063 ("Health Effects" + a numbered list):
  11 lines (one blank); "  2. ..." and "  8. ..." end with "."
  normalised lines: "health effects" 0, "" 0, "1 1" 2/3, "2" 1, six of "k 15xx" 5/6, "8" 1 -> mean 23/33
  capitals: "Health Effects\\n" 2/15, rest 0 -> mean 2/165
  raw words 29 ("2. ..." is "2", ".", "..."), 2 with letters; normalised words 18 ("1" twice), 47 chars
  sentences: the regex cuts at each "." -> 10 matches
Doc C = stackexchange_dumps/coffee/001497: the question title is repeated in the body;
  normalised words 26, 111 chars; top bigram ("how","much") x2 = 14 chars; top trigram
  ("how","much","caffeine") x2 = 30 chars (ties broken by first occurrence, as Counter does).
Below those, small hand-made texts (worked out in comments) pin every signal, the boundaries (no text,
one word, punctuation only, no documents) and the frame / counts API without the corpus.
"""

import math

import numpy as np
import pytest

from curation.data import codepoints
from curation.scoring import redpajama as rp

A = "stackexchange_dumps/history-meta/000143"
B = "cc_dolma_tests/CC-MAIN-2019-30-00140-063"
C = "stackexchange_dumps/coffee/001497"


def signals(by_id, *keys):
    # Computed inside each test, not in a shared module fixture: mutmut runs for a mutant only the tests
    # that reached the function, and a module fixture's calls are charged to the first test that asks
    # for it, so every other assertion here went unrun (issue #28)
    return {k: rp.signals_of(by_id(k)) for k in keys}


def test_docs_are_the_ones_worked_out(by_id):
    assert by_id(A).startswith("Q: Proposed tag merge: ancient rome & roman empire\n")
    assert by_id(B).startswith("Health Effects\n\n  1. 1\n  2. ...\n  3. 1587")
    assert by_id(C).startswith("Q: How much caffeine is in one expresso shot?\nHow much caffeine")


def test_doc_frac_no_alph_words(by_id):
    sig = signals(by_id, A, B)
    assert sig[A]["doc_frac_no_alph_words"] == pytest.approx(7 / 24)
    assert sig[B]["doc_frac_no_alph_words"] == pytest.approx(27 / 29)


def test_doc_mean_word_length(by_id):
    sig = signals(by_id, A, B)
    assert sig[A]["doc_mean_word_length"] == pytest.approx(86 / 15)
    assert sig[B]["doc_mean_word_length"] == pytest.approx(47 / 18)


def test_doc_frac_unique_words(by_id):
    sig = signals(by_id, A, B)
    assert sig[A]["doc_frac_unique_words"] == pytest.approx(1.0)
    assert sig[B]["doc_frac_unique_words"] == pytest.approx(17 / 18)


def test_doc_unigram_entropy(by_id):
    sig = signals(by_id, A, B)
    assert sig[A]["doc_unigram_entropy"] == pytest.approx(math.log(15))
    # 16 words once, "1" twice: 16/18 ln 18 + 2/18 ln 9
    assert sig[B]["doc_unigram_entropy"] == pytest.approx((16 * math.log(18) + 2 * math.log(9)) / 18)


def test_doc_word_count(by_id):
    sig = signals(by_id, A, B, C)
    assert sig[A]["doc_word_count"] == 15
    assert sig[B]["doc_word_count"] == 18
    assert sig[C]["doc_word_count"] == 26


def test_lines_ending_with_terminal_punctution_mark(by_id):
    sig = signals(by_id, A, B)
    assert sig[A]["lines_ending_with_terminal_punctution_mark"] == pytest.approx(1 / 3)
    assert sig[B]["lines_ending_with_terminal_punctution_mark"] == pytest.approx(2 / 11)


def test_lines_numerical_chars_fraction(by_id):
    sig = signals(by_id, A, B)
    assert sig[A]["lines_numerical_chars_fraction"] == 0.0
    assert sig[B]["lines_numerical_chars_fraction"] == pytest.approx(23 / 33)


def test_lines_uppercase_letter_fraction(by_id):
    sig = signals(by_id, A, B)
    assert sig[A]["lines_uppercase_letter_fraction"] == pytest.approx(2 / 51 / 3)
    assert sig[B]["lines_uppercase_letter_fraction"] == pytest.approx(2 / 165)


def test_doc_num_sentences(by_id):
    sig = signals(by_id, A, B)
    assert sig[A]["doc_num_sentences"] == 2
    assert sig[B]["doc_num_sentences"] == 10


def test_doc_frac_chars_top_2gram(by_id):
    sig = signals(by_id, A, C)
    assert sig[A]["doc_frac_chars_top_2gram"] == 0.0  # no bigram repeats
    assert sig[C]["doc_frac_chars_top_2gram"] == pytest.approx(14 / 111)


def test_doc_frac_chars_top_3gram(by_id):
    sig = signals(by_id, A, C)
    assert sig[A]["doc_frac_chars_top_3gram"] == 0.0
    assert sig[C]["doc_frac_chars_top_3gram"] == pytest.approx(30 / 111)


def test_frame_has_the_eleven_paper_columns_and_counts_empty(by_id):
    texts = [by_id(A), "", " \n\t ", by_id(B)]
    frame, counts = rp.RedPajamaSignals().score_counted(texts)
    assert list(frame.columns) == list(rp.SIGNALS) and len(rp.SIGNALS) == 11
    assert len(frame) == 4  # empty documents keep their row
    assert counts["total"] == 4 and counts["empty_text"] == 2
    assert frame.loc[1, "doc_word_count"] == 0
    assert np.isnan(frame.loc[1, "doc_mean_word_length"])
    assert counts["nan_doc_mean_word_length"] == 2
    assert frame.loc[0, "doc_word_count"] == 15


# --- hand-made texts: every value below is worked out in the comments, no corpus needed ------------------

# D: two near-identical sentences, a blank line and a number line
D = "The cat sat.\nThe cat sat!\n\n42 cats\n"


def test_every_signal_of_a_small_hand_made_text():
    # raw words: The cat sat . The cat sat ! 42 cats -> 10, of which ".", "!", "42" have no letter
    # normalised words: the cat sat the cat sat 42 cats -> 8 words, 3*6 + 2 + 4 = 24 chars;
    #   distinct: the cat sat 42 cats -> 5; counts 2,2,2,1,1
    # lines: "The cat sat.\n", "The cat sat!\n", "\n", "42 cats\n" (no fifth line after the last "\n")
    # sentences: "The cat sat." / "The cat sat!" / "42 cats\n" (no \b before a "\n" after "." or "!")
    s = rp.signals_of(D)
    assert list(s) == list(rp.SIGNALS)  # exactly the paper's 11 names, in SIGNALS order
    assert s["doc_frac_no_alph_words"] == pytest.approx(3 / 10)
    assert s["doc_mean_word_length"] == pytest.approx(24 / 8)
    assert s["doc_frac_unique_words"] == pytest.approx(5 / 8)
    # three words at 2/8 and two at 1/8: 3 * (2/8) ln 4 + 2 * (1/8) ln 8 = (6/4 + 3/4) ln 2
    assert s["doc_unigram_entropy"] == pytest.approx(2.25 * math.log(2))
    assert s["doc_word_count"] == 8
    # "." and "!" end lines 1 and 2; the blank line and "42 cats" do not
    assert s["lines_ending_with_terminal_punctution_mark"] == pytest.approx(2 / 4)
    # normalised lines "the cat sat" 0, "the cat sat" 0, "" 0 (empty scores 0), "42 cats" 2/7
    assert s["lines_numerical_chars_fraction"] == pytest.approx(2 / 7 / 4)
    # raw lines with their "\n": 1/13, 1/13, 0/1, 0/8
    assert s["lines_uppercase_letter_fraction"] == pytest.approx(2 / 13 / 4)
    assert s["doc_num_sentences"] == 3
    # top bigram ("the","cat") x2 = 12 chars (("cat","sat") ties it with the same 12)
    assert s["doc_frac_chars_top_2gram"] == pytest.approx(12 / 24)
    # top trigram ("the","cat","sat") x2 = 18 chars; no 4-gram repeats, so a 4-gram here would give 0
    assert s["doc_frac_chars_top_3gram"] == pytest.approx(18 / 24)


def test_empty_one_word_and_punctuation_only_documents_at_the_boundaries():
    # no text: counts are 0, ratios over words or lines are NaN (RedPajama's None), and the n-gram
    # fractions are 0.0, RedPajama's value when the document has no n-gram at all
    e = rp.signals_of("")
    assert e["doc_word_count"] == 0 and e["doc_num_sentences"] == 0
    for name in ("doc_frac_no_alph_words", "doc_mean_word_length", "doc_frac_unique_words",
                 "doc_unigram_entropy", "lines_ending_with_terminal_punctution_mark",
                 "lines_numerical_chars_fraction", "lines_uppercase_letter_fraction"):
        assert math.isnan(e[name]), name
    assert e["doc_frac_chars_top_2gram"] == 0.0 and e["doc_frac_chars_top_3gram"] == 0.0

    # one word: one outcome with probability 1 has entropy 0 (not NaN, no division by ln 1); fewer
    # words than n means no n-gram, which scores 0 (not 1)
    one = rp.signals_of("Hello")
    assert one["doc_unigram_entropy"] == 0.0
    assert one["doc_frac_unique_words"] == 1.0 and one["doc_mean_word_length"] == 5.0
    assert one["doc_frac_chars_top_2gram"] == 0.0 and one["doc_frac_chars_top_3gram"] == 0.0
    assert one["lines_uppercase_letter_fraction"] == pytest.approx(1 / 5)  # one line, no "\n"

    # two distinct words: the bigram is there once, and a single occurrence scores 0
    assert rp.signals_of("hello world")["doc_frac_chars_top_2gram"] == 0.0

    # punctuation only: raw words ",,," and "!!!" exist (both letterless), normalised words do not;
    # the one line ends in "!" after rstrip, and its normalised form is "" which scores 0 digits
    p = rp.signals_of(" ,,, !!! ")
    assert p["doc_word_count"] == 0 and math.isnan(p["doc_mean_word_length"])
    assert p["doc_frac_no_alph_words"] == 1.0
    assert p["lines_ending_with_terminal_punctution_mark"] == 1.0
    assert p["lines_numerical_chars_fraction"] == 0.0
    assert p["lines_uppercase_letter_fraction"] == 0.0


def test_an_empty_line_given_directly_scores_zero_in_both_line_fractions():
    # lines() never yields an empty raw line, but these are public per-line functions and RedPajama's
    # reference scores a zero-length line 0.0 (not 0/0) in both: ["", "AB\n"] -> (0 + 2/3) / 2
    assert rp.lines_uppercase_letter_fraction(["", "AB\n"]) == pytest.approx(1 / 3)
    assert rp.lines_numerical_chars_fraction(["", "12ab"]) == pytest.approx(1 / 4)
    # lines kept with their "\n" still count when the mark sits before trailing spaces
    marks = rp.lines_ending_with_terminal_punctution_mark(["a.  \n", "b\n", "c\u201d\n"])
    assert marks == pytest.approx(2 / 3)


def test_normalize_strips_ascii_punctuation_lowercases_collapses_whitespace_and_decomposes():
    assert rp.normalize("  Hello,\tWORLD!!\n\n  ancient-rome  ") == "hello world ancientrome"
    # NFD: "é" becomes "e" + combining acute (U+0301), so "Café" is five code points
    assert rp.normalize("Café") == "cafe\u0301"
    assert rp.normalize(" \n\t ") == ""


def test_score_score_frame_and_counts_agree_on_hand_made_texts():
    # word counts 0, 1, 2, 3 and one document with no word: empty_text is 1, not 3
    texts = ["", "one", "two words", "x y z"]
    model = rp.RedPajamaSignals()
    frame, counts = model.score_counted(texts)
    assert counts["total"] == 4 and counts["empty_text"] == 1
    assert counts["nan_doc_unigram_entropy"] == 1 and counts["nan_doc_frac_chars_top_2gram"] == 0
    assert frame["doc_word_count"].tolist() == [0.0, 1.0, 2.0, 3.0]
    # ln 1 = 0, ln 2, ln 3: the entropy of k equally likely distinct words
    assert frame["doc_unigram_entropy"].iloc[1:].tolist() == pytest.approx([0.0, math.log(2), math.log(3)])

    arr = model.score(texts)
    assert isinstance(arr, np.ndarray) and arr.dtype == np.float64 and arr.shape == (4, 11)
    np.testing.assert_array_equal(arr, frame.to_numpy())
    assert arr[3, rp.SIGNALS.index("doc_word_count")] == 3


def test_no_documents_give_an_empty_float64_frame_with_the_eleven_columns():
    # the frame's shape and dtypes are the contract even with no row to infer them from
    frame = rp.RedPajamaSignals().score_frame([])
    assert frame.shape == (0, 11) and list(frame.columns) == list(rp.SIGNALS)
    assert (frame.dtypes == np.float64).all()
    assert rp.RedPajamaSignals().score([]).shape == (0, 11)


EDGE_TEXTS = [
    "", "\n", "\n\n", "a\n", "a\nb", "...\n!!!", "x\n...", "ΟΔΟΣ\nΣ\nΑΣ Σ.", "İstanbul\nİ", "ǅ ǈ Ⅻ ½ ²",
    "café\u0301 e\u0301\n\u00a0 \u2003x\u3000y\r\nz\r", "a\x1cb\x1dc\x1ed\x1ff\x85g", "a\ud800b\n\udfff", "x1 2y 3 ab12 12ab a_1 __ 1_a", "AB\n\nc D\n12 ..3\n", "A1\n\n", "...\n9Z", "42 ٤٢ ४२\n\t\t7", "Q: a-b? c!\n",
    "a.b ab..cd _x_ a\u0301b 1a2b ça—x 日本語テキスト 🙂x x🙂 ½a", "...", "a", " a ", "--a--b--", "\u0301\u0301 \u0301a",
]


def test_word_counts_equal_the_regexes_matches():
    """The raw words (``\\w+|[^\\w\\s]+``) and the lettered ones (``[a-zA-Z]\\w*``), counted from code-point
    classes: as many as the regexes find, on edge texts and on a text holding every code point."""
    import re

    every = "".join(map(chr, range(0, 0x110000, 7)))  # each class next to each other, runs of every length
    for text in [*EDGE_TEXTS, every, every[::-1]]:
        want = (len(re.findall(r"\w+|[^\w\s]+", text)), len(re.findall(r"[a-zA-Z]\w*", text)))
        assert rp._word_counts(codepoints.code_points(text)) == want, text[:40]


def test_signals_of_equals_each_definition_on_the_corpus(full_corpus, monkeypatch):
    """signals_of cuts the per-line normalisation from one whole-text pass and counts the raw words from
    code-point classes: every signal must equal signals_of_reference's (each definition applied as
    written) exactly, on every 8th corpus document and on texts where lines, case and whitespace meet."""
    monkeypatch.setattr(codepoints, "_TABLES", {})  # tables built here, not inherited from an earlier test
    texts = full_corpus["text"].tolist()[::8] + EDGE_TEXTS
    for text in texts:
        got, want = rp.signals_of(text), rp.signals_of_reference(text)
        assert list(got) == list(want) == list(rp.SIGNALS)
        for k in want:
            assert got[k] == want[k] or (math.isnan(got[k]) and math.isnan(want[k])), (k, text[:80])
