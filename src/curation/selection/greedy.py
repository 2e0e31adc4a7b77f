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
"""

from __future__ import annotations

import functools
import heapq
import logging
import math
import time
from typing import Callable, Optional

import numpy as np
import pandas as pd
import torch

from curation.selection.budget import allocate_budget
from curation.selection.config import GreedyConfig
from curation.selection.objectives import DISF_EPS, Objective, derive_seed

log = logging.getLogger(__name__)

Progress = Optional[Callable[[int, int], None]]


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


@functools.lru_cache(maxsize=256)
def _basis(m: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Helmert contrasts H (m - 1, m): orthonormal rows orthogonal to the all-ones vector, so
    H^T H = I - 11^T / m (centring); plus the pairs a <= b of an (m - 1)-square symmetric
    matrix and their weight in its squared Frobenius norm (1 diagonal, 2 off)."""
    r = m - 1
    h = torch.zeros((r, m), dtype=torch.float64)
    for i in range(1, m):
        h[i - 1, :i] = 1.0 / np.sqrt(i * (i + 1))
        h[i - 1, i] = -i / np.sqrt(i * (i + 1))
    iu0, iu1 = torch.triu_indices(r, r)
    return h.to(dtype), iu0, iu1, torch.where(iu0 == iu1, 1.0, 2.0).to(dtype)


