"""Split a selection budget over parts (blocks, batches) so that it is hit exactly."""

from __future__ import annotations

import numpy as np


def allocate_budget(budget: int, sizes: list[int]) -> list[int]:
    """Per-part budgets proportional to `sizes`, summing exactly to `budget`.

    Largest-remainder rounding (ties to the earlier part), each part capped at its
    size: the same keep ratio everywhere up to one item. DATAMASK Sec. 4.3 keeps
    the ratio per block; DiSF Algorithm 1 floors b*S/|D| per batch and so misses
    the budget by up to one item per batch, which this avoids.
    """
    total = int(sum(sizes))
    if not 0 <= budget <= total:
        raise ValueError(f"budget {budget} must be in [0, {total}]")
    if total == 0:
        return [0 for _ in sizes]
    exact = np.asarray(sizes, dtype=np.float64) * budget / total
    out = np.floor(exact).astype(np.int64)
    remainder = exact - out
    # stable sort: on equal remainders the earlier part gets the extra item
    for i in np.argsort(-remainder, kind="stable")[: budget - int(out.sum())]:
        out[i] += 1
    out = np.minimum(out, sizes)
    # capping can only bind when budget == total; top up wherever room is left
    short = budget - int(out.sum())
    for i in range(len(sizes)):
        take = min(short, sizes[i] - int(out[i]))
        out[i] += take
        short -= take
    return [int(x) for x in out]


def kept_by_min_quality(quality: np.ndarray, min_quality: float | None, budget: int | None = None) -> np.ndarray:
    """The positions (int64, ascending) that DATAMASK Sec. 4.3's in-place pruning keeps: quality >=
    ``min_quality``, every position when it is None. With a count ``budget``, refuse one that does not leave
    a choice among the kept candidates (0 < budget < kept)."""
    quality = np.asarray(quality)
    kept = np.arange(len(quality), dtype=np.int64) if min_quality is None else \
        np.flatnonzero(quality >= min_quality).astype(np.int64)
    if budget is not None and not 0 < budget < len(kept):
        raise ValueError(f"budget {budget} must be in (0, {len(kept)}): {len(kept)} of {len(quality)} candidates "
                         f"have quality >= the selection config key 'min_quality' ({min_quality})")
    return kept
