"""Classical greedy maximisation of the joint objective (DiSF Algorithm 1, seeds/001).

The block is cut into contiguous batches of b items (DiSF Algorithm 1; b = 1024
for ``disf`` by default, the whole block otherwise), each with its share of the
budget (largest-remainder split, so the total is exact -- DiSF floors b*S/|D|
and can miss it). In each batch the first pick is random (DiSF Algorithm 1) or
the best singleton, then each step adds the candidate x maximising
f(U_i + {x}) where U_i is the batch's own selection and f the joint objective
(Eq. 12) with the weights of the batch's final size.

Two implementations that pick identical items on the same seed:

- ``reference`` re-evaluates f from scratch for every candidate set
  U_i + {x} (for ``disf``: the Frobenius norm of the covariance of each
  candidate set, as the DiSF code does), via the batched ``Objective``;
- ``fast`` updates per-candidate sufficient statistics by rank-1 steps:
  PWS keeps s = sum of unit vectors and s.u_x; facility location keeps the
  current coverage per reference point; the Eq. 4 sum form is modular; DiSF
  keeps g_x = z_x^T C z_x with C = sum_{u in U} z_u z_u^T, since adding z
  changes ||C||_F^2 by 2 z^T C z + ||z||^4 and g_x grows by (z_x . z)^2.
  For pure DiSF (lam = 0) these costs only grow, so a lazy heap of stale
  lower bounds refreshes only the few candidates that reach the top.
"""

from __future__ import annotations

import heapq
import logging
import time
from typing import Callable, Optional

import numpy as np
import pandas as pd
import torch

from curation.selection.budget import allocate_budget
from curation.selection.config import GreedyConfig
from curation.selection.objectives import Objective, derive_seed

log = logging.getLogger(__name__)

Progress = Optional[Callable[[int, int], None]]


class _Batch:
    """One batch of candidates (global ids `pool`) and the weights of its joint objective."""

    def __init__(self, objective: Objective, pool: np.ndarray, budget: int) -> None:
        self.obj = objective
        self.pool = torch.from_numpy(pool).to(objective.embeddings.device)
        self.c = len(pool)
        self.budget = budget
        self.w_q, self.w_d, _ = objective.weights(budget)
        self.q = objective.quality[self.pool].double()  # (c,)
        self.taken = torch.zeros(self.c, dtype=torch.bool)
        self.picks: list[int] = []  # positions into pool, in pick order
        self.q_sum = 0.0
        self.evaluations = 0  # candidate-set evaluations (reference) or refreshes (lazy fast)

    def quality_part(self, k: int) -> torch.Tensor:
        """w_q * mean quality of U + {x} for every candidate, |U| = k."""
        return self.w_q * (self.q_sum + self.q) / (k + 1)

    def take(self, j: int) -> None:
        self.picks.append(j)
        self.taken[j] = True
        self.q_sum += float(self.q[j])


def _argmax_available(scores: torch.Tensor, taken: torch.Tensor) -> int:
    # first maximum among the untaken: ties go to the lower position, like the reference
    scores = scores.masked_fill(taken, float("-inf"))
    return int(torch.argmax(scores))


# --- reference: evaluate every candidate set from scratch ---


def _reference(batch: _Batch, first: Optional[int]) -> None:
    obj = batch.obj
    names = obj.needed_terms()
    for k in range(batch.budget):
        if k == 0 and first is not None:
            batch.take(first)
            continue
        cand = torch.nonzero(~batch.taken).squeeze(1)  # positions, ascending
        chosen = batch.pool[torch.tensor(batch.picks, dtype=torch.long)]
        sets = torch.cat([chosen.expand(len(cand), k), batch.pool[cand].unsqueeze(1)], 1)  # (c, k+1)
        values = obj.combine(obj.terms(sets, names), batch.budget)
        batch.evaluations += len(cand)
        batch.take(int(cand[int(torch.argmax(values))]))


# --- fast: rank-1 / incremental updates ---


def _fast_pws(batch: _Batch, first: Optional[int]) -> None:
    u = batch.obj.unit[batch.pool].double()  # (c, d)
    uu = (u * u).sum(1)
    s = torch.zeros(u.shape[1], dtype=torch.float64)
    su = torch.zeros(batch.c, dtype=torch.float64)  # s . u_x
    for k in range(batch.budget):
        if k == 0 and first is not None:
            j = first
        else:
            # -||s + u_x||^2 / (2 (k+1)^2) with ||s + u_x||^2 = ||s||^2 + 2 s.u_x + ||u_x||^2
            pws = -(float(s @ s) + 2.0 * su + uu) / (2.0 * (k + 1) ** 2)
            j = _argmax_available(batch.quality_part(k) + batch.w_d * pws, batch.taken)
        batch.take(j)
        s += u[j]
        su += u @ u[j]


def _fast_fl(batch: _Batch, first: Optional[int]) -> None:
    sims = batch.obj.unit[batch.pool].double() @ batch.obj.reference.double().T  # (c, R)
    cover = torch.full((sims.shape[1],), float("-inf"), dtype=torch.float64)  # max sim of U per reference point
    for k in range(batch.budget):
        if k == 0 and first is not None:
            j = first
        else:
            fl = torch.maximum(cover.unsqueeze(0), sims).mean(1)
            j = _argmax_available(batch.quality_part(k) + batch.w_d * fl, batch.taken)
        batch.take(j)
        cover = torch.maximum(cover, sims[j])