def _disf_terms(
    xc: torch.Tensor, xs: torch.Tensor, work: Optional[tuple[torch.Tensor, torch.Tensor]] = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(fro2, diag2) of C(U + {c}) for every row c of xc (c, d); U = rows of xs (m, d), m >= 1.

    fro2 = ||C||_F^2 and diag2 = sum_k C_kk^2 of the set standardised over itself
    (DiSF Eq. 3-4, official eps), so the official criterion is fro2 - diag2.
    With n = m + 1, y_a = x_a - mu_U (a in U), y = x_c - mu_U and delta = y / n,
    the centred rows of U + {c} are y_a - delta and m delta; the unbiased variance is
    v_k = M2_k / m + y_k^2 / n (Welford) and, with w_k = 1 / (v_k + eps) =
    1 / (alpha_k + y_k^2 / n), alpha_k = M2_k / m + eps, the Gram G = Z Z^T of the
    standardised set is
        G_ab = A_ab - p_a - p_b + q,  G_ac = m (p_a - q),  G_cc = m^2 q,
        A_ab = sum_k w y_a y_b,  p_a = sum_k w y_a delta,  q = sum_k w delta^2,
    and ||C||_F = ||Z^T Z||_F / m = ||G||_F / m. The y_a sum to zero, so the rows of A
    and the p_a do too, the cross terms vanish and
        ||G||_F^2 = ||A||_F^2 + 2 m ||p||^2 + m^2 q^2 + 2 m^2 (||p||^2 + m q^2) + m^4 q^2.
    With the Helmert contrasts H (y = H^T B, B = H x_U, (m - 1) x d), ||A||_F = ||B W B^T||_F
    and ||p|| = ||B W y|| / n; since w y^2 = n (1 - alpha w), q = (d - alpha . w) / n. So
    B W B^T (pairs a <= b of m - 1 rows), alpha . w and sum_k w come out of ONE
    (m (m - 1) / 2 + 2, d) @ (d, c) product, B W y of one (m - 1, d) @ (d, c) product, and
    C_kk = v_k w_k = 1 - eps w_k gives diag2 = d - 2 eps sum w + eps^2 sum w^2.
    Per call: five elementwise passes over (c, d), in the optional work buffers.
    """
    m, d = xs.shape
    n = m + 1
    h, iu0, iu1, pair_weight = _basis(m, xs.dtype)
    b = h @ xs  # (m - 1, d): H 1 = 0, so no centring needed
    alpha = (b * b).sum(0).div_(m).add_(DISF_EPS)  # M2 = ||H x_U||^2 per dimension
    if work is None:
        work = (torch.empty_like(xc), torch.empty_like(xc))
    y, w = work
    torch.sub(xc, xs.mean(0), out=y)
    torch.addcmul(alpha, y, y, value=1.0 / n, out=w).reciprocal_()
    sw2 = torch.linalg.vector_norm(w, dim=1).square_()
    lhs = torch.cat([b[iu0] * b[iu1], alpha.unsqueeze(0), torch.ones_like(alpha).unsqueeze(0)])
    prod = lhs @ w.T  # (pairs + 2, c): the one large product of a pick
    q = (d - prod[-2]).div_(n)
    a2 = pair_weight @ prod[:-2].square_()  # ||A||_F^2
    p2 = (b @ y.mul_(w).T).square_().sum(0).div_(n * n)  # ||p||^2
    q2 = q.square_()
    fro2 = a2 + (2.0 * m + 2.0 * m * m) * p2 + (m * m + 2.0 * m**3 + m**4) * q2
    diag2 = d - 2.0 * DISF_EPS * prod[-1] + DISF_EPS**2 * sw2
    return fro2.div_(m * m), diag2


def disf_offdiag_all(x: torch.Tensor, picks: list[int]) -> torch.Tensor:
    """sum_{k != l} C_kl^2 of U + {x_j} for every row j of x (c, d), U = rows `picks`; float64 (see _disf_terms)."""
    x = x.double()
    fro2, diag2 = _disf_terms(x, x[torch.tensor(picks, dtype=torch.long)])
    return fro2 - diag2


# Relative error bound of the float32 screen of ``_fast_disf`` on ||C||_F^2: candidates
# that could beat the best within it are re-scored in float64. The measured max
# |fro2_32 / fro2_64 - 1| on real MiniLM batches (d = 384 and 768, b = 1024, 15 picks
# from 4 first picks in each of 3 batches) is 1.8e-6, so this keeps a 50x margin;
# best and second-best candidates were as close as 6.9e-7 (relative) there, which is
# why float32 alone would not reproduce the float64 / official picks.
_SCREEN_REL = 1e-4


class _DisfScreen:
    """(fro2, diag2) of U + {c} for every candidate c of a batch, the closed form of ``_disf_terms``.

    The per-pick work is cut to what changes: the Helmert rows B of U gain one
    row per pick (row i - 1 = (sum_{j<i} x_j - i x_i) / sqrt(i (i + 1)) depends
    only on the first i + 1 picks), so the pair rows b_a * b_b of the big
    product are appended, never rebuilt; U's sum, B and the pair rows are formed
    in float64 and kept in float64 (for ``exact``) and float32 (for ``scores``);
    the (c, d) work arrays and the products' outputs are allocated once per
    batch. Per pick: three elementwise passes over (c, d) (y = x - mu,
    w = 1 / (alpha + y^2 / n), y * w) and two products, (pairs + 2, d) @ (d, c)
    and (m - 1, d) @ (d, c). In the float32 screen the eps^2 sum_k w_k^2 part of
    diag2 is summed only over the dimensions of U with a tiny variance (eps /
    alpha_k > 1e-4: constant ones, or all while |U| = 1) and bounded by
    sum_k (eps / alpha_k)^2 over the others (``diag2_slack``, < 1e-8 d).
    """

    def __init__(self, x: torch.Tensor, budget: int) -> None:
        c, d = x.shape
        self.rows = x  # the input precision, for the float64 re-score (no (c, d) float64 copy)
        self.x, self.d = x.float().contiguous(), d
        self.y, self.w = torch.empty_like(self.x), torch.empty_like(self.x)
        rows = max(budget - 2, 1)  # Helmert rows of the largest scored U (budget - 1 picks)
        pairs = rows * (rows + 1) // 2
        self.b64 = torch.zeros((rows, d), dtype=torch.float64)
        self.lhs64 = torch.empty((pairs + 2, d), dtype=torch.float64)  # alpha, ones, then the pairs
        self.lhs64[1] = 1.0
        self.pair_weight64 = torch.empty(pairs, dtype=torch.float64)  # 1 diagonal, 2 off
        self.b32, self.lhs32 = self.b64.float(), self.lhs64.float()
        self.pair_weight32 = self.pair_weight64.float()
        self.prod = torch.empty((pairs + 2, c), dtype=torch.float32)
        self.pbuf = torch.empty((rows, c), dtype=torch.float32)
        self.sum = torch.zeros(d, dtype=torch.float64)
        self.alpha = torch.empty(d, dtype=torch.float64)
        self.m = self.pairs = 0
        self.diag2_slack = 0.0
        self.small_var = torch.zeros(0, dtype=torch.long)

    def add(self, j: int) -> None:
        """Append candidate j to U."""
        row = self.rows[j].double()
        i = self.m
        if i >= 1:
            b = (self.sum - i * row) / np.sqrt(i * (i + 1))
            self.b64[i - 1] = b
            self.b32[i - 1] = b
            new = slice(2 + self.pairs, 2 + self.pairs + i)
            torch.mul(self.b64[:i], b, out=self.lhs64[new])
            self.lhs32[new] = self.lhs64[new]
            self.pair_weight64[self.pairs : self.pairs + i] = 2.0
            self.pair_weight64[self.pairs + i - 1] = 1.0
            self.pair_weight32[self.pairs : self.pairs + i] = self.pair_weight64[self.pairs : self.pairs + i]
            self.pairs += i
        self.sum += row
        self.m += 1
        b64 = self.b64[: self.m - 1]
        torch.sum(b64 * b64, 0, out=self.alpha).div_(self.m).add_(DISF_EPS)  # M2 / m + eps
        self.lhs64[0] = self.alpha
        self.lhs32[0] = self.alpha
        self.small_var, self.diag2_slack = _small_variance(self.alpha)

    def _fro2(self, prod: torch.Tensor, p: torch.Tensor, pair_weight: torch.Tensor) -> torch.Tensor:
        m, n = self.m, self.m + 1
        q = (self.d - prod[0].double()).div_(n)
        a2 = (pair_weight[: self.pairs] @ prod[2 : self.pairs + 2].square_()).double()  # ||A||_F^2
        p2 = p.square_().sum(0).double().div_(n * n)  # ||p||^2
        q2 = q.square_()
        return (a2 + (2.0 * m + 2.0 * m * m) * p2 + (m * m + 2.0 * m**3 + m**4) * q2).div_(m * m)

    def scores(self) -> tuple[torch.Tensor, torch.Tensor]:
        """float32 screen: (fro2, diag2), returned as float64 (c,), for every candidate; |U| = m >= 1."""
        m, n, rows = self.m, self.m + 1, self.pairs + 2
        y, w = self.y, self.w
        torch.sub(self.x, (self.sum / m).float(), out=y)
        torch.addcmul(self.lhs32[0], y, y, value=1.0 / n, out=w).reciprocal_()
        prod = torch.mm(self.lhs32[:rows], w.T, out=self.prod[:rows])  # the one large product of a pick
        diag2 = self.d - 2.0 * DISF_EPS * prod[1].double()
        if len(self.small_var) == self.d:
            diag2 += DISF_EPS**2 * torch.linalg.vector_norm(w, dim=1).double().square_()
        elif len(self.small_var):
            diag2 += DISF_EPS**2 * w[:, self.small_var].double().square_().sum(1)
        p = torch.mm(self.b32[: m - 1], y.mul_(w).T, out=self.pbuf[: m - 1])
        return self._fro2(prod, p, self.pair_weight32), diag2

    def exact(self, cand: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """float64 (fro2, diag2) of the candidates at positions `cand` (all terms, no bound)."""
        m, n, rows = self.m, self.m + 1, self.pairs + 2
        y = self.rows[cand].double() - self.sum / m
        w = torch.addcmul(self.alpha, y, y, value=1.0 / n).reciprocal_()
        prod = self.lhs64[:rows] @ w.T
        diag2 = self.d - 2.0 * DISF_EPS * prod[1] + DISF_EPS**2 * (w * w).sum(1)
        p = self.b64[: m - 1] @ y.mul_(w).T
        return self._fro2(prod, p, self.pair_weight64), diag2


class _DisfMoments:
    """(fro2, diag2) of U + {c} for every candidate c from U's d x d moments: per pick O(b d^2), not O(b |U|^2 d).

    The pair rows of ``_DisfScreen`` grow as |U|^2 / 2; this form keeps U's mean mu
    and scatter A = sum_{a in U} (x_a - mu)(x_a - mu)^T (float64, one Welford
    rank-one update per pick). With n = m + 1, y = x_c - mu and beta = m / n,
    the scatter of U + {c} is M' = A + beta y y^T (so v_k = M'_kk / m and, as in
    ``cal_corre``, w_k = 1 / (v_k + eps) = 1 / (alpha_k + y_k^2 / n) with
    alpha_k = A_kk / m + eps), and C' = W^1/2 M' W^1/2 / m, hence
        m^2 ||C'||_F^2 = sum_jk M'_jk^2 w_j w_k
                       = w^T (A o A) w + 2 beta u^T A u + beta^2 (y . u)^2,   u = y o w,
    i.e. two (b, d) @ (d, d) products per pick for all b candidates (A o A and A
    are rebuilt once per pick). Every term is >= 0 (A o A >= 0 entrywise, A is
    PSD) and |u^T A u| <= sqrt(t1) (y . u) by Cauchy-Schwarz, so the float32 screen
    has no cancellation beyond the other two terms' size. diag2 = sum_k (v_k w_k)^2 =
    d - 2 eps sum w + eps^2 sum w^2 exactly as in ``_DisfScreen`` (same float32
    handling of the eps^2 part: ``diag2_slack``).
    """

    def __init__(self, x: torch.Tensor) -> None:
        c, d = x.shape
        self.rows = x
        self.x, self.d = x.float().contiguous(), d
        self.y, self.w = torch.empty_like(self.x), torch.empty_like(self.x)
        self.t = torch.empty_like(self.x)
        self.mu = torch.zeros(d, dtype=torch.float64)
        self.scatter = torch.zeros((d, d), dtype=torch.float64)
        self.alpha = torch.empty(d, dtype=torch.float64)
        self.m = 0
        self.diag2_slack = 0.0
        self.small_var = torch.zeros(0, dtype=torch.long)
        self._f32: Optional[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = None

    def add(self, j: int) -> None:
        """Append candidate j to U (Welford: A += m / (m + 1) delta delta^T, delta = x_j - mu)."""
        delta = self.rows[j].double() - self.mu
        self.scatter.addr_(delta, delta, alpha=self.m / (self.m + 1))
        self.mu += delta / (self.m + 1)
        self.m += 1
        self.alpha = torch.diagonal(self.scatter) / self.m + DISF_EPS
        self.small_var, self.diag2_slack = _small_variance(self.alpha)
        self._f32 = None

    def _terms(self, y: torch.Tensor, w: torch.Tensor, u: torch.Tensor, a: torch.Tensor, aa: torch.Tensor,
               t: torch.Tensor) -> torch.Tensor:
        m, n = self.m, self.m + 1
        beta = m / n
        t1 = torch.mm(w, aa, out=t).mul_(w).sum(1).double()  # w^T (A o A) w
        t2 = torch.mm(u, a, out=t).mul_(u).sum(1).double()  # u^T A u
        t3 = (y * u).sum(1).double()  # y . u = sum_k w y^2
        return (t1 + (2.0 * beta) * t2 + (beta * beta) * t3.square_()).div_(m * m)

    def scores(self) -> tuple[torch.Tensor, torch.Tensor]:
        """float32 screen: (fro2, diag2), returned as float64 (c,), for every candidate; |U| = m >= 1."""
        if self._f32 is None:
            self._f32 = (self.mu.float(), self.alpha.float(), self.scatter.float(), self.scatter.square().float())
        mu, alpha, a, aa = self._f32
        y, w = self.y, self.w
        torch.sub(self.x, mu, out=y)
        torch.addcmul(alpha, y, y, value=1.0 / (self.m + 1), out=w).reciprocal_()
        diag2 = _diag2(self.d, w, self.small_var)
        fro2 = self._terms(y, w, y * w, a, aa, self.t)
        return fro2, diag2

    def exact(self, cand: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """float64 (fro2, diag2) of the candidates at positions `cand` (all terms, no bound)."""
        y = self.rows[cand].double() - self.mu
        w = torch.addcmul(self.alpha, y, y, value=1.0 / (self.m + 1)).reciprocal_()
        diag2 = self.d - 2.0 * DISF_EPS * w.sum(1) + DISF_EPS**2 * (w * w).sum(1)
        fro2 = self._terms(y, w, y * w, self.scatter, self.scatter.square(), torch.empty_like(y))
        return fro2, diag2


def _small_variance(alpha: torch.Tensor) -> tuple[torch.Tensor, float]:
    # eps^2 sum_k w_k^2 (in diag2) is summed over the dimensions where eps / alpha_k is not tiny
    # (all of them while |U| = 1; then the constant ones) and bounded over the rest, w_k <= 1 / alpha_k
    ratio = DISF_EPS / alpha
    bounded = ratio <= 1e-4  # (not ratio.square_()[ratio <= 1e-4]: the mask would read the squared ratio)
    return torch.nonzero(~bounded).squeeze(1), float(ratio[bounded].square().sum())


def _diag2(d: int, w: torch.Tensor, small_var: torch.Tensor) -> torch.Tensor:
    """float32 screen of diag2 = d - 2 eps sum_k w_k + eps^2 sum_k w_k^2 (the last over `small_var` only)."""
    diag2 = d - 2.0 * DISF_EPS * w.sum(1).double()
    if len(small_var) == d:
        diag2 += DISF_EPS**2 * torch.linalg.vector_norm(w, dim=1).double().square_()
    elif len(small_var):
        diag2 += DISF_EPS**2 * w[:, small_var].double().square_().sum(1)
    return diag2


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
        impl = {"reference": _reference, "official": _official_disf}.get(cfg.impl, _FAST[cfg.diversity])
        impl(batch, first)
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
