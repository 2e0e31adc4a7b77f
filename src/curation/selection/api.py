"""``select(method, *, quality, embeddings, budget, config, seed) -> Selection``.

Checks the inputs, prunes in place by ``min_quality`` (DATAMASK Sec. 4.3),
dispatches to one method and maps the result back to the caller's ids.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

import numpy as np
import pandas as pd
import torch

from curation.selection.baselines import select_random, select_topk_quality
from curation.selection.budget import kept_by_min_quality
from curation.selection.config import (
    DataMaskConfig,
    DvrlConfig,
    GreedyConfig,
    ObjectiveConfig,
    SelectionConfig,
    SemDeDupConfig,
    parse_selection_config,
)
from curation.selection.datamask import resolve_device, select_datamask
from curation.selection.dvrl import select_dvrl
from curation.selection.greedy import select_greedy
from curation.selection.objectives import Objective
from curation.selection.semdedup import select_semdedup

log = logging.getLogger(__name__)


@dataclass
class Selection:
    """The chosen ids and how they were found."""

    indices: np.ndarray  # sorted int64 ids into the input arrays, exactly `budget` unique
    history: pd.DataFrame = field(default_factory=pd.DataFrame)  # one row per recorded step
    info: dict = field(default_factory=dict)  # method, config, counts, timings


def _as_array(name: str, value: Any, ndim: int) -> np.ndarray:
    arr = value.detach().cpu().numpy() if torch.is_tensor(value) else np.asarray(value)
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.complexfloating):
        raise ValueError(f"{name} must be real numbers, got dtype {arr.dtype}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or inf ({int((~np.isfinite(arr)).sum())} values)")
    return arr


def _check_budget(budget: Any, n: int) -> int:
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)):
        raise ValueError(f"budget must be an int, got {budget!r}")
    if budget <= 0:
        raise ValueError(f"budget must be > 0, got {budget}")
    if budget >= n:
        raise ValueError(f"budget must be < the number of items ({n}), got {budget}")
    return int(budget)


def _tensor(x: np.ndarray, dtype, device=None) -> "torch.Tensor":
    """``torch.as_tensor(x, dtype, device)``. A read-only array (a memory-mapped or Arrow-backed column) is made
    writable first, converted to ``dtype`` by numpy (one copy, the one a conversion makes anyway): torch warns of
    "undefined behavior" for any read-only input, even one it copies."""
    x = np.asarray(x)
    if not x.flags.writeable:
        try:
            x = x.astype(torch.empty(0, dtype=dtype).numpy().dtype)  # astype copies, dtype equal or not
        except TypeError:  # a torch dtype numpy lacks (bfloat16)
            x = x.copy()
    return torch.as_tensor(x, dtype=dtype, device=device)


def _objective(emb: np.ndarray, q: np.ndarray, cfg: ObjectiveConfig, seed: int, device, dtype) -> Objective:
    return Objective(
        _tensor(emb, dtype, device),
        _tensor(q, dtype, device),
        diversity=cfg.diversity,
        lam=cfg.lam,
        standardize=cfg.standardize,
        scale_samples=cfg.scale_samples,
        fl_reference_size=cfg.fl_reference_size,
        seed=seed,
        disf_scale=cfg.disf_scale,
    )


def select(
    method: str,
    *,
    quality,
    embeddings,
    budget: int,
    config: Mapping[str, Any] | SelectionConfig | None = None,
    seed: int = 0,
    progress: Optional[Callable[[int, int], None]] = None,
    full_order: bool = False,
) -> Selection:
    """Select exactly `budget` of the N items with `method`.

    quality: (N,) scores (DATAMASK uses 0-15); embeddings: (N, d); config: a
    mapping of the method's knobs (see ``conf/selection/<method>.yaml``; missing
    keys take the defaults); progress: optional callback(done, total).
    Raises ValueError for invalid inputs or config values (naming the key).
    """
    cfg = parse_selection_config(method, config)
    emb = _as_array("embeddings", embeddings, 2)
    q = _as_array("quality", quality, 1)
    if len(q) != len(emb):
        raise ValueError(f"quality has {len(q)} items but embeddings has {len(emb)}")
    n_input = len(emb)
    budget = _check_budget(budget, n_input)

    # quality-aware pruning in place (DATAMASK Sec. 4.3)
    kept = kept_by_min_quality(q, cfg.min_quality, budget)
    if cfg.min_quality is not None:
        emb, q = emb[kept], q[kept]

    t0 = time.perf_counter()
    history, extra = pd.DataFrame(), {}
    if isinstance(cfg, DataMaskConfig):
        device = resolve_device(cfg.device)
        local, history, extra = select_datamask(
            _tensor(emb, torch.float32),
            _tensor(q, torch.float32),
            budget,
            cfg,
            seed=seed,
            progress=progress,
            full_order=full_order,
        )
        extra["device"] = str(device)
        if full_order:  # DataMask's final draw as a whole ordering, in the caller's ids (token budgets)
            extra["order"] = kept[extra["order"]]
    elif isinstance(cfg, GreedyConfig):
        # pure per-set DiSF (fast / official, lam 0) reads the features in their own precision (float32
        # screen, float64 re-score of a few rows): no float64 copy of the whole (N, d) input. With lam > 0
        # the quality term stays float64 (Objective casts quality to the features' dtype).
        own = (cfg.diversity == "disf" and cfg.impl != "reference" and cfg.lam == 0.0
               and emb.dtype in (np.float32, np.float64))
        obj = _objective(emb, q, cfg, seed, "cpu", torch.from_numpy(emb[:0]).dtype if own else torch.float64)
        local, history, extra = select_greedy(obj, budget, cfg, seed=seed, progress=progress)
    elif isinstance(cfg, DvrlConfig):
        obj = _objective(emb, q, cfg, seed, resolve_device(cfg.device), torch.float32)
        local, history, extra = select_dvrl(obj, budget, cfg, seed=seed, progress=progress)
    elif isinstance(cfg, SemDeDupConfig):
        local, extra = select_semdedup(emb, q, budget, cfg, seed=seed)
    elif cfg.method == "topk_quality":
        local = select_topk_quality(q, budget)
    else:
        local = select_random(len(q), budget, seed)
    indices = np.sort(kept[local]).astype(np.int64)

    # the contract, checked rather than hoped for
    if len(indices) != budget or len(np.unique(indices)) != budget:
        raise RuntimeError(f"{method} returned {len(np.unique(indices))} unique of {len(indices)} ids, budget {budget}")
    info = {
        "method": method,
        "config": dataclasses.asdict(cfg),
        "seed": seed,
        "n_input": n_input,
        "n_candidates": len(kept),
        "dropped_min_quality": n_input - len(kept),
        "budget": budget,
        "wall_time_s": time.perf_counter() - t0,
        **extra,
    }
    log.info("%s selected %d of %d items in %.2fs", method, budget, n_input, info["wall_time_s"])
    return Selection(indices=indices, history=history, info=info)
