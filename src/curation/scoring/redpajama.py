"""The 11 RedPajama natural-language quality signals used by Meta-rater.

Meta-rater (Zhuang et al., 2025) Sec. 3.3 "Natural Language Quality Signals"
and Appendix A, Table 5 list 11 rule-based signals from RedPajama-V2 (Weber et
al., 2024). Definitions below are Table 5's, word for word; the implementation
follows the RedPajama-V2 reference code (``app/src/core``) on the points Table
5 leaves open:

- *raw words*: ``nltk.WordPunctTokenizer`` on the raw text, i.e. the regex
  ``\\w+|[^\\w\\s]+`` (re-implemented here, no nltk dependency);
- *normalised content*: ASCII punctuation (``string.punctuation``) removed,
  lowercased, whitespace stripped and collapsed to single spaces, Unicode NFD;
  *normalised words* are that string split on spaces;
- *lines*: the regex ``[^\\n]*\\n|[^\\n]+$`` (each line keeps its ``\\n``; blank
  lines count), raw or normalised per line.

RedPajama-V2 stores the three ``lines_*`` signals per line; Meta-rater uses one
number per document, so we report the **mean over lines** (for
``lines_ending_with_terminal_punctution_mark``: the fraction of lines that end
with one). The misspelt name ``punctution`` is RedPajama's and Table 5's, kept
so the column is found under the paper's name. Values are not rounded
(RedPajama rounds to its ``PRECISION``).

Where RedPajama returns ``None`` (no words, no lines) we return NaN; the
documents with no normalised word are counted as ``empty_text``.
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from collections import Counter
from typing import Sequence

import numpy as np
import pandas as pd

from curation.data.codepoints import char_table, code_points, span_counts

from curation.scoring.base import ensure_texts

SIGNALS = (
    "doc_frac_no_alph_words",
    "doc_mean_word_length",
    "doc_frac_unique_words",
    "doc_unigram_entropy",
    "doc_word_count",
    "lines_ending_with_terminal_punctution_mark",
    "lines_numerical_chars_fraction",
    "lines_uppercase_letter_fraction",
    "doc_num_sentences",
    "doc_frac_chars_top_2gram",
    "doc_frac_chars_top_3gram",
)

_PUNCT_TABLE = str.maketrans("", "", string.punctuation)
_PUNCT_BYTES = string.punctuation.encode()
_WS = re.compile(r"\s+")
_WORDPUNCT = re.compile(r"\w+|[^\w\s]+")
_LINES = re.compile(r"[^\n]*\n|[^\n]+$")
_ALPHA = re.compile(r"[a-zA-Z]")
# Table 5: "calculated using the regular expression r'\b[^.!?]+[.!?]*'"
_SENTENCE = re.compile(r"\b[^.!?]+[.!?]*", flags=re.UNICODE)
# Table 5: 'A terminal punctation mark is defined as one of: ".", "!", "?", "”"'
TERMINAL_PUNCTUATION = (".", "!", "?", "\u201d")


def normalize(text: str) -> str:
    """RedPajama-V2 ``normalize``: drop ASCII punctuation, lowercase, collapse whitespace, NFD."""
    text = text.translate(_PUNCT_TABLE).lower().strip()
    return unicodedata.normalize("NFD", _WS.sub(" ", text))


def _normalize_rest(lowered: str) -> str:
    # normalize() after its punctuation removal and lowercasing. str.split() and str.strip() cut at the
    # characters re's \s matches (both are str.isspace, checked over every code point), so the join is
    # _WS.sub(" ", lowered.strip()), at about half the cost
    return unicodedata.normalize("NFD", " ".join(lowered.split()))


def _drop_punctuation(text: str) -> str:
    # text.translate(_PUNCT_TABLE) at ~5x the speed: string.punctuation is ASCII, and in UTF-8 an ASCII
    # byte never occurs inside a multi-byte character (surrogatepass: lone surrogates round-trip too)
    return text.encode("utf-8", "surrogatepass").translate(None, _PUNCT_BYTES).decode("utf-8", "surrogatepass")


def raw_words(text: str) -> list[str]:
    """WordPunctTokenizer words of the raw text."""
    return _WORDPUNCT.findall(text)


def lines(text: str) -> list[str]:
    """Lines with their trailing ``\\n``, blank lines included (RedPajama ``split_paragraphs``)."""
    return _LINES.findall(text)


# --- the 11 signals, one function each ----------------------------------------


def doc_frac_no_alph_words(words_raw: list[str]) -> float:
    """The fraction of words that contain no alphabetical character. (raw words)"""
    if not words_raw:
        return math.nan
    with_alpha = sum(1 for w in words_raw if _ALPHA.search(w))
    return 1.0 - with_alpha / len(words_raw)


def doc_mean_word_length(words_norm: list[str]) -> float:
    """The mean length of words in the content after normalisation."""
    if not words_norm:
        return math.nan
    return sum(map(len, words_norm)) / len(words_norm)


def doc_frac_unique_words(words_norm: list[str]) -> float:
    """The fraction of unique words in the content. This is also known as the
    degeneracy of a text sample. (normalised words)"""
    if not words_norm:
        return math.nan
    return len(set(words_norm)) / len(words_norm)


def doc_unigram_entropy(words_norm: list[str]) -> float:
    """The entropy of the unigram distribution of the content. This measures the
    diversity of the content and is computed using sum(-x / total * log(x / total))
    where the sum is taken over counts of unique words in the normalised content."""
    if not words_norm:
        return math.nan
    total = len(words_norm)
    return sum(-x / total * math.log(x / total) for x in Counter(words_norm).values())


def doc_word_count(words_norm: list[str]) -> float:
    """The number of words in the content after normalisation."""
    return float(len(words_norm))


def lines_ending_with_terminal_punctution_mark(lines_raw: list[str]) -> float:
    """Indicates whether a line ends with a terminal punctuation mark. A terminal
    punctation mark is defined as one of: ".", "!", "?", "”".
    (per raw line after ``rstrip``; document value = fraction of lines)"""
    if not lines_raw:
        return math.nan
    return sum(1 for ln in lines_raw if ln.rstrip().endswith(TERMINAL_PUNCTUATION)) / len(lines_raw)


def lines_numerical_chars_fraction(lines_norm: list[str]) -> float:
    """The ratio between the number of numerical characters and total number of
    characters in each line. This is based on the normalised content.
    (``str.isnumeric``; an empty normalised line scores 0; document value = mean)"""
    if not lines_norm:
        return math.nan
    per_line = [sum(map(str.isnumeric, ln)) / len(ln) if ln else 0.0 for ln in lines_norm]
    return sum(per_line) / len(per_line)


def lines_uppercase_letter_fraction(lines_raw: list[str]) -> float:
    """The ratio between the number of uppercase letters and total number of
    characters in each line. This is based on the raw text.
    (the line's length includes its ``\\n``; document value = mean)"""
    if not lines_raw:
        return math.nan
    per_line = [sum(map(str.isupper, ln)) / len(ln) if ln else 0.0 for ln in lines_raw]
    return sum(per_line) / len(per_line)


def doc_num_sentences(text: str) -> float:
    """The number of sentences in the content. This is calculated using the
    regular expression r'\\b[^.!?]+[.!?]*'. (raw text)"""
    return float(len(_SENTENCE.findall(text)))


def _frac_chars_top_ngram(words_norm: list[str], n: int) -> float:
    # RedPajama: 0 when no n-gram repeats; characters = sum of word lengths (no spaces)
    ngrams = Counter(zip(*(words_norm[i:] for i in range(n))))
    if not ngrams:
        return 0.0
    ngram, count = ngrams.most_common(1)[0]
    if count <= 1:
        return 0.0
    total_chars = sum(map(len, words_norm))
    return sum(map(len, ngram)) * count / total_chars


def doc_frac_chars_top_2gram(words_norm: list[str]) -> float:
    """The fraction of characters in the top word 2-gram. (normalised words)"""
    return _frac_chars_top_ngram(words_norm, 2)


def doc_frac_chars_top_3gram(words_norm: list[str]) -> float:
    """The fraction of characters in the top word 3-gram. (normalised words)"""
    return _frac_chars_top_ngram(words_norm, 3)


def signals_of_reference(text: str) -> dict[str, float]:
    """All 11 signals of one document, each from its definition above (the oracle of ``signals_of``)."""
    words_norm = normalize(text).split()
    words_raw = raw_words(text)
    lines_raw = lines(text)
    lines_norm = [normalize(ln) for ln in lines_raw]
    return _signals(text, doc_frac_no_alph_words(words_raw), words_norm, lines_raw,
                    lines_numerical_chars_fraction(lines_norm), lines_uppercase_letter_fraction(lines_raw))


def signals_of(text: str) -> dict[str, float]:
    """All 11 signals of one document: ``signals_of_reference``'s values, bit for bit (tested on the
    corpus and on edge texts), with less work per line and per word (1.6-2x on the corpus):

    - punctuation removal (on the UTF-8 bytes) and lowercasing run once on the whole text, and each
      line's normalised form is cut from that (both map characters one by one and never touch ``\\n``;
      a capital sigma's final form looks at neighbours only up to a ``\\n``, which is neither cased
      nor case-ignorable, so lowercasing the whole text and each line agree);
    - the raw words and the raw words holding a letter are counted with numpy from per-code-point tables of
      ``\\w`` and ``\\s`` (:func:`_word_counts`), not by listing the regex's matches;
    - the per-line capitals (raw lines) and numeric characters (normalised lines) are counted for all
      lines at once with numpy, from ``str.isupper`` / ``str.isnumeric`` tables of every code point
      (``curation.data.codepoints``);
      each line's fraction is still its own integer division, summed in line order.
    """
    lowered = _drop_punctuation(text).lower()
    words_norm = _normalize_rest(lowered).split()
    raw = code_points(text)
    n_raw, n_alpha = _word_counts(raw)
    lines_raw = lines(text)
    # lines_raw[i] is segment i of the text cut at "\n" (its "\n" included); strip() drops that "\n"
    lines_norm = [_normalize_rest(seg) for seg in lowered.split("\n")[: len(lines_raw)]]
    no_alph = 1.0 - n_alpha / n_raw if n_raw else math.nan
    numeric, upper = _line_fractions(raw, lines_norm) if lines_raw else (math.nan, math.nan)
    return _signals(text, no_alph, words_norm, lines_raw, numeric, upper)


_CLASSES: np.ndarray | None = None


def _word_classes() -> np.ndarray:
    """uint8 per code point: 0 white space (``\\s``), 1 word character (``\\w``), 2 any other (built once)."""
    global _CLASSES
    if _CLASSES is None:
        word, space = char_table(re.compile(r"\w")), char_table(re.compile(r"\s"))
        _CLASSES = np.where(word, 1, np.where(space, 0, 2)).astype(np.uint8)
    return _CLASSES


def _word_counts(raw: np.ndarray) -> tuple[int, int]:
    """(how many ``\\w+|[^\\w\\s]+`` matches, how many ``[a-zA-Z]\\w*`` matches) in the text of code points
    ``raw``. The first regex's matches are the maximal runs of word characters and the maximal runs of other
    non-space characters, so each starts where a non-space character's class differs from the one before it.
    The second's are one per maximal run of word characters holding an ASCII letter (a match starts at the
    run's first letter and takes the rest of the run; letters are word characters)."""
    if not len(raw):
        return 0, 0
    cls = _word_classes()[raw]
    starts = cls != 0
    starts[1:] &= cls[1:] != cls[:-1]
    run = np.cumsum(starts & (cls == 1))  # the word run each character is in (or after)
    letter_runs = run[((raw >= 65) & (raw <= 90)) | ((raw >= 97) & (raw <= 122))]
    n_alpha = int(np.count_nonzero(np.diff(letter_runs))) + 1 if len(letter_runs) else 0
    return int(np.count_nonzero(starts)), n_alpha


def _line_fractions(raw: np.ndarray, lines_norm: list[str]) -> tuple[float, float]:
    """(lines_numerical_chars_fraction, lines_uppercase_letter_fraction) of a text (its code points ``raw``)
    with >= 1 line."""
    ends = np.flatnonzero(raw == 10) + 1  # each raw line ends after its "\n" ...
    if len(ends) < len(lines_norm):  # ... and the last one at the end of the text when it has no "\n"
        ends = np.append(ends, len(raw))
    starts = np.concatenate(([0], ends[:-1]))
    n_upper = span_counts(char_table(str.isupper)[raw], starts, ends).tolist()
    n_raw = (ends - starts).tolist()
    # normalised lines hold no "\n" (str.split removed every whitespace): joined with one "\n" between
    norm = code_points("\n".join(lines_norm))
    n_norm = [len(ln) for ln in lines_norm]
    ends = np.cumsum(np.array(n_norm, dtype=np.int64) + 1) - 1
    n_numeric = span_counts(char_table(str.isnumeric)[norm], ends - n_norm, ends).tolist()
    per_numeric = [d / n if n else 0.0 for d, n in zip(n_numeric, n_norm)]
    per_upper = [u / n for u, n in zip(n_upper, n_raw)]
    return sum(per_numeric) / len(per_numeric), sum(per_upper) / len(per_upper)


def _signals(text: str, no_alph: float, words_norm: list[str], lines_raw: list[str], numeric: float,
             upper: float) -> dict:
    return {
        "doc_frac_no_alph_words": no_alph,
        "doc_mean_word_length": doc_mean_word_length(words_norm),
        "doc_frac_unique_words": doc_frac_unique_words(words_norm),
        "doc_unigram_entropy": doc_unigram_entropy(words_norm),
        "doc_word_count": doc_word_count(words_norm),
        "lines_ending_with_terminal_punctution_mark": lines_ending_with_terminal_punctution_mark(lines_raw),
        "lines_numerical_chars_fraction": numeric,
        "lines_uppercase_letter_fraction": upper,
        "doc_num_sentences": doc_num_sentences(text),
        "doc_frac_chars_top_2gram": doc_frac_chars_top_2gram(words_norm),
        "doc_frac_chars_top_3gram": doc_frac_chars_top_3gram(words_norm),
    }


class RedPajamaSignals:
    """The 11 signals as one DataFrame; stateless (``fit`` is a no-op for a uniform API)."""

    name = "redpajama"
    columns = SIGNALS

    def fit(self, *args, **kwargs) -> "RedPajamaSignals":
        return self

    def score_frame(self, texts: Sequence[str]) -> pd.DataFrame:
        """(n_docs, 11) float64 frame, columns in ``SIGNALS`` order."""
        rows = [signals_of(t) for t in ensure_texts(texts)]
        return pd.DataFrame(rows, columns=list(SIGNALS), dtype=np.float64)

    def score(self, texts: Sequence[str]) -> np.ndarray:
        return self.score_frame(texts).to_numpy()

    def score_counted(self, texts: Sequence[str]) -> tuple[pd.DataFrame, dict[str, int]]:
        """Signals plus counts: total, empty_text (no normalised word), nan_<signal>."""
        frame = self.score_frame(texts)
        counts = {"total": len(frame), "empty_text": int((frame["doc_word_count"] == 0).sum())}
        counts |= {f"nan_{c}": int(frame[c].isna().sum()) for c in SIGNALS}
        return frame, counts
