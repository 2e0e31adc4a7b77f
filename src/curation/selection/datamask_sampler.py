"""DATAMASK (seeds/000, Sec. 3, Algorithm 1) step 2: the mask sampler of Eq. 7.

G masks of k items are drawn *without replacement* from softmax(L), all G at once, by an
exponential race (equivalent to Gumbel-top-k, whose key order is the draw order: a sequential
Plackett-Luce draw). Exact at every spread of the logits (issue #20: no e^80 cap): the log-space
keys in float64 (``race_log_keys``), and on CPU a filtered race that computes arrival times only
for the items that can be among the first k (``_race_winners``). ``SAMPLER_VERSION`` names this
arithmetic in every checkpoint (:mod:`curation.selection.datamask` refuses to resume another's).
"""

from __future__ import annotations

import numpy as np
import torch

# The sampler's arithmetic (issue #20: exact race, no e^80 cap); a checkpoint written by
# another version is refused on resume instead of being continued with other draws.
SAMPLER_VERSION = "exact-race-v2"


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
