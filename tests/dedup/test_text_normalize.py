"""The exact-duplicate key's normalisation: its fast form equals the regex definition."""

from __future__ import annotations

import re
import sys
import unicodedata

import pandas as pd

from curation.dedup.text import normalize
from tests.conftest import CORPUS_SHARDS


def test_str_split_cuts_at_exactly_the_characters_regex_whitespace_matches():
    chars = "".join(map(chr, range(sys.maxunicode + 1)))
    spaces = {c for c in chars if c.isspace()}
    assert set(re.findall(r"\s", chars)) == spaces
    assert "".join(chars.split()) == "".join(c for c in chars if c not in spaces)


def test_normalize_equals_its_regex_definition_on_the_corpus_and_edge_texts():
    def by_regex(text: str) -> str:
        return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text).casefold()).strip()

    texts = pd.read_parquet(CORPUS_SHARDS[1], columns=["text"])["text"].head(2000).tolist()
    texts += ["", " \t\n ", "A\u00a0B\u2003C\u3000D\u2028E\x1cF\x85G", "ﬁ Ｆｕｌｌ ẞ İ", "  lead and trail  "]
    assert [normalize(t) for t in texts] == [by_regex(t) for t in texts]
