"""Character classes counted with numpy: per-code-point tables and per-span counts.

The document statistics (``curation.data.stats``) and the RedPajama line signals
(``curation.scoring.redpajama``) count characters of a class (white space, letters, capitals,
numerals) in many spans of text (documents, lines). A table of the class over every code point,
built once per process from the class's own definition (a regex or a ``str`` predicate), turns
each count into a lookup and a search, with no Python call per character or per span.
"""

from __future__ import annotations

import re
from typing import Callable

import numpy as np

CODE_POINTS = 0x110000
_TABLES: dict[object, np.ndarray] = {}


def code_points(text: str) -> np.ndarray:
    """The text's code points (uint32). UTF-32 holds one unit per code point, a lone surrogate
    included, so array offsets are ``str`` offsets."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def char_table(test: re.Pattern | Callable[[str], bool]) -> np.ndarray:
    """bool (0x110000,): which code points are in the class. ``test`` is a compiled one-character
    regex (where it matches in one string of every code point) or a predicate on a one-character
    string (e.g. ``str.isupper``). Built once per process (~0.1-0.2 s), then shared."""
    key = (test.pattern, test.flags) if isinstance(test, re.Pattern) else test
    table = _TABLES.get(key)
    if table is None:
        if isinstance(test, re.Pattern):
            table = np.zeros(CODE_POINTS, bool)
            table[[m.start() for m in test.finditer("".join(map(chr, range(CODE_POINTS))))]] = True
        else:
            table = np.fromiter(map(test, map(chr, range(CODE_POINTS))), bool, CODE_POINTS)
        _TABLES[key] = table
    return table


def span_counts(flags: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """How many of ``flags`` are set in each span [start, end) (int64): a search in the sorted set
    positions (a cumulative sum of the flags as int64 costs ~10x more on long texts)."""
    positions = np.flatnonzero(flags)
    return np.searchsorted(positions, ends) - np.searchsorted(positions, starts)
