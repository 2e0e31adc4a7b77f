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
line), or, if configured, is the top-S of L (``final: topk``) or the best top-S mask
the history recorded during the run (``final: best``, by the joint objective; the
logits of that row are kept). History rows (always the exact
objective, also when ``disf_estimator: hutchinson`` drives the steps) during the run
evaluate the current top-S (no RNG draw, so recording never changes the run);
the last row (``mask == "returned"``) is the value of the mask actually returned. The corpus is split into random
blocks of ``block_size`` items with the same keep ratio (Sec. 4.3 "Splitting");
blocks are independent (``plan_blocks`` + ``run_block`` can run in separate
processes or devices). Every ``checkpoint_every`` steps the logits and the RNG
state are saved, and ``resume=True`` continues to the same selection an
uninterrupted run with the same seed makes.

This module is the block driver (Sec. 4.3 "Splitting", checkpoints, Eq. 13's initialisation); the
sampler of Eq. 7 is :mod:`curation.selection.datamask_sampler`, the policy update of Eq. 9-11
:mod:`curation.selection.datamask_policy` and the policy health checks (issue #20)
:mod:`curation.selection.datamask_health`. Their public names are re-exported here.
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
from curation.selection.datamask_health import (  # re-exported
    COLLAPSE_ENTROPY_NATS,
    RETURNED_SHORTFALL_WARN,
    health_message,
    policy_health,
    softmax_entropy,
    summarize_blocks,
)
from curation.selection.datamask_policy import (  # re-exported
    group_advantage,
    plackett_luce_log_prob,
    plackett_luce_score,
    policy_gradient,
)
from curation.selection.datamask_sampler import (  # re-exported; run_block and _fingerprint read
    # gumbel_top_k and SAMPLER_VERSION as names of this module (a test or benchmark may patch them here)
    SAMPLER_VERSION,
    _race_winners,
    gumbel_top_k,
    race_log_keys,
)
from curation.selection.objectives import Objective, derive_seed
from curation.selection.progress import report_values

log = logging.getLogger(__name__)

# progress(done, total) after every step; a callback with a ``values(done, total, values)`` method also gets
# the joint objective and its terms every history_every steps (curation.selection.progress)
Progress = Optional[Callable[[int, int], None]]

# Config keys that do not change the optimisation and may differ on resume.
_RESUME_FREE_KEYS = {"checkpoint_every", "checkpoint_dir", "resume", "history_every", "device"}


def quality_init(quality: torch.Tensor, cfg: DataMaskConfig) -> torch.Tensor:
    """Eq. 13: logits = (q - q_min) / (q_max - q_min) * (l_max - l_min) + l_min (q clipped to its range)."""
    q = quality.double()
    if bool((q < cfg.q_min).any() or (q > cfg.q_max).any()):
        log.warning("quality outside [q_min, q_max] = [%s, %s]; clipped for init", cfg.q_min, cfg.q_max)
    q = q.clamp(cfg.q_min, cfg.q_max)
    return (q - cfg.q_min) / (cfg.q_max - cfg.q_min) * (cfg.l_max - cfg.l_min) + cfg.l_min


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
    # first `budget` items; final=topk: the logits' order; best: the best recorded row's). A token budget stops the
    # draw at its tokens instead
    order: Optional[np.ndarray] = None


def _fingerprint(n: int, budget: int, seed: int, block_id: int, cfg: DataMaskConfig) -> dict:
    # final=best returns the best recorded row, so there history_every changes the selection
    free = _RESUME_FREE_KEYS - {"history_every"} if cfg.final == "best" else _RESUME_FREE_KEYS
    keys = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in free}
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
    ``final=topk``, the best recorded row's logits' order with ``final=best``); the returned mask is its first
    ``budget`` items. Used by token budgets
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
    # final=best: the logits of the best recorded top-S row (its joint, step): the returned mask is their top-S
    keep_best = cfg.final == "best"
    best: dict = {"joint": float("-inf"), "step": -1, "logits": None}
    if cfg.resume and ckpt is not None and ckpt.exists():
        state = _load_checked(ckpt, fingerprint)
        start, elapsed_before, rows = int(state["step"]), float(state["elapsed"]), list(state["history"])
        logits = state["logits"].to(device)
        gen.set_state(state["rng_state"])
        if keep_best:
            best = {"joint": float(state["best_joint"]), "step": int(state["best_step"]),
                    "logits": state["best_logits"].to(device)}
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
        if keep_best and returned is None and rows[-1]["joint"] > best["joint"]:  # the first of equal rows
            best.update(joint=rows[-1]["joint"], step=step, logits=logits.clone())
        if returned is None:  # the objective so far, to a bar's postfix or an MLflow step metric
            report_values(progress, progress_offset + step, total,
                          {key: rows[-1][key] for key in ("joint", "quality", "diversity")})

    total = progress_total if progress_total is not None else cfg.steps
    if start == 0:
        record(0, None)
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
                    **({"best_joint": best["joint"], "best_step": best["step"], "best_logits": best["logits"].cpu()}
                       if keep_best else {}),
                },
                ckpt,
            )
        if progress is not None:
            progress(progress_offset + done_steps, total)

    order = None
    # final=best ranks by the logits of the best recorded row (its top-S is that row's mask), topk by the last ones
    ranked = best["logits"] if keep_best and best["logits"] is not None else logits
    if full_order:  # the whole draw, one item after another (the mask is its first `budget` items)
        order = (torch.argsort(ranked, descending=True, stable=True) if cfg.final in ("topk", "best")
                 else gumbel_top_k(logits, n, 1, gen)[0])
        local = order[:budget]
    elif cfg.final in ("topk", "best"):
        local = topk_indices(ranked, budget)
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
        **({"returned_step": float(best["step"])} if keep_best else {}),
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
