"""Budgets: how many documents (or tokens) a corpus keeps, and from which candidates.

A document budget is ``budget.docs`` or ``keep_ratio`` x the ingested corpus (DATAMASK Sec. 4.3-4.4:
FineWeb-Mask keeps ~10% of FineWeb after pruning, so the ratio refers to the corpus before pruning)
(``resolve_budget``), drawn from all pruned candidates or a seeded ``budget.candidates`` subsample
(``candidate_pool``). A token budget (``budget.tokens`` / ``budget.token_ratio``, optional domain
proportions) counts the ingested documents' reference tokens (``resolve_token_budget``,
``document_tokens``), as DATAMASK Table 2 trains every corpus on the same tokens. ``top_fraction``
is the top share by a score (Meta-rater, seeds/004 Alg. 1 step 3). Read by
:mod:`curation.selection.corpus` and the selection pipeline's pick.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

import numpy as np
import pandas as pd

from curation.cache import array_digest, config_key, frame_fingerprint, result_cache
from curation.errors import UserError
from curation.selection.baselines import select_topk_quality


class BudgetError(UserError, ValueError):
    """The budget cannot be met by the candidates: none at all (pruning removed every document), or fewer than
    the budget asks for."""


def resolve_budget(budget: Mapping[str, Any], n_corpus: int, n_candidates: int, n_pool: int | None = None) -> int:
    """Documents to select: ``budget.docs``, else ``keep_ratio`` x the ingested corpus size.

    The ratio refers to the corpus before pruning, as in DATAMASK (FineWeb-Mask
    keeps ~10% of FineWeb after dropping its low-quality 40-50%), unless
    ``ratio_of: candidates``. ``n_pool`` is the size of the candidate subsample
    (``budget.candidates``); with ``ratio_of: corpus`` the budget shrinks by
    ``n_pool / n_candidates`` so the corpus keep ratio is unchanged.
    """
    n_pool = n_candidates if n_pool is None else n_pool
    if n_candidates == 0 or n_pool == 0:  # n_corpus * n_pool / n_candidates would divide by zero
        raise BudgetError(f"no candidate to select from: the pruned corpus is empty (0 of {n_corpus:,} ingested "
                          f"documents kept by pruning). Fix: prune less (a lower pruning.threshold, or "
                          f"pruning.mode=bottom_pct), then run `curate pipeline=pruning+selection`.")
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
        raise BudgetError(f"budget of {wanted} documents must be in (0, {n_pool}) — the pruned corpus "
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


@dataclass
class TokenBudget:
    """A token budget on the ingested documents: ``budget`` tokens, each document's ``n_tokens`` (indexed
    by id), and optional fixed domain proportions (``groups``: id -> domain; ``proportions``)."""

    budget: int
    n_tokens: pd.Series
    groups: Optional[pd.Series] = None
    proportions: Optional[dict[str, float]] = None

    def key(self) -> list[Any]:
        """What a cached pick depends on besides the pool and the recipe."""
        return [self.budget, array_digest(self.n_tokens.to_numpy()),
                None if self.groups is None else frame_fingerprint(self.groups.to_frame("g").reset_index(), ["g"]),
                self.proportions]


def document_tokens(documents: pd.DataFrame, cache: Mapping[str, Any]) -> pd.Series:
    """``n_tokens`` of every ingested document (reference tokenizer, :mod:`curation.data.tokens`), indexed
    by id; cached by the documents' ids and texts."""
    from curation.data.tokens import count_tokens

    key = config_key("ntokens-v1", frame_fingerprint(documents, ["id", "text"]))
    frame = result_cache(cache).frame("ntokens", key, lambda: pd.DataFrame(
        {"id": documents["id"].astype(str).to_numpy(), "n_tokens": count_tokens(documents["text"].tolist())}))
    return frame.set_index("id")["n_tokens"]


def resolve_token_budget(documents: pd.DataFrame, budget: Mapping[str, Any],
                         cache: Mapping[str, Any]) -> Optional[TokenBudget]:
    """The :class:`TokenBudget` of ``budget`` (``tokens`` or ``token_ratio`` of the ingested documents'
    tokens; ``domain_column`` / ``domain_proportions``), or None for a document budget."""
    from curation.selection.tokens import check_token_budget, token_budget

    if budget.get("tokens") is None and budget.get("token_ratio") is None:
        return None
    n_tokens = document_tokens(documents, cache)
    wanted = token_budget(budget, float(n_tokens.sum()))
    check_token_budget(float(wanted), n_tokens.to_numpy(), budget, "the ingested corpus")
    groups = None
    column = budget.get("domain_column")
    if column is not None:
        if column not in documents.columns:
            raise KeyError(f"budget.domain_column={column!r}: the documents have no such column (have "
                           f"{[c for c in documents.columns if c != 'text']}); set it to null for one domain")
        groups = pd.Series(documents[column].astype("string").fillna("unknown").to_numpy(),
                           index=documents["id"].astype(str))
    proportions = budget.get("domain_proportions")
    return TokenBudget(int(wanted), n_tokens, groups, dict(proportions) if proportions is not None else None)
