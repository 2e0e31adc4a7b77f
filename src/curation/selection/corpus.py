"""Budgets and corpus picking: the one place that turns scores into the documents a model trains on.

- :func:`resolve_budget` / :func:`candidate_pool`: how many documents, from which candidates
  (the ``budget`` config group);
- :func:`run_selection`: the selection pipeline's pick (``selection.method`` on the pruned corpus);
- :func:`select_corpus` / :func:`corpus_documents`: a named corpus recipe (Table 2, verification);
- :func:`top_fraction`: the top share of documents by a score (Meta-rater, seeds/004 Alg. 1 step 3).

Named pre-training corpora: which documents a comparison run trains on.

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

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

import numpy as np
import pandas as pd

from curation.cache import array_digest, config_key, frame_fingerprint, result_cache
from curation.selection.api import select
from curation.selection.baselines import select_topk_quality

log = logging.getLogger(__name__)

POOLS = ("raw", "pruned")
SELECTION = "selection"  # method name: the namespace's existing selection


# --- budgets ---


def resolve_budget(budget: Mapping[str, Any], n_corpus: int, n_candidates: int, n_pool: int | None = None) -> int:
    """Documents to select: ``budget.docs``, else ``keep_ratio`` x the ingested corpus size.

    The ratio refers to the corpus before pruning, as in DATAMASK (FineWeb-Mask
    keeps ~10% of FineWeb after dropping its low-quality 40-50%), unless
    ``ratio_of: candidates``. ``n_pool`` is the size of the candidate subsample
    (``budget.candidates``); with ``ratio_of: corpus`` the budget shrinks by
    ``n_pool / n_candidates`` so the corpus keep ratio is unchanged.
    """
    n_pool = n_candidates if n_pool is None else n_pool
    ratio_of = budget.get("ratio_of", "corpus")
    if ratio_of not in ("corpus", "candidates"):
        raise ValueError(f"budget.ratio_of must be 'corpus' or 'candidates', got {ratio_of!r}")
    if budget.get("docs") is not None:
        wanted = int(budget["docs"])
    else:
        ratio = float(budget["keep_ratio"])
        if not 0 < ratio < 1:
            raise ValueError(f"budget.keep_ratio must be in (0, 1), got {ratio}")
        base = n_pool if ratio_of == "candidates" else n_corpus * n_pool / n_candidates
        wanted = int(round(ratio * base))
    if not 0 < wanted < n_pool:
        raise ValueError(f"budget of {wanted} documents must be in (0, {n_pool}) — the pruned corpus "
                         "(or its budget.candidates subsample) has that many; lower budget.keep_ratio/budget.docs "
                         "or prune less")
    return wanted


def candidate_pool(n_candidates: int, budget: Mapping[str, Any], seed: int) -> np.ndarray:
    """Positions of the candidates the selection sees: all, or a seeded random ``budget.candidates`` subset."""
    wanted = budget.get("candidates")
    if wanted is None or int(wanted) >= n_candidates:
        return np.arange(n_candidates)
    if int(wanted) < 2:
        raise ValueError(f"budget.candidates must be >= 2 (or null), got {wanted}")
    rng = np.random.default_rng([int(seed), 7919])
    return np.sort(rng.choice(n_candidates, size=int(wanted), replace=False))


def top_fraction(score: np.ndarray, keep_frac: float) -> np.ndarray:
    """Indices of the top ``keep_frac`` documents by ``score``, sorted (Meta-rater seeds/004 Alg. 1 step 3).

    Ties are broken by document order (stable), so the selection is reproducible.
    """
    if not 0 < keep_frac <= 1:
        raise ValueError(f"metarater.keep_frac must be in (0, 1], got {keep_frac}")
    return select_topk_quality(score, max(1, int(round(len(score) * keep_frac))))


# --- the selection pipeline's pick ---


@dataclass
class SelectionRun:
    """The result of :func:`run_selection`: chosen ids (with quality), the documents, history, metrics."""

    selected_ids: pd.DataFrame
    selected_documents: pd.DataFrame
    history: pd.DataFrame
    metrics: dict[str, float]


def run_selection(pruned_scores: pd.DataFrame, pruned_embeddings: np.ndarray, documents: pd.DataFrame,
                  selection: Mapping[str, Any], budget: Mapping[str, Any], seed: int,
                  progress: Optional[Callable[[int, int], None]] = None) -> SelectionRun:
    """Run ``selection.method`` (:func:`curation.selection.select`) on the candidate pool of the pruned
    corpus for the resolved budget; documents keep ``documents`` order."""
    method = selection["method"]
    pool = candidate_pool(len(pruned_scores), budget, seed)
    quality = pruned_scores["quality"].to_numpy(dtype="float64")[pool]
    embeddings = np.array(pruned_embeddings[pool], dtype="float32")  # a writable copy of the memory map
    n_select = resolve_budget(budget, len(documents), len(pruned_scores), len(pool))
    config = {k: v for k, v in selection.items() if k != "method"}
    started = time.perf_counter()
    result = select(method, quality=quality, embeddings=embeddings, budget=n_select, config=config,
                    seed=seed, progress=progress)
    seconds = time.perf_counter() - started
    ids = pruned_scores["id"].iloc[pool[result.indices]].reset_index(drop=True)
    selected_ids = pd.DataFrame({"id": ids, "quality": quality[result.indices]})
    selected_documents = documents[documents["id"].isin(set(ids))].reset_index(drop=True)
    history = result.history.copy()
    if not history.empty and "step" in history and "block" in history and history["block"].nunique() > 1:
        # MLflow wants one increasing step per series: number steps across blocks.
        history["step"] = np.arange(len(history))
    metrics = {"budget_docs": float(n_select), "candidates": float(len(quality)), "corpus_docs": float(len(documents)),
               "pruned_candidates": float(len(pruned_scores)), "selection_seconds": seconds}
    metrics.update({f"info_{k}": float(v) for k, v in result.info.items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)})
    log.info("selected %d of %d candidates with %s in %.1fs", n_select, len(quality), method, seconds)
    return SelectionRun(selected_ids, selected_documents, history, metrics)


# --- named corpus recipes ---


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


def corpus_documents(
    documents: pd.DataFrame,
    scores: pd.DataFrame,
    embeddings: np.ndarray,
    pruned_scores: pd.DataFrame,
    pruned_embeddings: np.ndarray,
    corpus: CorpusSpec,
    budget: Mapping[str, Any],
    seed: int,
    cache: Mapping[str, Any],
) -> tuple[pd.DataFrame, dict[str, float]]:
    """The documents of one named corpus (:func:`select_corpus` for the resolved budget, cached by content),
    in ``documents`` order, with ``corpus_docs``, ``corpus_chars``, ``corpus_score_mean`` and
    ``corpus_cache_hit``."""
    n_select = resolve_budget(budget, len(documents), len(scores) if corpus.pool == "raw" else len(pruned_scores))
    table = scores if corpus.pool == "raw" else pruned_scores
    key = config_key("corpus-v1", dataclasses.asdict(corpus), n_select, seed,
                     frame_fingerprint(table, ["id", corpus.score] if corpus.score in table else ["id"]),
                     array_digest(embeddings if corpus.pool == "raw" else pruned_embeddings))
    store = result_cache(cache)
    info: dict[str, Any] = {}

    def compute() -> pd.DataFrame:
        ids, more = select_corpus(corpus, scores=scores, embeddings=embeddings, pruned_scores=pruned_scores,
                                  pruned_embeddings=pruned_embeddings, n_select=n_select, seed=seed)
        info.update(more)
        return pd.DataFrame({"id": ids})

    ids = store.frame("corpus", key, compute)["id"]
    chosen = documents[documents["id"].isin(set(ids))].reset_index(drop=True)
    metrics = {"corpus_docs": float(len(chosen)), "corpus_chars": float(chosen["text"].str.len().sum()),
               "corpus_pool": float(len(table)), "corpus_cache_hit": float(store.hits)}
    if corpus.score in table:
        metrics["corpus_score_mean"] = float(table.loc[table["id"].isin(set(ids)), corpus.score].mean())
    if "selection_seconds" in info:  # computed now, not loaded
        metrics["corpus_selection_seconds"] = float(info["selection_seconds"])
    return chosen, metrics
