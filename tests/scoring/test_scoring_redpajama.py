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
"""

import math

import numpy as np
import pytest

from curation.scoring import redpajama as rp

A = "stackexchange_dumps/history-meta/000143"
B = "cc_dolma_tests/CC-MAIN-2019-30-00140-063"
C = "stackexchange_dumps/coffee/001497"


@pytest.fixture(scope="module")
def sig(by_id):
    return {k: rp.signals_of(by_id(k)) for k in (A, B, C)}


def test_docs_are_the_ones_worked_out(by_id):
    assert by_id(A).startswith("Q: Proposed tag merge: ancient rome & roman empire\n")
    assert by_id(B).startswith("Health Effects\n\n  1. 1\n  2. ...\n  3. 1587")
    assert by_id(C).startswith("Q: How much caffeine is in one expresso shot?\nHow much caffeine")


def test_doc_frac_no_alph_words(sig):
    assert sig[A]["doc_frac_no_alph_words"] == pytest.approx(7 / 24)
    assert sig[B]["doc_frac_no_alph_words"] == pytest.approx(27 / 29)


def test_doc_mean_word_length(sig):
    assert sig[A]["doc_mean_word_length"] == pytest.approx(86 / 15)
    assert sig[B]["doc_mean_word_length"] == pytest.approx(47 / 18)


def test_doc_frac_unique_words(sig):
    assert sig[A]["doc_frac_unique_words"] == pytest.approx(1.0)
    assert sig[B]["doc_frac_unique_words"] == pytest.approx(17 / 18)


def test_doc_unigram_entropy(sig):
    assert sig[A]["doc_unigram_entropy"] == pytest.approx(math.log(15))
    # 16 words once, "1" twice: 16/18 ln 18 + 2/18 ln 9
    assert sig[B]["doc_unigram_entropy"] == pytest.approx((16 * math.log(18) + 2 * math.log(9)) / 18)


def test_doc_word_count(sig):
    assert sig[A]["doc_word_count"] == 15
    assert sig[B]["doc_word_count"] == 18
    assert sig[C]["doc_word_count"] == 26


def test_lines_ending_with_terminal_punctution_mark(sig):
    assert sig[A]["lines_ending_with_terminal_punctution_mark"] == pytest.approx(1 / 3)
    assert sig[B]["lines_ending_with_terminal_punctution_mark"] == pytest.approx(2 / 11)


def test_lines_numerical_chars_fraction(sig):
    assert sig[A]["lines_numerical_chars_fraction"] == 0.0
    assert sig[B]["lines_numerical_chars_fraction"] == pytest.approx(23 / 33)


def test_lines_uppercase_letter_fraction(sig):
    assert sig[A]["lines_uppercase_letter_fraction"] == pytest.approx(2 / 51 / 3)
    assert sig[B]["lines_uppercase_letter_fraction"] == pytest.approx(2 / 165)


def test_doc_num_sentences(sig):
    assert sig[A]["doc_num_sentences"] == 2
    assert sig[B]["doc_num_sentences"] == 10


def test_doc_frac_chars_top_2gram(sig):
    assert sig[A]["doc_frac_chars_top_2gram"] == 0.0  # no bigram repeats
    assert sig[C]["doc_frac_chars_top_2gram"] == pytest.approx(14 / 111)


def test_doc_frac_chars_top_3gram(sig):
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
