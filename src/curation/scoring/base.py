"""The common shape of a rater: ``fit``, ``score``, ``save``/``load`` and bad-input counts.

Scoring is apart from selection (dolma taggers): a rater only computes a
number per document; thresholds are applied later (pruning, selection).

Bad input is never dropped silently. A document whose text is empty after
the rater's own normalisation gets ``NaN`` (it keeps its row), and
``score_counted`` returns how many there were, in the datatrove style of
``total`` / ``scored`` / ``<reason>`` counts.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


class Rater:
    """Base class; subclasses set ``name`` and implement ``_normalise`` and ``score``."""

    name: str = "rater"

    def _normalise(self, text: str) -> str:
        """The text as this rater sees it; ``""`` means there is nothing to score."""
        return text.strip() if isinstance(text, str) else ""

    def empty_mask(self, texts: Sequence[str]) -> np.ndarray:
        """True where a text is empty after this rater's normalisation (or not a string)."""
        return np.fromiter((not self._normalise(t) for t in texts), dtype=bool, count=len(texts))

    def score(self, texts: Sequence[str]) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError

    def score_counted(self, texts: Sequence[str]) -> tuple[np.ndarray, dict[str, int]]:
        """``score(texts)`` plus counts: total, scored, empty_text, nan_score.

        ``empty_text`` rows are NaN by construction; ``nan_score`` counts every
        NaN in the output (so it includes them, plus any the model produced).
        """
        scores = self.score(texts)
        nan = ~np.isfinite(scores)
        counts = {
            "total": len(texts),
            "scored": int((~nan).sum()),
            "empty_text": int(self.empty_mask(texts).sum()),
            "nan_score": int(nan.sum()),
        }
        return scores, counts


def ensure_texts(texts: Sequence[str]) -> list[str]:
    """Texts as a list of str; None/NaN become "" (then counted as empty, not dropped)."""
    return [t if isinstance(t, str) else "" for t in texts]