def _fast_fl_sum(batch: _Batch, first: Optional[int]) -> None:
    # Eq. 4 sum form = mean over U of v_x = u_x . mean_D(u) / 2: modular
    v = batch.obj.unit[batch.pool].double() @ batch.obj.unit_mean.double() / 2.0
    v_sum = 0.0
    for k in range(batch.budget):
        if k == 0 and first is not None:
            j = first
        else:
            j = _argmax_available(batch.quality_part(k) + batch.w_d * (v_sum + v) / (k + 1), batch.taken)
        batch.take(j)
        v_sum += float(v[j])


def _fast_disf(batch: _Batch, first: Optional[int]) -> None:
    z = batch.obj.standardized[batch.pool].double()  # (c, d)
    z4 = (z * z).sum(1) ** 2  # ||z_x||^4
    norm = max(batch.obj.n - 1, 1)
    if batch.w_q == 0:
        _lazy_disf(batch, first, z, z4)
        return
    g = torch.zeros(batch.c, dtype=torch.float64)  # z_x^T C z_x
    fro2 = 0.0  # ||C||_F^2
    for k in range(batch.budget):
        if k == 0 and first is not None:
            j = first
        else:
            disf = -torch.sqrt(fro2 + 2.0 * g + z4) / norm
            j = _argmax_available(batch.quality_part(k) + batch.w_d * disf, batch.taken)
        batch.take(j)
        fro2 += 2.0 * float(g[j]) + float(z4[j])
        g += (z @ z[j]) ** 2


def _lazy_disf(batch: _Batch, first: Optional[int], z: torch.Tensor, z4: torch.Tensor) -> None:
    """Pure DiSF: argmin of Delta_x = 2 g_x + ||z_x||^4 with a lazy heap.

    Stored Delta values are lower bounds (g only grows), so a popped entry that
    is up to date is the exact argmin (ties to the lower position, via the
    (Delta, position) heap order).
    """
    zn, z4n = z.numpy(), z4.numpy()
    g = np.zeros(batch.c)
    seen = np.zeros(batch.c, dtype=np.int64)  # picks already folded into g_x
    picked = np.zeros((batch.budget, zn.shape[1]))
    heap = [(float(z4n[x]), x) for x in range(batch.c)]
    heapq.heapify(heap)
    for k in range(batch.budget):
        if k == 0 and first is not None:
            j = first
        else:
            while True:
                _, j = heapq.heappop(heap)
                if batch.taken[j]:
                    continue
                if seen[j] == k:
                    break
                dots = picked[seen[j] : k] @ zn[j]
                g[j] += float(dots @ dots)
                seen[j] = k
                batch.evaluations += 1
                heapq.heappush(heap, (2.0 * g[j] + float(z4n[j]), j))
        batch.take(j)
        picked[k] = zn[j]


_FAST = {"pws": _fast_pws, "fl": _fast_fl, "fl_sum": _fast_fl_sum, "disf": _fast_disf}


def select_greedy(
    objective: Objective,
    budget: int,
    cfg: GreedyConfig,
    *,
    seed: int = 0,
    progress: Progress = None,
) -> tuple[np.ndarray, pd.DataFrame, dict]:
    """Greedy over contiguous batches (DiSF Algorithm 1); returns (ids, history, info)."""
    n = objective.n
    b = cfg.batch_size or (1024 if cfg.diversity == "disf" else n)
    starts = list(range(0, n, b))
    sizes = [min(b, n - s) for s in starts]
    budgets = allocate_budget(budget, sizes)
    rng = np.random.default_rng(derive_seed(seed, 20))
    picked, rows, evaluations = [], [], 0
    t0 = time.perf_counter()
    for i, (start, size, s_i) in enumerate(zip(starts, sizes, budgets)):
        pool = np.arange(start, start + size, dtype=np.int64)
        if s_i >= size:
            picked.append(pool)
            continue
        if s_i == 0:
            continue
        batch = _Batch(objective, pool, s_i)
        first = int(rng.integers(size)) if cfg.first_pick == "random" else None
        (_reference if cfg.impl == "reference" else _FAST[cfg.diversity])(batch, first)
        ids = pool[np.asarray(batch.picks, dtype=np.int64)]
        picked.append(ids)
        evaluations += batch.evaluations
        rows.append(
            {
                "batch": i,
                "candidates": size,
                "budget": s_i,
                "evaluations": batch.evaluations,
                "wall_time_s": time.perf_counter() - t0,
            }
        )
        log.debug("greedy batch %d: %d of %d picked, %d evaluations", i, s_i, size, batch.evaluations)
        if progress is not None:
            progress(i + 1, len(starts))
    indices = np.sort(np.concatenate(picked)) if picked else np.zeros(0, dtype=np.int64)
    info = {"batch_size": b, "n_batches": len(starts), "evaluations": evaluations, "impl": cfg.impl}
    return indices, pd.DataFrame(rows), info
