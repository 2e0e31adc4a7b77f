"""DATAMASK (seeds/000, Sec. 3, Algorithm 1): policy-gradient mask learning.

Per block of N items we learn logits L (N,). Each step:

1. batch updating (Sec. 4.3): a random fraction r of the block takes part, with
   the budget scaled by r: S_b = round(S * N_b / N) of N_b = round(r * N) items.
   The batches are consecutive slices of one seeded random permutation per
   "epoch" of floor(N / N_b) steps (each batch a uniform random subset, batches
   of an epoch disjoint), so no step pays for a permutation of the block;
2. G masks of S_b items are drawn *without replacement* from softmax(L_B)
   (Eq. 7) -- all G at once by Gumbel-top-k, whose key order is the draw order;
3. every mask is scored with the joint objective f (Eq. 12, ``objectives.py``);
4. group-relative advantages A_j = (f_j - mean) / std (Eq. 10);
5. L_B <- L_B + eta * (1/G) sum_j A_j grad_L log P(ordering_j | L_B) (Eq. 11),
   with the exact Plackett-Luce score function (``policy_gradient``).

After E steps the final mask is sampled from softmax(L) (Algorithm 1, last
line) or, if configured, is the top-S of L. History rows (always the exact
objective, also when ``disf_estimator: hutchinson`` drives the steps) during the run
evaluate the current top-S (no RNG draw, so recording never changes the run);
the last row (``mask == "returned"``) is the value of the mask actually returned. The corpus is split into random
blocks of ``block_size`` items with the same keep ratio (Sec. 4.3 "Splitting");
blocks are independent (``plan_blocks`` + ``run_block`` can run in separate
processes or devices). Every ``checkpoint_every`` steps the logits and the RNG
state are saved, and ``resume=True`` continues to the same selection an
uninterrupted run with the same seed makes.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pandas as pd
import torch

from curation.cache import atomic_write
from curation.selection.budget import allocate_budget
from curation.selection.config import DataMaskConfig
from curation.selection.objectives import Objective, derive_seed

log = logging.getLogger(__name__)

Progress = Optional[Callable[[int, int], None]]

# The sampler's arithmetic (issue #20: exact race, no e^80 cap); a checkpoint written by
# another version is refused on resume instead of being continued with other draws.
SAMPLER_VERSION = "exact-race-v2"
# Policy health (issue #20): a block warns when softmax(L) has collapsed below this entropy
# (a few items hold all the mass while a mask draws S >> 1), or when the returned mask's
# joint objective falls short of the best recorded top-S mask by more than this share of |best|.
COLLAPSE_ENTROPY_NATS = 0.5
RETURNED_SHORTFALL_WARN = 0.01

# Config keys that do not change the optimisation and may differ on resume.
_RESUME_FREE_KEYS = {"checkpoint_every", "checkpoint_dir", "resume", "history_every", "device"}


# --- sampling and the score function (Eq. 7, 9-11) ---


def gumbel_top_k(logits: torch.Tensor, k: int, g: int, generator: torch.Generator) -> torch.Tensor:
    """G orderings of k items drawn without replacement from softmax(logits) (Eq. 7).

    Exponential race (equivalent to Gumbel-top-k): with E_i ~ Exp(1) i.i.d., the
    items in increasing order of the arrival times E_i / e^{L_i} are a sequential
    Plackett-Luce draw. Exact at every range of logits: no item's weight is capped
    (an earlier cap at e^80 made every item more than 80 nats below the best equally
    likely, so once a run's logits spread that far the masks became near-random
    after the first few draws; issue #20). Returns the item ids in draw order, shape (g, k).

    The exact form is a top-k over log-space keys log E_i - L_i in float64
    (``race_log_keys``). On CPU with k < n / 4 the k winners are found without
    keys for all n items (``_race_winners``): the same orderings, apart from
    arrivals equal to float32 precision (relative 6e-8), which come in id order.
    """
    lg = logits.double()
    n = lg.shape[0]
    shifted = lg - lg.max()  # <= 0; the race is invariant to a shift of every logit
    u = torch.rand((g, n), dtype=torch.float32, device=lg.device, generator=generator)
    if lg.device.type == "cpu" and 4 * k < n and n < (1 << 20) and g < (1 << 12):
        order = _race_winners(u, shifted, k)
        if order is not None:
            return order
    return torch.topk(race_log_keys(u, shifted), k, dim=1, largest=False, sorted=True).indices


def race_log_keys(u: torch.Tensor, shifted: torch.Tensor) -> torch.Tensor:
    """log arrival times log(-log U) - L (float64, any spread of L): smaller arrives first.

    U = 0 (probability 2^-24 per float32 draw) is clamped to the smallest float32.
    """
    return u.double().clamp_min_(torch.finfo(torch.float32).tiny).log_().neg_().log_().sub_(shifted)


# The filtered race packs float32 arrival times; it runs while every arrival it can keep
# is below this (2^100: float32 holds them with room, and each kept item's 1 / weight
# is at most cut / (-log(1 - 2^-24)) < 2^125). Past it the exact log-space top-k runs.
_RACE_MAX_CUT = 2.0**100


def _race_threshold(weights: torch.Tensor, target: float) -> float:
    """A time t of the exponential race at which sum_i P(E_i / w_i < t) ~ target (within 2x).

    weights: e^{L_i - L_max} in float64 (items far below underflow to 0: never kept).
    P(E_i / w_i < t) = 1 - exp(-t w_i) <= t w_i, so t >= target / sum(w);
    bisection in log t, at most 9 halvings of a 100-nat interval.
    """
    lo = float(np.log(target / float(weights.sum())))
    hi = lo + 100.0
    while hi - lo > 0.3:
        mid = 0.5 * (lo + hi)
        if float((-torch.expm1(-np.exp(mid) * weights)).sum()) < target:
            lo = mid
        else:
            hi = mid
    return float(np.exp(hi))


def _race_winners(u: torch.Tensor, shifted: torch.Tensor, k: int) -> torch.Tensor | None:
    """The k first arrivals of the race per row, in arrival order, from uniforms u (g, n).

    Item i arrives before time t iff E_i / w_i < t iff U_i > exp(-t w_i), so one
    comparison of u against a per-item cut keeps the items of the race's first
    ~k + 6 sqrt(k) + 16 arrivals (t chosen so that is their expected number; the
    count is a sum of independent Bernoullis, variance <= mean). Only their arrival
    times are computed, in float64 (-log U) / w_i and rounded to float32 (monotone,
    so the order is the float64 order up to ties at float32 precision); each is
    packed with its row and item id into one int64 (row | time bits | id:
    non-negative float32 bits order like the floats), so one flat sort orders every
    row by arrival, ties to the lower id. A row whose kept set might not hold its k
    first arrivals (fewer than k kept, or the k-th arrival within 1e-4 of the cut:
    float rounding) is redone with the exact log-space top-k over all its keys.
    Returns None when the cut exceeds ``_RACE_MAX_CUT`` (the logits have spread so
    far that k arrivals need items ~70+ nats below the best): the caller then runs
    the exact top-k for every row.
    """
    g, n = u.shape
    weights = torch.exp(shifted)  # float64; 1 for the best item
    target = min(float(n), k + 6.0 * np.sqrt(k) + 16.0)
    t = _race_threshold(weights, target)
    if t >= _RACE_MAX_CUT:
        return None
    cut = torch.exp(-t * weights).float()
    # one float32 step down: a uniform on the grid between the exact cut and its rounding is kept
    kept = u > torch.nextafter(cut, torch.zeros_like(cut))
    flat = torch.from_numpy(np.flatnonzero(kept.numpy()))  # row-major; 4x torch.nonzero's speed here
    if len(flat) < k:  # (practically never: the expected count is k + 6 sqrt(k) + 16 per row)
        return None
    rows = flat // n
    cols = flat - rows * n
    e = u.view(-1)[flat].double().clamp_min_(torch.finfo(torch.float32).tiny).log_().neg_()
    arrival = e.mul_(torch.exp(-shifted[cols])).float()
    packed = (rows << 51) | (arrival.view(torch.int32).long() << 20) | cols
    packed = torch.from_numpy(np.sort(packed.numpy()))  # numpy's SIMD sort: ~4x torch.sort on int64 here
    bounds = torch.searchsorted(packed, torch.arange(g + 1, dtype=torch.int64) << 51)  # row segments
    counts = bounds[1:] - bounds[:-1]
    start = bounds[:-1].clamp_max(len(packed) - k)
    top = packed[start.unsqueeze(1) + torch.arange(k)]  # (g, k)
    order = top & ((1 << 20) - 1)
    last = ((top[:, -1] >> 20) & 0x7FFFFFFF).int().view(torch.float32)  # k-th arrival time per row
    redo = torch.nonzero((counts < k) | (last >= t * (1.0 - 1e-4))).squeeze(1)
    if len(redo):
        order[redo] = torch.topk(race_log_keys(u[redo], shifted), k, dim=1, largest=False, sorted=True).indices
    return order


def plackett_luce_log_prob(logits: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """log P(ordering | L) = sum_t [L_{pi_t} - log Z_t], Z_t = sum of e^L over items not yet drawn.

    Written sequentially and differentiably: the reference the fast score
    function is tested against. Shape (G,) for `order` (G, k).
    """
    out = []
    for row in order:
        available = torch.ones_like(logits, dtype=torch.bool)
        lp = logits.new_zeros(())
        for i in row.tolist():
            lp = lp + logits[i] - torch.logsumexp(logits[available], 0)
            available = available.clone()
            available[i] = False
        out.append(lp)
    return torch.stack(out)


def _log_cumulative_inverse_z(log_p: torch.Tensor, log_rest: torch.Tensor) -> torch.Tensor:
    """log C[j, t] = log sum_{t' <= t} 1 / Z_{j,t'}, shape (G, k).

    log_p: logits of the drawn items in draw order (G, k); log_rest: log of the
    never-drawn mass (G,). Z_t = rest + sum_{t' >= t} e^{L_pi_t'}, summed from the back.
    """
    log_tail = _logcumsumexp_rows(log_p.flip(1)).flip(1)  # log sum_{t' >= t} e^{L_pi_t'}
    log_z = torch.logaddexp(log_rest.unsqueeze(1), log_tail)  # log Z_t
    return _logcumsumexp_rows(-log_z)


def _logcumsumexp_rows(x: torch.Tensor) -> torch.Tensor:
    """torch.logcumsumexp(x, 1) for float64 rows, 4x faster on CPU via a shifted cumsum.

    Each row is shifted by its max, so the partial sums lie in [e^-(spread), k]:
    exact to float64 rounding while a row's spread stays below 600 nats (no
    underflow of a whole prefix); otherwise torch.logcumsumexp is used.
    """
    if x.numel() == 0:
        return x.clone()
    top = x.amax(1, keepdim=True)
    if not bool(((top - x.amin(1, keepdim=True)) < 600.0).all()):
        return torch.logcumsumexp(x, 1)
    return torch.exp(x - top).cumsum_(1).log_().add_(top)


def plackett_luce_score(logits: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """Dense score function grad_L log P(ordering_j | L), shape (G, N), float64.

    For item i: 1[i drawn] - e^{L_i} * sum_{t <= tau_i} 1/Z_t, where tau_i is the
    draw that picked i, or the last draw k if i was never picked (i was then
    available at every draw), and Z_t = sum of e^L over the items still
    available at draw t. Computed in log space: i was available at every draw
    t <= tau_i, so each e^{L_i}/Z_t <= 1 and nothing overflows however far the
    logits have spread; the never-drawn mass is summed over the undrawn items
    themselves (total minus drawn would cancel once the drawn items hold almost
    all of it). O(N + k) per ordering.
    """
    lg = logits.double()
    g, k = order.shape
    rows = torch.arange(g, device=order.device).unsqueeze(1).expand(g, k)
    drawn = torch.zeros((g, lg.shape[0]), dtype=torch.bool, device=lg.device)
    drawn[rows, order] = True
    log_rest = torch.logsumexp(lg.masked_fill(drawn, float("-inf")), 1)
    log_c = _log_cumulative_inverse_z(lg[order], log_rest)
    log_c_tau = log_c[:, -1:].expand_as(drawn).clone()  # never drawn: all k draws
    log_c_tau[rows, order] = log_c  # drawn at t: draws 1..t
    score = -torch.exp(lg.unsqueeze(0) + log_c_tau)
    score[rows, order] += 1.0
    return score


# A mask takes the O(k) sparse path when its terms stay below e^20 (rounding error
# of the base-minus-correction form <= 1e-16 * e^20 ~ 5e-8 per term) and its
# never-drawn mass is not a tiny difference of large numbers.
_SPARSE_MAX_LOG_TERM = 20.0
_SPARSE_MIN_REST = 1e-8


def policy_gradient(logits: torch.Tensor, order: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """(1/G) sum_j A_j grad_L log P(ordering_j | L), shape (N,) float64.

    This is the exact score function of each sampled Plackett-Luce ordering (see
    ``plackett_luce_score``), so sum_j f_j * score_j / G is an *unbiased*
    estimate of grad_L E[f(M)] (Eq. 9): f depends only on the set, and the set
    probability of Eq. 7 is the sum over its orderings. Eq. 10's group-relative
    advantage then subtracts the group mean (a baseline; including the sample's
    own f scales the expectation by (G-1)/G) and divides by the group std (a
    positive step-size factor), as DATAMASK App. A.9 discusses.

    Cost O(N + G k) via cumulative sums: every item first gets the never-drawn
    term of every mask, -e^{L_i} sum_j A_j C_{j,k}, and the G k drawn entries are
    then corrected by a scatter-add. Once the logits have spread so far that
    this base-minus-correction form would lose precision (see the thresholds
    above), those masks use the dense log-space form instead, O(N) each.
    """
    lg = logits.double()
    g, n = order.shape[0], lg.shape[0]
    a = advantages.double()
    m = lg.max()
    w = torch.exp(lg - m)  # (N,) shifted weights
    log_p = lg[order]  # (G, k)
    rest = w.sum() - w[order].sum(1)  # never-drawn mass (shifted), cheap but cancels when tiny
    log_c = _log_cumulative_inverse_z(log_p, torch.log(rest.clamp_min(0.0)) + m)
    log_c_last = log_c[:, -1]
    sparse = (rest > _SPARSE_MIN_REST * w.sum()) & ((log_p + log_c_last.unsqueeze(1)).amax(1) < _SPARSE_MAX_LOG_TERM)

    grad = torch.zeros(n, dtype=torch.float64, device=lg.device)
    if bool(sparse.any()):
        a_s, lp_s, lc_s, lcl_s = a[sparse], log_p[sparse], log_c[sparse], log_c_last[sparse].unsqueeze(1)
        # never-drawn term for all items; exp(log C + m) <= max(k, e^20) on sparse masks
        grad -= w * (a_s * torch.exp(log_c_last[sparse] + m)).sum()
        fix = a_s.unsqueeze(1) * (1.0 - torch.exp(lp_s + lc_s) + torch.exp(lp_s + lcl_s))  # true - base
        grad.index_add_(0, order[sparse].reshape(-1), fix.reshape(-1))
    dense_rows = torch.nonzero(~sparse).squeeze(1)
    step = max(1, (1 << 22) // max(n, 1))  # bound the (rows, N) dense block
    for lo in range(0, len(dense_rows), step):
        r = dense_rows[lo : lo + step]
        grad += (a[r].unsqueeze(1) * plackett_luce_score(lg, order[r])).sum(0)
    return grad / g


def group_advantage(values: torch.Tensor) -> torch.Tensor:
    """Eq. 10: (f_j - mu_G) / sigma_G; all zeros when the group has (numerically) no spread.

    Branch-free (torch.where), so a step never waits for the device.
    """
    v = values.double()
    std = v.std(unbiased=False)
    flat = ~torch.isfinite(std) | (std <= 1e-12 * v.abs().max().clamp_min(1.0))
    return torch.where(flat, torch.zeros_like(v), (v - v.mean()) / torch.where(flat, torch.ones_like(std), std))


def quality_init(quality: torch.Tensor, cfg: DataMaskConfig) -> torch.Tensor:
    """Eq. 13: logits = (q - q_min) / (q_max - q_min) * (l_max - l_min) + l_min (q clipped to its range)."""
    q = quality.double()
    if bool((q < cfg.q_min).any() or (q > cfg.q_max).any()):
        log.warning("quality outside [q_min, q_max] = [%s, %s]; clipped for init", cfg.q_min, cfg.q_max)
    q = q.clamp(cfg.q_min, cfg.q_max)
    return (q - cfg.q_min) / (cfg.q_max - cfg.q_min) * (cfg.l_max - cfg.l_min) + cfg.l_min


def softmax_entropy(logits: torch.Tensor) -> float:
    """Entropy (nats) of softmax(L): logsumexp(L) - sum_i p_i L_i."""
    lg = logits.double()
    p = torch.softmax(lg, 0)
    return float(torch.logsumexp(lg, 0) - (p * lg).sum())


def topk_indices(logits: torch.Tensor, k: int) -> torch.Tensor:
    """The k largest logits, ties to the lower index (deterministic)."""
    return torch.argsort(-logits, stable=True)[:k]


# --- blocks (Sec. 4.3 "Splitting") ---


def plan_blocks(n: int, budget: int, block_size: int, seed: int) -> list[tuple[np.ndarray, int]]:
    """Random blocks of at most `block_size` items, each with its share of the budget.

    One block (in input order) when n <= block_size. Otherwise a seeded random
    permutation is cut into ceil(n / block_size) near-equal blocks, and the budget
    is split in proportion (same keep ratio, exact total). Returns (ids, budget).
    """
    if n <= block_size:
        return [(np.arange(n, dtype=np.int64), budget)]
    n_blocks = -(-n // block_size)
    perm = np.random.default_rng(derive_seed(seed, 3)).permutation(n)
    parts = [np.sort(p) for p in np.array_split(perm, n_blocks)]
    budgets = allocate_budget(budget, [len(p) for p in parts])
    return list(zip(parts, budgets))


@dataclass
class BlockResult:
    indices: np.ndarray  # sorted local ids into the block
    history: pd.DataFrame
    info: dict
    # with full_order: every item of the block in the order of the final draw (Algorithm 1's sampled mask is its
    # first `budget` items; final=topk: the logits' order). A token budget stops the draw at its tokens instead
    order: Optional[np.ndarray] = None


def _fingerprint(n: int, budget: int, seed: int, block_id: int, cfg: DataMaskConfig) -> dict:
    keys = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in _RESUME_FREE_KEYS}
    return {"n": n, "budget": budget, "seed": seed, "block_id": block_id, "sampler": SAMPLER_VERSION, **keys}


def _atomic_save(obj: dict, path: Path) -> None:
    # a kill during the save never leaves a torn checkpoint (one home for atomic writes)
    atomic_write(path, lambda tmp: torch.save(obj, tmp))


def _load_checked(path: Path, fingerprint: dict) -> dict:
    state = torch.load(path, weights_only=True)
    for key, value in fingerprint.items():
        if state["fingerprint"].get(key) != value:
            raise ValueError(
                f"selection config key {key!r}: checkpoint {path} was written with "
                f"{state['fingerprint'].get(key)!r}, this run has {value!r}; use another checkpoint_dir"
            )
    return state


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def run_block(
    embeddings: torch.Tensor,
    quality: torch.Tensor,
    budget: int,
    cfg: DataMaskConfig,
    *,
    seed: int,
    block_id: int = 0,
    progress: Progress = None,
    progress_offset: int = 0,
    progress_total: int | None = None,
    unit_rows: bool = False,
    full_order: bool = False,
) -> BlockResult:
    """Algorithm 1 on one block. `embeddings` (n, d) and `quality` (n,) on the target device.

    ``full_order``: also return the final draw as a whole ordering of the block (``BlockResult.order``:
    the sequential Plackett-Luce draw from softmax(L^E) run to the end, or the logits' order with
    ``final=topk``); the returned mask is its first ``budget`` items. Used by token budgets
    (:mod:`curation.selection.tokens`), which stop the draw at a token count instead.

    ``unit_rows``: the rows are already ``F.normalize(embeddings, dim=1)`` (PWS and facility location
    read only unit vectors), so the objective keeps no normalised copy (see ``Objective``).
    """
    n = embeddings.shape[0]
    device = embeddings.device
    if budget <= 0 or budget >= n:  # nothing to learn
        ids = np.arange(n if budget >= n else 0, dtype=np.int64)
        return BlockResult(ids, pd.DataFrame(), {"block": block_id, "n": n, "budget": budget, "steps_run": 0})

    block_seed = derive_seed(seed, 10, block_id)
    hutchinson = cfg.diversity == "disf" and cfg.disf_estimator == "hutchinson"

    def make_objective(disf_probes: int) -> Objective:
        return Objective(
            embeddings,
            quality,
            diversity=cfg.diversity,
            lam=cfg.lam,
            standardize=cfg.standardize,
            scale_samples=cfg.scale_samples,
            fl_reference_size=cfg.fl_reference_size,
            seed=block_seed,
            disf_probes=disf_probes,
            fl_sims_dtype=cfg.fl_sims_dtype,
            unit_rows=unit_rows,
            disf_scale=cfg.disf_scale,
        )

    objective = make_objective(cfg.disf_probes if hutchinson else 0)
    # the history reports the exact objective (DiSF: -||C||_F), whatever estimator the steps use
    reported = make_objective(0) if hutchinson else objective
    needed = objective.needed_terms()
    if "fl" in needed and objective.reference_sims is None:
        r = min(cfg.fl_reference_size, n)
        log.warning("block %d: the facility-location table of %d items x %d reference points does not fit in 1 GiB "
                    "(fl_sims_dtype %s): every step recomputes the similarities (far slower). For blocks of ~1M "
                    "items set selection.fl_reference_size=1024 (int8 table of 1 GiB), at the coverage cost measured "
                    "in docs/selection.md 'Facility location: reference points'", block_id, n, r, objective.fl_sims_dtype)
    n_b = n if cfg.batch_ratio >= 1.0 else min(n, max(2, round(cfg.batch_ratio * n)))
    s_b = min(n_b - 1, max(1, round(budget * n_b / n)))  # budget scaled by r
    if cfg.diversity == "disf" and (s_b < 2 or budget < 2):
        raise ValueError(
            f"selection config key 'batch_ratio': diversity=disf needs >= 2 items per sampled mask "
            f"(per-set variance), block {block_id} gives {s_b} (budget {budget} of {n}, batch_ratio {cfg.batch_ratio})"
        )

    ckpt = done = None
    fingerprint = _fingerprint(n, budget, seed, block_id, cfg)
    if cfg.checkpoint_dir is not None:
        Path(cfg.checkpoint_dir).mkdir(parents=True, exist_ok=True)
        ckpt = Path(cfg.checkpoint_dir) / f"block_{block_id:05d}.pt"
        done = Path(cfg.checkpoint_dir) / f"block_{block_id:05d}.done.pt"
    if cfg.resume and done is not None and done.exists():
        state = _load_checked(done, fingerprint)
        log.info("block %d: already finished in %s", block_id, done)
        return BlockResult(state["indices"].numpy(), pd.DataFrame(state["history"]), dict(state["info"]))

    gen = torch.Generator(device=device).manual_seed(block_seed)
    if cfg.init == "quality":
        logits = quality_init(quality, cfg).to(device)
    else:
        logits = torch.zeros(n, dtype=torch.float64, device=device)
    start, elapsed_before, rows = 0, 0.0, []
    if cfg.resume and ckpt is not None and ckpt.exists():
        state = _load_checked(ckpt, fingerprint)
        start, elapsed_before, rows = int(state["step"]), float(state["elapsed"]), list(state["history"])
        logits = state["logits"].to(device)
        gen.set_state(state["rng_state"])
        log.info("block %d: resumed at step %d from %s", block_id, start, ckpt)

    log.info(
        "block %d: %d items, budget %d; each of %d steps samples %d masks of %d from %d items",
        block_id, n, budget, cfg.steps - start, cfg.group_size, s_b, n_b,
    )
    t0 = time.perf_counter()

    def record(step: int, group_f: torch.Tensor | None, returned: torch.Tensor | None = None) -> None:
        # during the run the current top-S is evaluated (no RNG draw, so history
        # never changes the run); the final row evaluates the returned mask
        sel = (topk_indices(logits, budget) if returned is None else returned).unsqueeze(0)
        terms = reported.terms(sel)
        rows.append(
            {
                "block": block_id,
                "step": step,
                "mask": "topk" if returned is None else "returned",
                "joint": float(reported.combine(terms, budget)[0]),
                "quality": float(terms["quality"][0]),
                "diversity": float(terms[cfg.diversity][0]),
                "group_joint_mean": float(group_f.mean()) if group_f is not None else float("nan"),
                "group_joint_std": float(group_f.std(unbiased=False)) if group_f is not None else float("nan"),
                "entropy": softmax_entropy(logits),
                "wall_time_s": elapsed_before + time.perf_counter() - t0,
            }
        )
        log.debug("block %d step %d: %s", block_id, step, rows[-1])

    if start == 0:
        record(0, None)
    total = progress_total if progress_total is not None else cfg.steps
    per_epoch = max(1, n // n_b)
    perm, perm_epoch = None, -1
    for step in range(start, cfg.steps):
        batch = None
        if n_b < n:
            epoch, slot = divmod(step, per_epoch)
            if epoch != perm_epoch:  # derived from (seed, epoch): a resumed run gets the same batches
                perm_gen = torch.Generator(device=device).manual_seed(derive_seed(block_seed, 4, epoch))
                perm, perm_epoch = torch.randperm(n, generator=perm_gen, device=device), epoch
            batch = perm[slot * n_b : (slot + 1) * n_b]
        logits_b = logits if batch is None else logits[batch]
        order = gumbel_top_k(logits_b, s_b, cfg.group_size, gen)  # (G, S_b) ids into the batch
        objective.disf_probe_seed = derive_seed(block_seed, 6, step) if hutchinson else None
        f = objective.combine(objective.terms(order, needed, within=batch), s_b, n_b)  # (G,)
        grad = policy_gradient(logits_b, order, group_advantage(f))
        if batch is None:
            logits += cfg.lr * grad
        else:
            logits.index_add_(0, batch, cfg.lr * grad)  # batch ids are distinct
        done_steps = step + 1
        if done_steps % cfg.history_every == 0 or done_steps == cfg.steps:
            record(done_steps, f.double())
        if ckpt is not None and cfg.checkpoint_every > 0 and done_steps % cfg.checkpoint_every == 0:
            _atomic_save(
                {
                    "step": done_steps,
                    "logits": logits.cpu(),
                    "rng_state": gen.get_state(),
                    "history": rows,
                    "elapsed": elapsed_before + time.perf_counter() - t0,
                    "fingerprint": fingerprint,
                },
                ckpt,
            )
        if progress is not None:
            progress(progress_offset + done_steps, total)

    order = None
    if full_order:  # the whole draw, one item after another (the mask is its first `budget` items)
        order = (torch.argsort(logits, descending=True, stable=True) if cfg.final == "topk"
                 else gumbel_top_k(logits, n, 1, gen)[0])
        local = order[:budget]
    elif cfg.final == "topk":
        local = topk_indices(logits, budget)
    else:  # Algorithm 1: sample the final mask from softmax(L^E)
        local = gumbel_top_k(logits, budget, 1, gen)[0]
    record(cfg.steps, None, local)
    indices = np.sort(local.cpu().numpy().astype(np.int64))
    info = {
        "block": block_id,
        "n": n,
        "budget": budget,
        "batch_items": n_b,
        "batch_budget": s_b,
        "steps_run": cfg.steps - start,
        "resumed_from_step": start,
        "final_entropy": softmax_entropy(logits),
        "logit_min": float(logits.min()),
        "logit_max": float(logits.max()),
        **policy_health(pd.DataFrame(rows), softmax_entropy(logits), cfg.steps),
    }
    if info["warned"]:
        log.warning("block %d: %s", block_id, health_message(info, cfg))
    if done is not None:
        _atomic_save(
            {"indices": torch.from_numpy(indices), "history": rows, "info": info, "fingerprint": fingerprint},
            done,
        )
    return BlockResult(indices, pd.DataFrame(rows), info,
                       order.cpu().numpy().astype(np.int64) if order is not None else None)


def policy_health(history: pd.DataFrame, final_entropy: float, steps: int) -> dict:
    """Did the returned mask keep what the logits learned, and did learning stop early? (issue #20)

    ``best_topk_joint``: the best joint objective among the recorded top-S masks of the run;
    ``returned_joint``: the mask returned; ``returned_shortfall`` = (best - returned) / |best|
    (0 when the returned mask is at least as good); ``collapse_step``: the first recorded step at
    which the entropy of softmax(L) was below ``COLLAPSE_ENTROPY_NATS`` (-1: never).

    A low entropy alone is not harmful with an exact sampler: once the selected set is settled the
    logits *within* it drift freely (they barely change the set's probability), so one of them can
    take all of the first draw's mass while the masks still draw the same set (measured: N = 100k,
    lr 10, 6,000 steps, entropy 2e-4, returned mask within 0.1% of the best top-S). Flags (1.0 / 0.0,
    so they are metrics): ``collapsed``: final entropy below the threshold; ``premature``: it fell
    below in the first half of the run (the step size locked the policy in before it learned: the
    lr >= 100 runs of Fig. 14); ``below_topk``: shortfall above ``RETURNED_SHORTFALL_WARN``;
    ``warned``: premature or below_topk.
    """
    topk = history[history["mask"] == "topk"] if len(history) else history
    returned = history[history["mask"] == "returned"] if len(history) else history
    low = topk[topk["entropy"] < COLLAPSE_ENTROPY_NATS] if len(topk) else topk
    collapse_step = int(low["step"].iloc[0]) if len(low) else (steps if final_entropy < COLLAPSE_ENTROPY_NATS else -1)
    premature = 0 <= collapse_step <= steps // 2
    out = {"collapsed": float(final_entropy < COLLAPSE_ENTROPY_NATS), "collapse_step": float(collapse_step),
           "premature": float(premature), "below_topk": 0.0, "warned": float(premature)}
    if len(topk) and len(returned):
        best, ret = float(topk["joint"].max()), float(returned["joint"].iloc[-1])
        shortfall = max(0.0, best - ret) / max(abs(best), 1e-12)
        below = shortfall > RETURNED_SHORTFALL_WARN
        out.update({"best_topk_joint": best, "returned_joint": ret, "returned_shortfall": shortfall,
                    "below_topk": float(below), "warned": float(premature or below)})
    return out


def health_message(info: dict, cfg: DataMaskConfig | None = None) -> str:
    """One paragraph a user can act on when ``policy_health`` flags a block."""
    parts = []
    if info.get("premature"):
        parts.append(f"the DataMask policy collapsed at step {int(info.get('collapse_step', -1))}: the entropy of "
                     f"softmax(L) fell below {COLLAPSE_ENTROPY_NATS} nats in the first half of the run (now "
                     f"{info.get('final_entropy', float('nan')):.3g}; the logits span "
                     f"{info.get('logit_max', 0) - info.get('logit_min', 0):.1f} nats), so learning stopped early")
    if info.get("below_topk"):
        parts.append(f"the returned (sampled) mask's objective is {100 * info.get('returned_shortfall', 0.0):.1f}% "
                     f"below the best top-S mask of the learned logits (warn above {100 * RETURNED_SHORTFALL_WARN:g}%)")
    lr = f" (now {cfg.lr:g})" if cfg is not None else ""
    return ("; ".join(parts) + ". selection.final=topk returns the top-S of the learned logits; a lower "
            f"selection.lr{lr} keeps the policy from collapsing (docs/selection.md, 'When the policy collapses').")


def summarize_blocks(infos: list[dict]) -> dict:
    """Run-level policy health over blocks (for metrics and the run summary)."""
    infos = [i for i in infos if "final_entropy" in i]
    if not infos:
        return {}
    return {
        "final_entropy_min": min(float(i["final_entropy"]) for i in infos),
        "logit_range_max": max(float(i["logit_max"]) - float(i["logit_min"]) for i in infos),
        "returned_shortfall_max": max(float(i.get("returned_shortfall", 0.0)) for i in infos),
        "blocks_collapsed": float(sum(float(i.get("collapsed", 0.0)) for i in infos)),
        "blocks_premature": float(sum(float(i.get("premature", 0.0)) for i in infos)),
        "blocks_below_topk": float(sum(float(i.get("below_topk", 0.0)) for i in infos)),
        "blocks_warned": float(sum(float(i.get("warned", 0.0)) for i in infos)),
    }


def select_datamask(
    embeddings: torch.Tensor,
    quality: torch.Tensor,
    budget: int,
    cfg: DataMaskConfig,
    *,
    seed: int = 0,
    progress: Progress = None,
    full_order: bool = False,
) -> tuple[np.ndarray, pd.DataFrame, dict]:
    """Algorithm 1 over all blocks, one after the other; returns (ids, history, info). ``full_order`` (one
    block only): ``info["order"]`` is the final draw as a whole ordering (:func:`run_block`)."""
    device = resolve_device(cfg.device)
    plan = plan_blocks(embeddings.shape[0], budget, cfg.block_size, seed)
    if full_order and len(plan) > 1:
        raise ValueError(f"full_order needs one block: {embeddings.shape[0]} items > selection.block_size "
                         f"{cfg.block_size}")
    picked, histories, blocks = [], [], []
    for block_id, (ids, block_budget) in enumerate(plan):
        sel = torch.from_numpy(ids).to(embeddings.device)
        result = run_block(
            embeddings[sel].to(device),
            quality[sel].to(device),
            block_budget,
            cfg,
            seed=seed,
            block_id=block_id,
            progress=progress,
            progress_offset=block_id * cfg.steps,
            progress_total=len(plan) * cfg.steps,
            full_order=full_order,
        )
        picked.append(ids[result.indices])
        histories.append(result.history)
        blocks.append(result.info)
    history = pd.concat(histories, ignore_index=True) if any(len(h) for h in histories) else pd.DataFrame()
    info = {"n_blocks": len(plan), **summarize_blocks(blocks), "blocks": blocks}
    if full_order:
        info["order"] = plan[0][0][result.order]
    return np.sort(np.concatenate(picked)), history, info
