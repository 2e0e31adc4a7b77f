"""Set objectives of DATAMASK Eq. 3, 4 and 12, evaluated for G index sets at once.

All objectives are "bigger is better" and defined on one *block* of items (the
set D the function is relative to): embeddings ``(N, d)`` and quality ``(N,)``.

- ``quality_mean``         Eq. 3   (1/S) sum_{i in U} q_i
- ``pairwise_similarity``  Eq. 4   -1/(2 S^2) sum_{i,j in U} cos(z_i, z_j)   (PWS)
- ``facility_location``    coverage: mean over reference points r of max_{j in U} cos(z_r, z_j)
- ``facility_location_sum`` Eq. 4 as printed: 1/(2 N S) sum_{i in D} sum_{j in U} cos(z_i, z_j)
- ``disf``                 DiSF Eq. 3-5: -||C(U)||_F, C(U) = Z^T Z / (|U| - 1), Z standardised over U itself;
                           in the raw Eq. 12, ``disf_scale="block"`` weighs it as DATAMASK Eq. 4 prints it, 1/(N - 1)
- ``disf_block``           a variant, not DiSF: -|| 1/(N-1) sum_{i in U} z_i^T z_i ||_F, z standardised once over the block
- joint                    Eq. 12: lam * f_qua + (1 - lam) * f_div (optionally per-term standardised)

The public functions ``f(embeddings, quality, indices) -> float`` evaluate one
set in float64. The engines use ``Objective``, which precomputes per-block state
once (unit vectors, standardised features, reference points) and evaluates an
index matrix ``(G, S)`` -- G masks of S items -- in one batched pass.
"""

from __future__ import annotations

import functools
import logging
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from curation.selection.config import DIVERSITIES, FL_SIMS_DTYPES, UNIT_DIVERSITIES
from curation.selection.seeds import derive_seed  # noqa: F401  (re-exported: its old home)

log = logging.getLogger(__name__)

# Upper bound on the elements of one temporary (G, S, x) tensor; masks are
# evaluated in chunks of G so a step never allocates more (64M floats = 256 MB).
_MAX_CHUNK_ELEMENTS = 1 << 26
# Facility location keeps the (N, R) item-to-reference similarities when they fit
# in this many bytes (1 GiB: 1M x 1024 in int8, 512k in int16, 256k in float32):
# a step is then a gather-max.
_MAX_REFERENCE_SIMS_BYTES = 1 << 30
# Integer tables of cos in [-1, 1]: value = round(cos * scale). Rounding is monotone,
# so max over a set of the rounded values is the rounded max (DataMask's FL step).
FL_SIMS_SCALE = {"int16": 32767.0, "int8": 127.0}


