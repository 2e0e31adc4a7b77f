"""DiSF (seeds/001) Eq. 3-5 in closed form: ||C(U + {c})||_F^2 for every candidate c at once.

The criterion of DiSF Algorithm 1 is the sum of squared off-diagonal entries of the correlation
matrix C of the set U + {c} standardised over itself (official eps). ``_disf_terms`` gives
(||C||_F^2, sum_k C_kk^2) for every candidate from the n x n Gram of the standardised set (Helmert
contrasts, one batched product); ``disf_offdiag_all`` is that criterion in float64. The fast greedy
(:func:`curation.selection.greedy._fast_disf`) keeps the work across picks: ``_DisfScreen`` appends
U's Helmert and pair rows (cost grows as |U|^2 / 2), ``_DisfMoments`` keeps U's d x d mean and
scatter (cost independent of |U|); both score every candidate in float32 (``scores``) and re-score
the near-best in float64 (``exact``).
"""

from __future__ import annotations

import functools
from typing import Optional

import numpy as np
import torch

from curation.selection.objectives import DISF_EPS


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
