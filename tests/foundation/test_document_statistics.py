"""Per-document statistics (``curation.data.stats.document_statistics``): numpy counts over code points
that must equal the regex counts the definitions name, on the corpus and where characters get unusual."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.conftest import CORPUS_SHARDS
from curation.data import codepoints, stats
from curation.data.stats import document_statistics

EDGE_TEXTS = ["", " ", "\n", "a", " a ", "a\n\nb", "x\u00a0y\u2003z\u3000w", "\x1c\x1d\x1e\x1f\x85", "\t\r\n\x0b\x0c",
              "é e\u0301 ß ẞ İ", "² ½ ٤ 4 _ __a_", "日本語 テキスト", "😀 emoji", "end\n"]


def regex_statistics(texts: list[str]) -> pd.DataFrame:
    """The definitions as pandas regex counts (what document_statistics computed before issue #22)."""
    text = pd.Series(texts, dtype="string")
    n_chars = text.str.len().astype("int64").to_numpy()
    visible = n_chars - text.str.count(r"\s").astype("int64").to_numpy()
    letters = text.str.count(r"[^\W\d_]").astype("int64").to_numpy()
    return pd.DataFrame({"n_chars": n_chars, "n_words": text.str.count(r"\S+").astype("int64").to_numpy(),
                         "n_lines": (text.str.count("\n") + 1).astype("int64").to_numpy(),
                         "non_alpha_frac": np.divide(visible - letters, visible, out=np.zeros(len(texts)),
                                                     where=visible > 0)})


@pytest.mark.parametrize("chunk_chars", [1 << 23, 7], ids=["one-chunk", "many-chunks"])
def test_counts_equal_the_regex_definitions(monkeypatch, chunk_chars):
    # one whole corpus shard (4,129 documents) plus edge texts, in one numpy pass and cut into chunks of
    # a few characters (a document longer than a chunk is a chunk of its own)
    monkeypatch.setattr(stats, "_CHUNK_CHARS", chunk_chars)
    monkeypatch.setattr(codepoints, "_TABLES", {})  # the tables are built here, not inherited from an earlier test
    texts = pd.read_parquet(CORPUS_SHARDS[0], columns=["text"])["text"].tolist() + EDGE_TEXTS
    frame = pd.DataFrame({"id": [f"d{i}" for i in range(len(texts))], "text": texts})
    got = document_statistics(frame)
    want = regex_statistics(texts)
    for column in want.columns:
        assert np.array_equal(got[column].to_numpy(), want[column].to_numpy()), column
    assert got["source"].eq("unknown").all() and got["id"].tolist() == frame["id"].tolist()
    edge = got.tail(len(EDGE_TEXTS)).reset_index(drop=True)
    assert edge.loc[0, ["n_chars", "n_words", "n_lines"]].tolist() == [0, 0, 1]
    assert edge.loc[4, ["n_words", "n_lines"]].tolist() == [1, 1] and edge.loc[5, "n_lines"] == 3


def test_no_documents_and_a_missing_text():
    empty = document_statistics(pd.DataFrame({"id": pd.Series([], dtype="string"), "text": []}))
    assert len(empty) == 0 and list(empty.columns) == ["id", "source", "n_chars", "n_words", "n_lines",
                                                       "non_alpha_frac"]
    with pytest.raises(ValueError, match="^document_statistics: 1 documents have no text"):
        document_statistics(pd.DataFrame({"id": ["a", "b"], "text": ["x", None]}))
