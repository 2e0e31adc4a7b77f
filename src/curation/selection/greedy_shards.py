"""Greedy DiSF streamed from a sharded pruned corpus: one batch of candidates in memory at a time.

DiSF Algorithm 1 (seeds/001) cuts the candidates into contiguous batches of b items (1,024 by default) and
picks each batch's share of the budget looking at that batch alone. When the objective of a batch reads only
that batch's rows (:func:`batch_local`: per-set DiSF or PWS, without Eq. 12's random-subset standardisation of
two terms), a batch can be gathered from the memory-mapped embedding shards, picked and let go, so the pool
is never held whole and :data:`curation.selection.sharded.MAX_ITEMS` does not apply. The batches, their
budgets and their random first picks are planned once by :func:`curation.selection.greedy.plan_greedy`, the
plan :func:`~curation.selection.greedy.select_greedy` follows in memory, so the picks are the in-memory ones
(a test checks it on real embeddings). Facility location (reference points drawn from the whole pool) and
block-standardised DiSF are not batch-local and keep the in-memory path and its limit.

Batches run in chunks of about ``chunk_rows`` candidates; a finished chunk is written to
``<work>/greedy/`` with a completion marker, so a killed run resumes at the first unfinished chunk.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import pandas as pd

from curation.cache import atomic_write, atomic_write_text, save_npy
from curation.selection.budget import kept_by_min_quality
from curation.selection.config import GreedyConfig

log = logging.getLogger(__name__)

CHUNK_ROWS = 1 << 16  # candidates gathered at a time: 96 MiB of float32 rows at d = 384


def batch_local(cfg: GreedyConfig) -> bool:
    """Whether each greedy batch's objective reads only that batch's rows (so batches can stream)."""
    one_term = cfg.lam in (0.0, 1.0)
    return cfg.diversity in ("disf", "pws") and (not cfg.standardize or one_term)


def run_greedy_batches(quality: np.ndarray, positions: np.ndarray, pruned_embeddings: Any, budget: int,
                       cfg: GreedyConfig, seed: int, work: str | Path, *, chunk_rows: int = CHUNK_ROWS,
                       progress: Optional[Callable[[int, int], None]] = None) -> tuple[np.ndarray, pd.DataFrame,
                                                                                       dict]:
    """Greedy over the candidates at global ``positions`` (sorted; ``quality`` aligned), batch by batch from
    the shards. Returns (selected global positions, sorted; history; info) as :func:`curation.selection.select`
    returns them for the gathered pool, after its in-place ``min_quality`` pruning."""
    from curation.selection.api import _objective
    from curation.selection.greedy import greedy_batch_size, pick_batch, plan_greedy
    from curation.selection.sharded import check_scale, gather_rows

    if not batch_local(cfg):
        raise ValueError(f"greedy with diversity={cfg.diversity!r}, standardize={cfg.standardize}, lam={cfg.lam} "
                         "reads the whole pool in each batch: it cannot stream")
    q = np.asarray(quality, dtype=np.float64)
    kept = kept_by_min_quality(q, cfg.min_quality, budget)
    plan = plan_greedy(len(kept), budget, cfg, seed)
    b = greedy_batch_size(len(kept), cfg)
    check_scale("greedy", b, cfg.max_items)  # one batch is held whole (PWS's default batch is the whole pool)
    per_chunk = max(1, chunk_rows // b)
    chunks = [plan[i:i + per_chunk] for i in range(0, len(plan), per_chunk)]
    folder = _work_folder(Path(work) / "greedy", {"candidates": len(kept), "budget": int(budget), "batch": b,
                                                   "batches_per_chunk": per_chunk})
    # one batch's objective in the precision select() gives the whole pool (float32 only for pure per-set DiSF)
    import torch

    own = cfg.diversity == "disf" and cfg.impl != "reference" and cfg.lam == 0.0
    dtype = torch.float32 if own else torch.float64
    started, done_batches, resumed = time.perf_counter(), 0, 0
    for c, chunk in enumerate(chunks):
        marker = folder / f"chunk_{c:05d}.done.json"
        if marker.is_file():
            resumed += 1
        else:
            lo, hi = chunk[0][0], chunk[-1][0] + chunk[-1][1]
            rows = gather_rows(pruned_embeddings, np.asarray(positions, dtype=np.int64)[kept[lo:hi]])
            picked, history = [], []
            for start, size, s_i, first in chunk:
                obj = _objective(rows[start - lo:start - lo + size], q[kept[start:start + size]], cfg, seed, "cpu",
                                 dtype)
                ids, evaluations = pick_batch(obj, np.arange(size, dtype=np.int64), s_i, first, cfg)
                picked.append(ids + start)
                if 0 < s_i < size:
                    history.append({"batch": start // b, "candidates": size, "budget": s_i,
                                    "evaluations": evaluations, "wall_time_s": time.perf_counter() - started})
            del rows
            chosen = np.concatenate(picked) if picked else np.empty(0, dtype=np.int64)
            atomic_write(folder / f"chunk_{c:05d}.selected.npy", lambda p: save_npy(p, chosen))
            atomic_write(folder / f"chunk_{c:05d}.history.parquet",
                         lambda p: pd.DataFrame(history).to_parquet(p, index=False))
            atomic_write_text(marker, json.dumps({"batches": len(chunk)}))
        done_batches += len(chunk)
        if progress is not None:
            progress(done_batches, len(plan))
        log.info("greedy: %d of %d batches (%d of %d chunks%s)", done_batches, len(plan), c + 1, len(chunks),
                 f", {resumed} read back from an earlier run" if resumed else "")
    picked = [np.load(folder / f"chunk_{c:05d}.selected.npy") for c in range(len(chunks))]
    histories = [pd.read_parquet(folder / f"chunk_{c:05d}.history.parquet") for c in range(len(chunks))]
    local = np.sort(np.concatenate(picked)) if picked else np.empty(0, dtype=np.int64)
    if len(local) != budget or len(np.unique(local)) != budget:
        raise RuntimeError(f"greedy batches returned {len(np.unique(local))} unique of {len(local)} positions, "
                           f"budget {budget}")
    history = pd.concat([h for h in histories if len(h)], ignore_index=True) if any(len(h) for h in histories) \
        else pd.DataFrame()
    evaluations = int(history["evaluations"].sum()) if len(history) else 0
    info = {"batch_size": b, "n_batches": len(plan), "evaluations": evaluations, "impl": cfg.impl,
            "streamed_chunks": len(chunks), "chunks_resumed": resumed, "dropped_min_quality": len(q) - len(kept)}
    return np.asarray(positions, dtype=np.int64)[kept[local]], history, info


def _work_folder(folder: Path, plan: dict) -> Path:
    """``folder``, emptied first if an earlier run there chunked another plan (its chunks would not line up)."""
    meta = folder / "plan.json"
    if folder.is_dir() and (not meta.is_file() or json.loads(meta.read_text()) != plan):
        log.info("greedy: %s holds chunks of another plan; starting over", folder)
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if not meta.is_file():
        atomic_write_text(meta, json.dumps(plan))
    return folder
