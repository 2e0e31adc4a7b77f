"""DiSF Algorithm 1 (seeds/001) on one batch: its state and the greedy pick per objective.

``_Batch`` holds one contiguous batch of candidates, its share of the budget and the weights of the
joint objective (DATAMASK Eq. 12) at the batch's final size. The pickers run the greedy loop of DiSF
Algorithm 1 on it: ``_reference`` re-evaluates f(U + {x}) from scratch for every candidate;
``_official_disf`` is the official DiSF code (``hunger_select`` + ``cal_corre``, DiSF Eq. 3-5) line
for line; ``_fast_pws``, ``_fast_fl``, ``_fast_fl_sum`` and ``_fast_disf_block`` pick the same items by
rank-1 / incremental updates of the PWS, facility-location, Eq. 4 sum-form and block-standardised
DiSF terms (``_lazy_disf``: a lazy heap at lam = 0). The fast per-set DiSF pick (``_fast_disf``) and
the batch driver are in :mod:`curation.selection.greedy`.
"""

from __future__ import annotations

import heapq
from typing import Optional

import numpy as np
import torch

from curation.selection.objectives import DISF_EPS, Objective


class _Batch:
    """One batch of candidates (global ids `pool`) and the weights of its joint objective."""

    def __init__(self, objective: Objective, pool: np.ndarray, budget: int) -> None:
        self.obj = objective
        self.pool = torch.from_numpy(pool).to(objective.embeddings.device)
        self.c = len(pool)
        self.budget = budget
        self.w_q, self.w_d, _ = objective.weights(budget, self.c)
        self.q = objective.quality[self.pool].double()  # (c,)
        self.taken = torch.zeros(self.c, dtype=torch.bool)
        self.picks: list[int] = []  # positions into pool, in pick order
        self.q_sum = 0.0
        self.evaluations = 0  # candidate-set evaluations (reference) or refreshes (lazy fast)
        self.rescored = 0  # disf fast: candidates re-scored in float64 after the float32 screen

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
        values = obj.combine(obj.terms(sets, names), batch.budget, batch.c)
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


def _fast_disf_block(batch: _Batch, first: Optional[int]) -> None:
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
    """Pure ``disf_block``: argmin of Delta_x = 2 g_x + ||z_x||^4 with a lazy heap.

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


# --- disf (per-set standardisation, DiSF Eq. 3-5) ---


def _first(batch: _Batch, first: Optional[int]) -> int:
    # DiSF Algorithm 1 starts from a random item; "argmax" has no meaning for a
    # per-set variance of a single item, so it falls back to position 0.
    return first if first is not None else 0


def _official_disf(batch: _Batch, first: Optional[int]) -> None:
    """``hunger_select`` + ``cal_corre`` of the official DiSF code, re-implemented line for line.

    float32 like the official features; one (n x d) standardisation and one
    d x d product per candidate; the criterion is sum_{k != l} C_kl^2 / 10^4.
    """
    x = batch.obj.embeddings[batch.pool].float()
    d = x.shape[1]
    batch.take(_first(batch, first))
    for _ in range(1, batch.budget):
        sel = x[torch.tensor(batch.picks, dtype=torch.long)]
        chosen = set(batch.picks)
        best, best_j = 10000.0, -1
        for j in range(batch.c):
            if j in chosen:
                continue
            feat = torch.cat((sel, x[j : j + 1]), 0)
            n = feat.shape[0]
            feat = feat - feat.mean(0, keepdim=True)
            feat = feat / torch.sqrt(DISF_EPS + feat.var(0, keepdim=True))
            corr = feat.t() @ feat / (n - 1)
            # the off-diagonal entries, read as the official code does (a strided view)
            offdiag = corr.flatten()[:-1].view(d - 1, d + 1)[:, 1:]
            value = float(offdiag.pow(2).sum()) / 10000.0
            batch.evaluations += 1
            if value < best:
                best, best_j = value, j
        if best_j < 0:
            raise RuntimeError("official DiSF criterion above its 10000 sentinel; cannot pick")
        batch.take(best_j)
