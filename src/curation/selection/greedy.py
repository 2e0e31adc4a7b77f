"""Classical greedy maximisation of the joint objective (DiSF Algorithm 1, seeds/001).

The block is cut into contiguous batches of b items (DiSF Algorithm 1; b = 1024
for ``disf`` by default, the whole block otherwise), each with its share of the
budget (largest-remainder split, so the total is exact -- DiSF floors b*S/|D|
and can miss it). In each batch the first pick is random (DiSF Algorithm 1) or
the best singleton, then each step adds the candidate x maximising
f(U_i + {x}) where U_i is the batch's own selection and f the joint objective
(Eq. 12) with the weights of the batch's final size.

Implementations (``GreedyConfig.impl``):

- ``reference`` re-evaluates f from scratch for every candidate set
  U_i + {x} via the batched ``Objective``;
- ``official`` (``disf``, lam = 0 only): the official DiSF code
  (``MediaBrain-SJTU/DiSF``, ``DISF/select_disf.py``, ``hunger_select`` and
  ``cal_corre``) step for step, as the honest time anchor: for every candidate
  the candidate set is re-standardised (mean, unbiased variance, eps = 1e-8),
  its d x d correlation matrix formed, and the sum of its squared off-diagonal
  entries compared (strict <, so ties go to the lowest position), float32;
- ``fast`` picks the same items as ``official`` / ``reference`` on the same
  seed. PWS keeps s = sum of unit vectors and s.u_x; facility location keeps
  the coverage per reference point; the Eq. 4 sum form is modular;
  ``disf_block`` keeps g_x = z_x^T C z_x (rank-1, lazy heap at lam = 0). For
  ``disf`` (per-set standardisation) the mean and variance of U + {x} follow
  from U's in O(d) per candidate, and ||C||_F = ||Z Z^T||_F / (n - 1) comes
  from the n x n Gram of the standardised set, whose entries for *all*
  candidates are one ((|U|-1)|U|/2 + 2, d) @ (d, b) product per pick (see
  ``_disf_terms``; ``_DisfScreen`` keeps U's Helmert and pair rows across
  picks), screened in float32 with the near-best candidates re-scored in
  float64 (``_fast_disf``), so the picks are the float64 argmin. The pair rows
  grow as |U|^2 / 2, so past |U| (|U| + 1) / 2 ~ 2 d (``_moments_from``) the
  candidates are scored from U's d x d moments instead (``_DisfMoments``: two
  (b, d) @ (d, d) products per pick, whatever |U|), with the same screen and
  re-score.

This module is the driver (``select_greedy``: batches and their budgets) and the fast per-set
DiSF pick (``_fast_disf``: float32 screen, float64 re-score, the crossover ``_moments_from``). A
batch's state and the other pickers are :mod:`curation.selection.greedy_batch`; the closed forms
of the DiSF criterion (``_disf_terms``, ``_DisfScreen``, ``_DisfMoments``) are
:mod:`curation.selection.greedy_disf`. The names tests and benchmarks use are re-exported here.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Callable, Optional

import numpy as np
import pandas as pd
import torch

from curation.selection.budget import allocate_budget
from curation.selection.config import GreedyConfig
from curation.selection.greedy_batch import (  # used here, and re-exported for tests
    _Batch,
    _fast_disf_block,
    _fast_fl,
    _fast_fl_sum,
    _fast_pws,
    _first,
    _official_disf,
    _reference,
)
from curation.selection.greedy_disf import (  # used here, and re-exported for tests
    _disf_terms,
    _DisfMoments,
    _DisfScreen,
    _small_variance,
    disf_offdiag_all,
)
from curation.selection.objectives import Objective, derive_seed

log = logging.getLogger(__name__)

Progress = Optional[Callable[[int, int], None]]

# Relative error bound of the float32 screen of ``_fast_disf`` on ||C||_F^2: candidates
# that could beat the best within it are re-scored in float64. The measured max
# |fro2_32 / fro2_64 - 1| on real MiniLM batches (d = 384 and 768, b = 1024, 15 picks
# from 4 first picks in each of 3 batches) is 1.8e-6, so this keeps a 50x margin;
# best and second-best candidates were as close as 6.9e-7 (relative) there, which is
# why float32 alone would not reproduce the float64 / official picks.
_SCREEN_REL = 1e-4


# Crossover of ``_fast_disf``'s two closed forms: a pick with |U| = m costs ~(m (m + 1) / 2) d b
# multiply-adds in the pair rows of ``_DisfScreen`` and ~2 d^2 b in the moments of ``_DisfMoments``,
# so the pair rows are used while m (m + 1) / 2 < _PAIRS_PER_DIM * d. Measured per-pick screen times
# (b = 1024, real MiniLM / static rows, one thread, load ~1.4) cross at m ~ 32 for d = 256,
# ~38 for d = 384 and ~55 for d = 768, i.e. at m (m + 1) / 2 ~ 2 d.
_PAIRS_PER_DIM = 2.0


def _moments_from(d: int) -> int:
    """Smallest |U| scored with the d x d moments rather than the pair rows."""
    # the smallest m with m (m + 1) / 2 >= _PAIRS_PER_DIM * d
    return max(1, math.ceil((math.sqrt(1.0 + 8.0 * _PAIRS_PER_DIM * d) - 1.0) / 2.0))


def _fast_disf(batch: _Batch, first: Optional[int]) -> None:
    """Same picks as ``_official_disf`` (lam = 0) / ``reference`` (lam > 0) via ``_DisfScreen`` / ``_DisfMoments``.

    Every candidate is scored in float32 (batched products per pick); every
    candidate whose score could still be the best within the float32 error bound
    is re-scored in float64 and the best of those is taken (ties to the lowest
    position), so the pick is the float64 argmax. lam = 0 ranks by the official
    criterion (the off-diagonal sum fro2 - diag2); lam > 0 by Eq. 12 with the
    ``disf`` term -||C||_F = -sqrt(fro2). The closed form is the cheaper one for
    the current |U| (``_moments_from``): the pair rows while |U| is small, the
    d x d moments (per-pick cost independent of |U|) past that.
    """
    x = batch.obj.embeddings[batch.pool]
    switch = _moments_from(x.shape[1])
    screen = _DisfScreen(x, min(batch.budget, switch)) if switch > 1 else None
    moments = _DisfMoments(x) if batch.budget > switch else None
    j = _first(batch, first)
    batch.take(j)
    for form in (screen, moments):
        if form is not None:
            form.add(j)
    for k in range(1, batch.budget):
        form = screen if k < switch else moments
        fro2, diag2 = form.scores()
        if batch.w_q == 0:
            score = diag2 - fro2
            err = _SCREEN_REL * (fro2 + diag2) + form.diag2_slack
        else:
            root = fro2.clamp_min(0.0).sqrt_()
            score = batch.quality_part(k) - batch.w_d * root
            err = batch.w_d * _SCREEN_REL * root
        score.masked_fill_(batch.taken, float("-inf"))
        floor = torch.max(score - err)  # the best candidate's value is at least this
        near = torch.nonzero(score + err >= floor).squeeze(1)  # ascending positions
        batch.evaluations += batch.c - k
        if len(near) == 1:
            j = int(near[0])
        else:
            batch.rescored += len(near)
            fro2, diag2 = form.exact(near)
            if batch.w_q == 0:
                exact = diag2 - fro2
            else:
                exact = batch.quality_part(k)[near] - batch.w_d * torch.sqrt(fro2)
            j = int(near[int(torch.argmax(exact))])
        batch.take(j)
        if screen is not None and k + 1 < min(batch.budget, switch):
            screen.add(j)
        if moments is not None and k + 1 < batch.budget:
            moments.add(j)


_FAST = {
    "pws": _fast_pws,
    "fl": _fast_fl,
    "fl_sum": _fast_fl_sum,
    "disf": _fast_disf,
    "disf_block": _fast_disf_block,
}


def greedy_batch_size(n: int, cfg: GreedyConfig) -> int:
    """b of DiSF Algorithm 1: ``cfg.batch_size``, else 1024 for disf and all ``n`` candidates otherwise."""
    return cfg.batch_size or (1024 if cfg.diversity == "disf" else n)


def plan_greedy(n: int, budget: int, cfg: GreedyConfig, seed: int = 0) -> list[tuple[int, int, int, Optional[int]]]:
    """DiSF Algorithm 1's batches over ``n`` candidates in order: (start, size, budget, first pick) each.

    Contiguous batches of b items (:func:`greedy_batch_size`), the budget split
    by largest remainder; the random first picks are drawn here, in batch order, one per batch that picks some
    but not all of its items, so a batch run alone (:func:`pick_batch`, e.g. streamed from shards) picks what
    it picks inside :func:`select_greedy`.
    """
    b = greedy_batch_size(n, cfg)
    starts = list(range(0, n, b))
    sizes = [min(b, n - s) for s in starts]
    budgets = allocate_budget(budget, sizes)
    rng = np.random.default_rng(derive_seed(seed, 20))
    plan = []
    for start, size, s_i in zip(starts, sizes, budgets):
        first = None
        if 0 < s_i < size and cfg.first_pick == "random":
            first = int(rng.integers(size))
        plan.append((start, size, int(s_i), first))
    return plan


def pick_batch(objective: Objective, pool: np.ndarray, budget: int, first: Optional[int],
               cfg: GreedyConfig) -> tuple[np.ndarray, int]:
    """The greedy picks of one batch (``pool``: its candidates' rows in ``objective``), in pick order, and the
    candidate-set evaluations they took."""
    if budget >= len(pool):
        return pool, 0
    if budget == 0:
        return pool[:0], 0
    batch = _Batch(objective, pool, budget)
    impl = {"reference": _reference, "official": _official_disf}.get(cfg.impl, _FAST[cfg.diversity])
    impl(batch, first)
    return pool[np.asarray(batch.picks, dtype=np.int64)], batch.evaluations


def select_greedy(
    objective: Objective,
    budget: int,
    cfg: GreedyConfig,
    *,
    seed: int = 0,
    progress: Progress = None,
) -> tuple[np.ndarray, pd.DataFrame, dict]:
    """Greedy over contiguous batches (DiSF Algorithm 1); returns (ids, history, info)."""
    plan = plan_greedy(objective.n, budget, cfg, seed)
    picked, rows, evaluations = [], [], 0
    t0 = time.perf_counter()
    for i, (start, size, s_i, first) in enumerate(plan):
        pool = np.arange(start, start + size, dtype=np.int64)
        ids, batch_evaluations = pick_batch(objective, pool, s_i, first, cfg)
        if len(ids):
            picked.append(ids)
        if not 0 < s_i < size:
            continue
        evaluations += batch_evaluations
        rows.append(
            {
                "batch": i,
                "candidates": size,
                "budget": s_i,
                "evaluations": batch_evaluations,
                "wall_time_s": time.perf_counter() - t0,
            }
        )
        log.debug("greedy batch %d: %d of %d picked, %d evaluations", i, s_i, size, batch_evaluations)
        if progress is not None:
            progress(i + 1, len(plan))
    indices = np.sort(np.concatenate(picked)) if picked else np.zeros(0, dtype=np.int64)
    info = {"batch_size": greedy_batch_size(objective.n, cfg), "n_batches": len(plan), "evaluations": evaluations, "impl": cfg.impl}
    return indices, pd.DataFrame(rows), info
