"""Named pre-training corpora: which documents a comparison run trains on.

DATAMASK Table 2 (seeds/000 Sec. 4.1, 4.4) and Ultra-FineWeb's verification
(seeds/002 Sec. 2.2, Table 8) compare corpora cut from one source by different
recipes. A :class:`CorpusSpec` names one recipe on our corpus:

==========  ==================  ======  ==============  =============================
name        method              pool    score           paper analogue
==========  ==================  ======  ==============  =============================
raw         random              raw     (unused)        FineWeb (the unfiltered source)
semdedup    semdedup            raw     quality         FineWeb-Semdedup
edu         topk_quality        raw     edu             FineWeb-Edu (Edu classifier)
dclm        topk_quality        raw     fasttext_dclm   FineWeb-DCLM (DCLM fastText)
datamask    datamask            pruned  quality         FineWeb-Mask (joint selection)
selection   selection           -       -               this run's ``selected_documents``
==========  ==================  ======  ==============  =============================

``pool: raw`` draws from every ingested document (``scores``/``embeddings``),
``pool: pruned`` from the quality-pruned corpus (DATAMASK Sec. 4.3 prunes
before its joint selection; the baselines select from the raw source).
Every corpus keeps the same number of documents (the ``budget`` group), and
the trainers spend the same number of tokens on each, as Table 2 does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from curation.selection import select

POOLS = ("raw", "pruned")
SELECTION = "selection"  # method name: the namespace's existing selection


@dataclass
class CorpusSpec:
    method: str = "random"  # a curation.selection method, or "selection" (the run's selected_documents)
    pool: str = "raw"  # raw: every ingested document | pruned: the quality-pruned corpus
    score: str = "quality"  # column of the scores table the method reads as quality
    config: dict[str, Any] = field(default_factory=dict)  # overrides of conf/selection/<method>.yaml defaults

    def validate(self, key: str) -> "CorpusSpec":
        """``key``: where the spec sits in the config (``table2.corpora.edu``), for the error message."""
        if self.pool not in POOLS:
            raise ValueError(f"config key '{key}.pool': must be one of {POOLS}, got {self.pool!r}")
        return self


def select_corpus(
    spec: CorpusSpec,
    *,
    scores: pd.DataFrame,
    embeddings: np.ndarray,
    pruned_scores: pd.DataFrame,
    pruned_embeddings: np.ndarray,
    n_select: int,
    seed: int,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Ids of the ``n_select`` documents of corpus ``spec`` and the selection's info.

    scores/embeddings: one row per ingested document (aligned); pruned_*: the
    pruned corpus (aligned). Raises ``KeyError`` naming a missing score column
    and ``ValueError`` for NaN scores.
    """
    if spec.method == SELECTION:
        raise ValueError("method 'selection' reads selected_documents; it is not computed here")
    table, emb = (scores, embeddings) if spec.pool == "raw" else (pruned_scores, pruned_embeddings)
    if spec.score not in table.columns:
        raise KeyError(f"score column {spec.score!r} is not in the {spec.pool} scores; have {list(table.columns)}")
    quality = table[spec.score].to_numpy(dtype="float64")
    if np.isnan(quality).any():
        raise ValueError(f"score column {spec.score!r} has {int(np.isnan(quality).sum())} NaN values")
    result = select(spec.method, quality=quality, embeddings=np.asarray(emb, dtype="float32"), budget=n_select,
                    config=spec.config, seed=seed)
    ids = table["id"].to_numpy()[result.indices]
    info = {"n_pool": len(table), "score_mean": float(quality[result.indices].mean()),
            "selection_seconds": float(result.info["wall_time_s"])}
    return ids, info
