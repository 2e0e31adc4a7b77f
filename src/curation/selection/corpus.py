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

==============  ==================  ======  ==============  =============================
name            method              pool    score           paper analogue
==============  ==================  ======  ==============  =============================
raw             random              raw     (unused)        FineWeb (the unfiltered source)
semdedup        semdedup            raw     quality         FineWeb-Semdedup
edu             topk_quality        raw     edu             FineWeb-Edu (Edu classifier)
dclm            topk_quality        raw     fasttext_dclm   FineWeb-DCLM (DCLM fastText)
datamask        datamask            pruned  quality         FineWeb-Mask's method, the project's default knobs
datamask_paper  datamask            pruned  quality         FineWeb-Mask (Sec. 4.4 recipe: DATAMASK_PAPER)
selection       selection           -       -               this run's ``selected_documents``
==============  ==================  ======  ==============  =============================

``pool: raw`` draws from every ingested document (``scores``/``embeddings``),
``pool: pruned`` from the quality-pruned corpus (DATAMASK Sec. 4.3 prunes
before its joint selection; the baselines select from the raw source).
Every corpus keeps the same budget (the ``budget`` group: documents, or with ``budget.tokens`` /
``budget.token_ratio`` the same reference tokens within 1%, :mod:`curation.selection.tokens`), and
the trainers spend the same number of tokens on each, as Table 2 does.

This module holds the named recipes (:class:`CorpusSpec`, :func:`select_corpus`,
:func:`corpus_documents`); the budgets are :mod:`curation.selection.corpus_budget`, the selection
pipeline's pick :mod:`curation.selection.corpus_pick` (in memory) and
:mod:`curation.selection.corpus_pick_shards` (on shards). Their public names are re-exported here.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

import numpy as np
import pandas as pd

from curation.cache import array_digest, config_key, frame_fingerprint, result_cache
from curation.selection.corpus_budget import (  # re-exported
    BudgetError,
    TokenBudget,
    candidate_pool,
    document_tokens,
    resolve_budget,
    resolve_token_budget,
    top_fraction,
)
from curation.selection.corpus_pick import SelectionRun, check_score_column, run_selection  # re-exported
from curation.selection.corpus_pick_shards import (  # re-exported
    SELECTION_VERSION,
    ShardSelectionRun,
    run_selection_shards,
    selection_key,
)

log = logging.getLogger(__name__)

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
        if self.method != SELECTION:  # fail when the config is read, not after an hour of other cells
            from curation.selection.config import parse_selection_config

            try:
                parse_selection_config(self.method, self.config)
            except (ValueError, TypeError, KeyError) as err:
                raise ValueError(f"config key '{key}': {err}") from None
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
    tokens: Optional[TokenBudget] = None,
    progress: Optional[Callable[[int, int], None]] = None,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Ids of the ``n_select`` documents of corpus ``spec`` (or, with ``tokens``, of the documents holding
    ``tokens.budget`` tokens within 1%: :func:`curation.selection.tokens.select_tokens`) and the
    selection's info.

    ``progress``: the method's step callback; by default a console bar with the objective and a log line
    every 5% of the steps (:class:`~curation.selection.progress.StepBar`): decide's picks of the paper's
    10,000-step DataMask ran 9-14 minutes each with no sign of life.

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
    bar = None
    if progress is None:
        from curation.selection.progress import StepBar

        progress = bar = StepBar(f"pick {spec.method} ({spec.pool} pool)", logger=log)
    try:
        if tokens is None:
            from curation.selection.api import select  # torch: imported when a pick runs
            result = select(spec.method, quality=quality, embeddings=np.asarray(emb, dtype="float32"),
                            budget=n_select, config=spec.config, seed=seed, progress=progress)
        else:
            from curation.selection.tokens import select_tokens

            ids_all = table["id"].astype(str)
            result = select_tokens(spec.method, quality=quality, embeddings=np.asarray(emb, dtype="float32"),
                                   n_tokens=tokens.n_tokens.reindex(ids_all).to_numpy(),
                                   budget_tokens=tokens.budget, config=spec.config, seed=seed, progress=progress,
                                   groups=None if tokens.groups is None else tokens.groups.reindex(ids_all).to_numpy(),
                                   proportions=tokens.proportions)
    finally:
        if bar is not None:
            bar.close()
    ids = table["id"].to_numpy()[result.indices]
    info = {"n_pool": len(table), "score_mean": float(quality[result.indices].mean()),
            "selection_seconds": float(result.info["wall_time_s"])}
    info.update({k: float(result.info[k]) for k in ("token_solve_runs", "token_trimmed_docs", "token_error")
                 if k in result.info})
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
    """The documents of one named corpus (:func:`select_corpus` for the resolved budget, documents or tokens,
    cached by content), in ``documents`` order with an ``n_tokens`` column, and ``corpus_docs``,
    ``corpus_chars``, ``corpus_tokens``, ``corpus_score_mean`` and ``corpus_cache_hit`` (with a token budget
    also ``budget_tokens`` and ``corpus_token_error``)."""
    tokens = resolve_token_budget(documents, budget, cache)
    table = scores if corpus.pool == "raw" else pruned_scores
    if tokens is None:
        n_select = resolve_budget(budget, len(documents), len(table))
        key = config_key("corpus-v1", dataclasses.asdict(corpus), n_select, seed,
                         frame_fingerprint(table, ["id", corpus.score] if corpus.score in table else ["id"]),
                         array_digest(embeddings if corpus.pool == "raw" else pruned_embeddings))
    else:
        n_select = 0
        key = config_key("corpus-tokens-v1", dataclasses.asdict(corpus), tokens.key(), seed,
                         frame_fingerprint(table, ["id", corpus.score] if corpus.score in table else ["id"]),
                         array_digest(embeddings if corpus.pool == "raw" else pruned_embeddings))
    store = result_cache(cache)
    info: dict[str, Any] = {}

    def compute() -> pd.DataFrame:
        ids, more = select_corpus(corpus, scores=scores, embeddings=embeddings, pruned_scores=pruned_scores,
                                  pruned_embeddings=pruned_embeddings, n_select=n_select, seed=seed, tokens=tokens)
        info.update(more)
        return pd.DataFrame({"id": ids})

    ids = store.frame("corpus", key, compute)["id"]
    chosen = documents[documents["id"].isin(set(ids))].reset_index(drop=True)
    # a document budget counts only the chosen documents, through the same cached count
    n_tokens = tokens.n_tokens if tokens is not None else document_tokens(chosen, cache)
    chosen["n_tokens"] = n_tokens.reindex(chosen["id"].astype(str)).to_numpy()
    metrics = {"corpus_docs": float(len(chosen)), "corpus_chars": float(chosen["text"].str.len().sum()),
               "corpus_tokens": float(chosen["n_tokens"].sum()),
               "corpus_pool": float(len(table)), "corpus_cache_hit": float(store.hits)}
    if tokens is not None:
        metrics["budget_tokens"] = float(tokens.budget)
        metrics["corpus_token_error"] = metrics["corpus_tokens"] / tokens.budget - 1.0
    if corpus.score in table:
        metrics["corpus_score_mean"] = float(table.loc[table["id"].isin(set(ids)), corpus.score].mean())
    if "selection_seconds" in info:  # computed now, not loaded
        metrics["corpus_selection_seconds"] = float(info["selection_seconds"])
    return chosen, metrics