def _chunk_len(per_mask: int) -> int:
    """Masks per chunk so that one chunk holds at most _MAX_CHUNK_ELEMENTS elements."""
    return max(1, _MAX_CHUNK_ELEMENTS // max(1, per_mask))


# The official DiSF code (select_disf.py, cal_corre) divides by sqrt(eps + var) with this eps.
DISF_EPS = 1e-8


def standardize_features(embeddings: torch.Tensor) -> torch.Tensor:
    """Block standardisation for ``disf_block``: z = (f - mu) / sigma with mu/sigma over the whole block.

    This is *not* DiSF's Eq. 3 (which standardises over the evaluated set, see
    ``Objective.disf``); it makes ``disf_block`` exactly updatable by rank-1 steps.
    """
    mean = embeddings.mean(0, keepdim=True)
    std = embeddings.std(0, unbiased=False, keepdim=True)
    return (embeddings - mean) / torch.where(std > 0, std, torch.ones_like(std))


class Objective:
    """Eq. 12 joint objective over one block, batched over G index sets.

    ``terms(idx)`` returns the raw terms ``{"quality": (G,), <diversity>: (G,)}``
    for an index matrix ``idx`` of shape ``(G, S)`` (rows = sets, no repeats).
    ``combine(terms, size)`` returns the joint value ``(G,)``.

    With ``standardize=True`` each term t is replaced by ``(t - mu_t) / sd_t``,
    where mu/sd are the term's mean/std over ``scale_samples`` uniformly random
    subsets of the same size S (estimated once per size from a seeded RNG), so
    ``lam`` weighs one random-subset standard deviation of each term whatever the
    metric's scale. With ``standardize=False`` it is the paper's raw Eq. 12. With
    lam = 0 or 1 only one term counts and it is left raw either way.
    """

    def __init__(
        self,
        embeddings: torch.Tensor,
        quality: torch.Tensor,
        *,
        diversity: str = "pws",
        lam: float = 0.5,
        standardize: bool = False,
        scale_samples: int = 64,
        fl_reference_size: int = 8192,
        seed: int = 0,
        disf_probes: int = 0,
        fl_sims_dtype: str = "float32",
        unit_rows: bool = False,
        disf_scale: str = "set",
    ) -> None:
        if diversity not in DIVERSITIES:
            raise ValueError(f"diversity must be one of {DIVERSITIES}, got {diversity!r}")
        self.embeddings = embeddings  # (N, d)
        # the caller passes F.normalize(embeddings, dim=1) itself (a DataMask block task writes its rows
        # normalised): `unit` is then the input, not a second N x d copy; DiSF needs the raw features
        self.unit_rows = bool(unit_rows)
        if self.unit_rows and diversity not in UNIT_DIVERSITIES:
            raise ValueError(f"unit_rows: diversity={diversity!r} standardises the raw features, pass those")
        self.quality = quality.to(embeddings.dtype)  # (N,)
        self.n, self.d = embeddings.shape
        self.diversity = diversity
        self.lam = float(lam)
        self.standardize = standardize
        self.scale_samples = scale_samples
        self.fl_reference_size = fl_reference_size
        self.seed = seed
        # > 0: the "disf" term is -||C||_F^2 estimated with this many Hutchinson probes
        # (``disf_hutchinson``); 0: the exact -||C||_F
        self.disf_probes = int(disf_probes)
        if fl_sims_dtype not in FL_SIMS_DTYPES:
            raise ValueError(f"fl_sims_dtype must be one of {FL_SIMS_DTYPES}, got {fl_sims_dtype!r}")
        # "float32": the exact table (the embeddings' dtype); "int16"/"int8": cos rounded to
        # 1/32767 or 1/127, so FL moves by at most half of that per reference point; "auto": int16
        # while the table fits in _MAX_REFERENCE_SIMS_BYTES, else int8
        if fl_sims_dtype == "auto":
            r = min(fl_reference_size, self.n)
            fl_sims_dtype = "int16" if self.n * r * 2 <= _MAX_REFERENCE_SIMS_BYTES else "int8"
            fit = max(1, _MAX_REFERENCE_SIMS_BYTES // self.n)  # reference points whose int8 table fits
            if diversity == "fl" and r > fit:
                # a step without the table recomputes every similarity (~100x slower): "auto" keeps the table
                # and says what that costs (docs/selection.md "Facility location: reference points")
                log.warning("facility location: %d reference points of %d items need a %.1f GiB int8 table, above "
                            "the 1 GiB cap: using %d reference points (1,024 kept ~56-70%% of the whole-block FL "
                            "gain in the measurements of docs/selection.md)", r, self.n, self.n * r / 2**30, fit)
                self.fl_reference_size = fl_reference_size = fit
        self.fl_sims_dtype = fl_sims_dtype
        if disf_scale not in ("set", "block"):
            raise ValueError(f"disf_scale must be 'set' or 'block', got {disf_scale!r}")
        # "block": the disf term enters the raw Eq. 12 as DATAMASK's Eq. 4 prints it, 1/(N-1) (``weights``)
        self.disf_scale = disf_scale
        # seed of the next call's probes (set per DataMask step, so a resumed run draws the same
        # probes); None: a stream seeded from `seed`
        self.disf_probe_seed: int | None = None
        self._probe_gen: torch.Generator | None = None
        self._gather_buf: torch.Tensor | None = None
        self._stats: dict[int, dict[str, tuple[float, float]]] = {}

    # --- per-block precomputation (lazy: only what the asked terms need) ---

    @functools.cached_property
    def unit(self) -> torch.Tensor:
        """Unit vectors (N, d): cos(z_i, z_j) = unit_i . unit_j."""
        if self.unit_rows:
            return self.embeddings
        return F.normalize(self.embeddings, dim=1)

    @functools.cached_property
    def standardized(self) -> torch.Tensor:
        """Block-standardised features (N, d) of ``disf_block``, mean/std over the block."""
        return standardize_features(self.embeddings)

    @functools.cached_property
    def reference(self) -> torch.Tensor:
        """Facility-location reference points (R, d): a seeded random subsample of the block."""
        r = min(self.fl_reference_size, self.n)
        gen = torch.Generator().manual_seed(derive_seed(self.seed, 1))
        idx = torch.randperm(self.n, generator=gen)[:r].to(self.embeddings.device)
        return self.unit[idx]

    @functools.cached_property
    def reference_sims(self) -> torch.Tensor | None:
        """cos(z_i, r) for every item and reference point (N, R), once per block; None above 1 GiB.

        With ``fl_sims_dtype`` int16/int8 the table holds round(cos * scale) (``FL_SIMS_SCALE``):
        half or a quarter of the bytes a step's gather-max reads, computed 64k rows at a time.
        """
        r = self.reference.shape[0]
        if self.fl_sims_dtype == "float32":
            if self.n * r * self.unit.element_size() > _MAX_REFERENCE_SIMS_BYTES:
                return None
            return (self.unit @ self.reference.T).contiguous()
        dtype = torch.int16 if self.fl_sims_dtype == "int16" else torch.int8
        if self.n * r * dtype.itemsize > _MAX_REFERENCE_SIMS_BYTES:
            return None
        scale = FL_SIMS_SCALE[self.fl_sims_dtype]
        out = torch.empty((self.n, r), dtype=dtype, device=self.unit.device)
        ref_t = self.reference.T
        for lo in range(0, self.n, 1 << 16):
            block = self.unit[lo : lo + (1 << 16)] @ ref_t
            out[lo : lo + len(block)] = block.mul_(scale).round_().clamp_(-scale, scale).to(dtype)
        return out

    @functools.cached_property
    def _centered(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Features minus the block mean, and their squares (N, d) each: ``disf_hutchinson``'s bag sums."""
        xc = self.embeddings - self.embeddings.mean(0)
        return xc, xc * xc

    @functools.cached_property
    def unit_mean(self) -> torch.Tensor:
        """(1/N) sum_{i in D} unit_i, so Eq. 4's sum form is s_U . unit_mean / (2 S)."""
        return self.unit.mean(0)

    # --- terms, each (G, S) -> (G,) ---

    def quality_mean(self, idx: torch.Tensor) -> torch.Tensor:
        """Eq. 3: mean quality of each set."""
        return self.quality[idx].mean(1)

    def _unit_sums(self, idx: torch.Tensor) -> torch.Tensor:
        # sum of unit vectors per set (G, d) without materialising (G, S, d)
        return F.embedding_bag(idx, self.unit, mode="sum")

    def pairwise_similarity(self, idx: torch.Tensor) -> torch.Tensor:
        """Eq. 4 PWS with the cosine kernel: -1/(2 S^2) sum_ij cos = -||sum_i u_i||^2 / (2 S^2), O(S d)."""
        s = self._unit_sums(idx)
        return -(s * s).sum(1) / (2.0 * idx.shape[1] ** 2)

    def facility_location(self, idx: torch.Tensor, within: torch.Tensor | None = None) -> torch.Tensor:
        """Standard facility location (coverage): mean_r max_{j in U} cos(z_r, z_j) over the reference points.

        ``within`` (optional, (n_b,) item ids): ``idx`` holds positions into it, as in a DataMask
        step whose masks are drawn from a batch of n_b items. The batch's rows of the table are
        gathered once, so the G per-mask gathers read a table that stays in cache.
        """
        sims = self.reference_sims
        if sims is not None:
            if within is not None:
                sims = sims.index_select(0, within)
            # per set: gather its S rows of the (N, R) table and take the max over them
            # (index_select + amax per row is ~2x faster than embedding_bag(mode="max") on CPU)
            out = torch.empty((idx.shape[0], sims.shape[1]), dtype=sims.dtype, device=sims.device)
            for g in range(idx.shape[0]):
                torch.amax(sims.index_select(0, idx[g]), 0, out=out[g])
            if sims.is_floating_point():
                return out.mean(1)
            # integer table: the sum over R references is exact in float64
            return (out.double().mean(1) / FL_SIMS_SCALE[self.fl_sims_dtype]).to(self.unit.dtype)
        if within is not None:
            idx = within[idx]
        g, s = idx.shape
        ref_t = self.reference.T  # (d, R)
        step = _chunk_len(s * (ref_t.shape[1] + self.d))
        out = []
        for a in range(0, g, step):
            sims = self.unit[idx[a : a + step]] @ ref_t  # (g, S, R)
            out.append(sims.max(1).values.mean(1))
        return torch.cat(out)

    def facility_location_sum(self, idx: torch.Tensor) -> torch.Tensor:
        """DATAMASK Eq. 4 as printed: 1/(2 N S) sum_{i in D} sum_{j in U} cos(z_i, z_j).

        The double sum factorises to (sum_D u) . (sum_U u) / (2 N S), so this is a
        *modular* function: the mean over U of each item's similarity to the block
        centroid. It measures representativeness (closeness to the bulk of D), not
        coverage; top-k by centroid similarity maximises it.
        """
        s = self._unit_sums(idx)
        return (s @ self.unit_mean) / (2.0 * idx.shape[1])

    def disf(self, idx: torch.Tensor) -> torch.Tensor:
        """DiSF Eq. 3-5: -||C(U)||_F with C(U) = Z^T Z / (|U| - 1), Z standardised over U.

        Per set U (a row of ``idx``, |U| = S >= 2): mu and var are the mean and the
        unbiased variance of U's own features per dimension, z = (x - mu) /
        sqrt(var + eps) with eps = 1e-8 as in the official code (``cal_corre``), so
        trace(C) = d up to eps and, by Lemma 1, ||C||_F^2 - d is the spread of C's
        eigenvalues. ||Z^T Z||_F = ||Z Z^T||_F, so the (S, S) Gram matrix is used
        when S < d (O(S^2 d) per set instead of O(S d^2)). The official code ranks
        candidates by the off-diagonal sum of C_kl^2, which is ||C||_F^2 minus
        sum_k (var_k / (var_k + eps))^2 = d - O(eps / var): the same ordering
        except at eps-level near-ties (the greedy uses the official form).

        Cost: exact, O(G S d min(S, d)) per batch of G sets. In a DataMask step
        (N = 100k, d = 384, G = 128, S_b = 500) that is ~35x the PWS step
        (benchmarks/selection/bench_datamask.py step); with ``disf_probes`` > 0
        the term is the unbiased Hutchinson estimate of -||C||_F^2 instead
        (``disf_hutchinson``, O(G S d k) for k probes).
        """
        g, s = idx.shape
        if s < 2:
            raise ValueError(f"disf needs sets of >= 2 items (per-set variance), got sets of {s}")
        if self.disf_probes > 0:
            return self.disf_hutchinson(idx)
        per_mask = s * (s + 2 * self.d) if s < self.d else 2 * s * self.d + self.d * self.d
        step = _chunk_len(per_mask)
        out = []
        for a in range(0, g, step):
            x = self.embeddings[idx[a : a + step]]  # (g, S, d)
            x = x - x.mean(1, keepdim=True)
            var = (x * x).sum(1, keepdim=True) / (s - 1)
            z = x * torch.rsqrt(var + DISF_EPS)
            m = z @ z.transpose(1, 2) if s < self.d else z.transpose(1, 2) @ z  # (g, S, S) or (g, d, d)
            out.append(torch.linalg.matrix_norm(m, ord="fro"))
        return -torch.cat(out) / (s - 1)

    def disf_hutchinson(self, idx: torch.Tensor) -> torch.Tensor:
        """-||C(U)||_F^2 per set, estimated without bias with k = ``disf_probes`` Rademacher probes.

        ||C||_F^2 = tr(C^2) = E_v ||C v||^2 for v with E[v v^T] = I (Hutchinson), and
        with Z = (X_U - 1 mu^T) diag(1/s) (DiSF Eq. 3-4, s = sqrt(var + eps)):
        C V = diag(1/s) X_U^T r / (|U| - 1), r = X_U (V / s) - 1 mu^T (V / s),
        since 1^T r = 0. So a set costs two (|U| x d) @ (d x k) products instead of
        its (|U| x |U|) Gram; the k probes are shared by all sets of a call (common
        random numbers: the group-relative advantages of Eq. 10 compare sets under
        the same probes). Note the term is the *square* -||C||_F^2 (the expectation
        of a square root of an unbiased estimate is biased); it orders sets exactly
        as -||C||_F does, but Eq. 12 with lam > 0 weighs it on another scale.
        """
        g, s = idx.shape
        if self.disf_probe_seed is not None:
            gen = torch.Generator(device=self.embeddings.device).manual_seed(self.disf_probe_seed)
        else:
            if self._probe_gen is None:
                self._probe_gen = torch.Generator(device=self.embeddings.device).manual_seed(derive_seed(self.seed, 6))
            gen = self._probe_gen
        k = self.disf_probes
        probes = torch.randint(0, 2, (self.d, k), generator=gen, device=self.embeddings.device)
        probes = probes.to(self.embeddings.dtype).mul_(2.0).sub_(1.0)  # Rademacher
        xc, xc2 = self._centered
        # per-set mean and unbiased variance from two bag sums (no (G, S, d) pass); features
        # centred on the block mean first, so the sum-of-squares form does not cancel
        s1 = F.embedding_bag(idx, xc, mode="sum")  # (G, d)
        var = F.embedding_bag(idx, xc2, mode="sum").sub_(s1 * s1 / s).div_(s - 1).clamp_min_(0.0)
        inv_sd = torch.rsqrt(var.add_(DISF_EPS))  # (G, d)
        mu = s1.div_(s)
        step = _chunk_len(s * (self.d + 2 * k) + self.d * k)
        out = []
        for a in range(0, g, step):
            i = idx[a : a + step]
            flat = i.reshape(-1)
            if self._gather_buf is None or self._gather_buf.numel() < flat.numel() * self.d:
                # kept across calls: a fresh (G, S, d) tensor per step costs its page faults again
                self._gather_buf = xc.new_empty(flat.numel() * self.d)
            x = torch.index_select(xc, 0, flat, out=self._gather_buf[: flat.numel() * self.d].view(-1, self.d))
            x = x.view(len(i), s, self.d)  # (g, S, d)
            # probes-major products ((k, d) @ (d, S), then (k, S) @ (S, d)): 2x faster than (S, d) @ (d, k) here
            vs = probes.T.unsqueeze(0) * inv_sd[a : a + step].unsqueeze(1)  # (g, k, d)
            r = torch.bmm(vs, x.transpose(1, 2)).sub_(torch.bmm(vs, mu[a : a + step].unsqueeze(2)))  # (g, k, S)
            cv = torch.bmm(r, x).mul_(inv_sd[a : a + step].unsqueeze(1))  # (g, k, d): (C V)^T times S - 1
            out.append(cv.square_().sum((1, 2)) / (k * (s - 1) ** 2))
        return -torch.cat(out)

    def disf_block(self, idx: torch.Tensor) -> torch.Tensor:
        """A block-standardised variant of DiSF (not the paper's): -|| 1/(N-1) sum_{i in U} z_i^T z_i ||_F.

        z are standardised once over the block (N items), and the sum keeps the
        diagonal, so trace(C) is not fixed: sum ||z_i||^4 dominates at small sets
        and the term favours items near the block mean rather than decorrelated
        ones. Kept because it is a pure set function with exact rank-1 updates
        (``greedy`` fast path); use ``disf`` for DiSF.
        """
        g, s = idx.shape
        per_mask = s * (s + self.d) if s < self.d else s * self.d + self.d * self.d
        step = _chunk_len(per_mask)
        out = []
        for a in range(0, g, step):
            x = self.standardized[idx[a : a + step]]  # (g, S, d)
            m = x @ x.transpose(1, 2) if s < self.d else x.transpose(1, 2) @ x  # (g, S, S) or (g, d, d)
            out.append(torch.linalg.matrix_norm(m, ord="fro"))
        return -torch.cat(out) / max(self.n - 1, 1)

    # --- the joint objective (Eq. 12) ---

    def term_functions(self) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
        return {
            "quality": self.quality_mean,
            "pws": self.pairwise_similarity,
            "fl": self.facility_location,
            "fl_sum": self.facility_location_sum,
            "disf": self.disf,
            "disf_block": self.disf_block,
        }

    def needed_terms(self) -> tuple[str, ...]:
        """Terms with a non-zero weight in the joint objective."""
        names = []
        if self.lam > 0:
            names.append("quality")
        if self.lam < 1:
            names.append(self.diversity)
        return tuple(names)

    def terms(
        self, idx: torch.Tensor, names: tuple[str, ...] | None = None, *, within: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        """Raw terms for the index matrix `idx` (G, S); all of quality + diversity unless `names`.

        With ``within`` ((n_b,) item ids), `idx` holds positions into it (a DataMask batch).
        """
        names = names or ("quality", self.diversity)
        funcs = self.term_functions()
        items = idx if within is None else within[idx]
        return {
            name: self.facility_location(idx, within) if name == "fl" and within is not None else funcs[name](items)
            for name in names
        }

    def term_stats(self, size: int) -> dict[str, tuple[float, float]]:
        """Mean and std of quality and diversity over `scale_samples` random subsets of `size` items."""
        if size not in self._stats:
            gen = torch.Generator().manual_seed(derive_seed(self.seed, 2, size))
            idx = torch.stack([torch.randperm(self.n, generator=gen)[:size] for _ in range(self.scale_samples)])
            # Hutchinson probes of their own, so the statistics do not depend on the step that asks first
            probe_seed, self.disf_probe_seed = self.disf_probe_seed, derive_seed(self.seed, 7, size)
            try:
                raw = self.terms(idx.to(self.embeddings.device))
            finally:
                self.disf_probe_seed = probe_seed
            self._stats[size] = {
                k: (float(v.double().mean()), float(v.double().std(unbiased=False))) for k, v in raw.items()
            }
        return self._stats[size]

    def weights(self, size: int, population: int | None = None) -> tuple[float, float, float]:
        """(w_q, w_div, offset) with joint = w_q * quality + w_div * diversity + offset, for sets of `size`.

        ``population``: the number of items the sets are drawn from (a DataMask batch, a greedy batch;
        default the block), used by ``disf_scale="block"``: the raw disf term -||C(U)||_F = -||Z^T Z||_F / (S - 1)
        is weighed by (S - 1) / (N - 1), so the joint holds -||Z^T Z||_F / (N - 1) as DATAMASK Eq. 4 prints it
        (the Hutchinson estimate of -||C||_F^2 by its square). Standardised terms need no such factor.
        """
        w_q, w_d, offset = self.lam, 1.0 - self.lam, 0.0
        if self.diversity == "disf" and self.disf_scale == "block" and not self.standardize:
            n = self.n if population is None else int(population)
            factor = (size - 1) / max(n - 1, 1)
            w_d *= factor**2 if self.disf_probes > 0 else factor
        if not self.standardize or self.lam in (0.0, 1.0):
            # one term alone: rescaling it changes no argmax and no group advantage,
            # so its random-subset statistics are not computed (greedy/DataMask overhead)
            return w_q, w_d, offset
        stats = self.term_stats(size)
        (mq, sq), (md, sd) = stats["quality"], stats[self.diversity]
        # A term that is constant over random subsets (e.g. equal quality) gets scale 1.
        sq, sd = (sq if sq > 0 else 1.0), (sd if sd > 0 else 1.0)
        return w_q / sq, w_d / sd, -(w_q * mq / sq + w_d * md / sd)

    def combine(self, terms: dict[str, torch.Tensor], size: int, population: int | None = None) -> torch.Tensor:
        """Eq. 12 from raw terms of sets of `size` items drawn from `population` items (default: the block);
        a term with zero weight may be absent."""
        w_q, w_d, offset = self.weights(size, population)
        out = torch.full_like(next(iter(terms.values())), offset)
        if w_q != 0:
            out = out + w_q * terms["quality"]
        if w_d != 0:
            out = out + w_d * terms[self.diversity]
        return out

    def __call__(self, idx: torch.Tensor) -> torch.Tensor:
        """Joint objective (G,) of the index matrix (G, S)."""
        return self.combine(self.terms(idx, self.needed_terms()), idx.shape[1])


# --- public single-set functions: f(embeddings, quality, indices) -> float ---


def _single(embeddings, quality, indices, **kwargs) -> tuple[Objective, torch.Tensor]:
    emb = torch.as_tensor(np.asarray(embeddings), dtype=torch.float64)
    n = emb.shape[0]
    q = torch.zeros(n, dtype=torch.float64) if quality is None else torch.as_tensor(np.asarray(quality), dtype=torch.float64)
    idx = torch.as_tensor(np.asarray(indices, dtype=np.int64)).reshape(1, -1)
    if idx.numel() == 0:
        raise ValueError("indices must not be empty")
    if int(idx.min()) < 0 or int(idx.max()) >= n:
        raise ValueError(f"indices must be in [0, {n})")
    if torch.unique(idx).numel() != idx.numel():
        raise ValueError("indices must be unique")
    return Objective(emb, q, **kwargs), idx


def quality_mean(embeddings, quality, indices) -> float:
    """DATAMASK Eq. 3: mean quality of the selected items (embeddings unused)."""
    obj, idx = _single(embeddings, quality, indices)
    return float(obj.quality_mean(idx)[0])


def pairwise_similarity(embeddings, quality, indices) -> float:
    """DATAMASK Eq. 4 PWS, cosine kernel: -1/(2 S^2) sum_{i,j in U} cos(z_i, z_j) (diagonal included)."""
    obj, idx = _single(embeddings, quality, indices)
    return float(obj.pairwise_similarity(idx)[0])


def facility_location(embeddings, quality, indices, *, reference_size: int = 8192, seed: int = 0) -> float:
    """Facility location (coverage): mean over reference points r of max_{j in U} cos(z_r, z_j).

    The reference points are a random subsample of `reference_size` rows of
    `embeddings` (all rows when there are fewer), drawn from `seed`.
    """
    obj, idx = _single(embeddings, quality, indices, fl_reference_size=reference_size, seed=seed)
    return float(obj.facility_location(idx)[0])


def facility_location_sum(embeddings, quality, indices) -> float:
    """DATAMASK Eq. 4 as printed: 1/(2 N S) sum_{i in D} sum_{j in U} cos(z_i, z_j).

    Modular, so it measures representativeness (similarity to the bulk of D), not coverage.
    """
    obj, idx = _single(embeddings, quality, indices)
    return float(obj.facility_location_sum(idx)[0])


def disf(embeddings, quality, indices) -> float:
    """DiSF Eq. 3-5: -||C(U)||_F, features standardised over the selected set U itself (|U| >= 2)."""
    obj, idx = _single(embeddings, quality, indices)
    return float(obj.disf(idx)[0])


def disf_block(embeddings, quality, indices) -> float:
    """Block-standardised variant (not DiSF): -||(1/(N-1)) sum_{i in U} z_i^T z_i||_F, z over all of `embeddings`."""
    obj, idx = _single(embeddings, quality, indices)
    return float(obj.disf_block(idx)[0])


def joint(
    embeddings,
    quality,
    indices,
    *,
    diversity: str = "pws",
    lam: float = 0.5,
    standardize: bool = False,
    scale_samples: int = 64,
    fl_reference_size: int = 8192,
    seed: int = 0,
) -> float:
    """DATAMASK Eq. 12: lam * f_qua + (1 - lam) * f_div, optionally per-term standardised (see Objective)."""
    obj, idx = _single(
        embeddings,
        quality,
        indices,
        diversity=diversity,
        lam=lam,
        standardize=standardize,
        scale_samples=scale_samples,
        fl_reference_size=fl_reference_size,
        seed=seed,
    )
    return float(obj(idx)[0])
