"""The selection pipeline's pick on shards (issue #14 item 5), with bounded memory.

The same pick as :func:`curation.selection.corpus_pick.run_selection` (DATAMASK Sec. 4.3: the method
on the pruned corpus, same candidate pool and budget) on sharded inputs: DataMask's blocks (Algorithm
1, Sec. 4.3 "Splitting") run as independent, resumable block tasks (:mod:`curation.selection.sharded`),
``topk_quality`` / ``random`` read only the quality column, greedy DiSF streams its batches
(:mod:`curation.selection.greedy_shards`), the other in-memory methods gather the pool's embeddings up to
``selection.max_items``; a token budget solves the mask size that holds it
(:mod:`curation.selection.tokens`). The selected documents are written per documents shard, and a
finished run is read back from its work folder (``selection_key`` names it in the result cache).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

import numpy as np
import pandas as pd

from curation.cache import config_key
from curation.selection.budget import kept_by_min_quality
from curation.selection.corpus_budget import candidate_pool, resolve_budget
from curation.selection.corpus_pick import _selected_frame, check_score_column

log = logging.getLogger(__name__)


@dataclass
class ShardSelectionRun:
    """The result of :func:`run_selection_shards`: ``selected_documents`` is a sharded dataset."""

    selected_ids: pd.DataFrame
    selected_documents: Any  # curation.shards.ShardedDataset
    history: pd.DataFrame
    metrics: dict[str, float]


SELECTION_VERSION = "selection-shards-v3"  # v2: the exact DataMask sampler (issue #20); v3: n_tokens (#38)


def selection_key(pruned_scores: Any, pruned_embeddings: Any, documents: Any, selection: Mapping[str, Any],
                  budget: Mapping[str, Any], seed: int) -> str:
    """Result-cache key of a sharded selection: its config and the fingerprints of its inputs
    (``block_workers``, ``device``, ``max_items`` and the checkpoint keys change where and how it runs, not
    what it selects; on shards DataMask always checkpoints into the stage folder and resumes from it)."""
    free = ("block_workers", "device", "max_items", "checkpoint_dir", "resume")
    config = {k: v for k, v in dict(selection).items() if k not in free}
    return config_key(SELECTION_VERSION, config, dict(budget), int(seed), pruned_scores.fingerprint,
                      pruned_embeddings.fingerprint, documents.fingerprint)


def run_selection_shards(pruned_scores: Any, pruned_embeddings: Any, documents: Any,
                         selection: Mapping[str, Any], budget: Mapping[str, Any], seed: int, work: Any, *,
                         engine: Any = None, in_process_blocks: Optional[bool] = None,
                         progress: Optional[Callable[[int, int], None]] = None) -> ShardSelectionRun:
    """:func:`run_selection` on sharded inputs with bounded memory (:mod:`curation.selection.sharded`).

    The candidate pool and the budget are those of :func:`run_selection` (same seed, same
    ``budget.candidates`` subsample). ``datamask`` runs as independent block tasks;
    ``topk_quality`` / ``random`` read only the quality column; greedy with a batch-local objective (DiSF,
    PWS) streams its batches; the other in-memory methods gather the pool's embeddings and refuse past
    ``selection.max_items``. ``selected_documents`` is written per documents
    shard, in document order. ``work`` (a result-cache entry or staging folder) holds the block
    checkpoints and outputs: a killed run resumes, a finished one is read back (``selection_cache_hit``).
    """
    from pathlib import Path

    from curation.selection.baselines import select_random
    from curation.selection.config import parse_selection_config
    from curation.selection.greedy_shards import batch_local, run_greedy_batches
    from curation.selection.sharded import (
        check_scale,
        check_selection_inputs,
        gather_rows,
        read_ids,
        read_quality,
        run_datamask_blocks,
        topk_positions,
        write_selected_documents,
    )
    from curation.shards.store import ShardedDataset

    check_selection_inputs(documents, pruned_scores, pruned_embeddings)
    work = Path(work)
    done = work / "result.json"
    if done.is_file() and (work / "selected_documents" / "manifest.json").is_file():
        saved = json.loads(done.read_text())
        history = pd.read_parquet(work / "history.parquet")
        return ShardSelectionRun(pd.read_parquet(work / "selected_ids.parquet"),
                                 ShardedDataset(work / "selected_documents", keep=True), history,
                                 {**saved["metrics"], "selection_cache_hit": 1.0})
    method = selection["method"]
    cfg = parse_selection_config(method, {k: v for k, v in selection.items() if k != "method"}, path="selection")
    n_candidates = len(pruned_scores)
    pool = candidate_pool(n_candidates, budget, seed)  # int64 positions, 8 bytes per candidate
    n_select = resolve_budget(budget, len(documents), n_candidates, len(pool))
    score = check_score_column({"score": cfg.score}, list(pruned_scores.manifest.schema))
    quality = read_quality(pruned_scores, column=score)[pool]
    if not np.isfinite(quality).all():
        raise ValueError(f"pruned_scores.{score} has {int((~np.isfinite(quality)).sum())} NaN/inf values")
    started = time.perf_counter()
    history, info = pd.DataFrame(), {}
    tokens = _shard_token_budget(documents, pruned_scores, pool, budget, work)
    if tokens is not None:
        positions, history, info = _select_shards_to_tokens(method, cfg, quality, pool, pruned_embeddings, tokens,
                                                            seed, work, engine, in_process_blocks, progress)
        n_select = len(positions)
    elif method == "datamask":
        positions, history, info = run_datamask_blocks(quality, pool, pruned_embeddings, n_select, cfg, seed, work,
                                                       engine=engine, in_process=in_process_blocks,
                                                       progress=progress)
        info = {k: v for k, v in info.items() if k != "blocks"}
    elif method in ("topk_quality", "random"):
        kept = kept_by_min_quality(quality, cfg.min_quality, n_select)  # in-place pruning, as select() applies it
        local = topk_positions(quality[kept], n_select) if method == "topk_quality" else \
            select_random(len(kept), n_select, seed)
        positions = pool[kept[local]]
    elif method == "greedy" and batch_local(cfg):  # DiSF Algorithm 1's batches, one in memory at a time
        positions, history, info = run_greedy_batches(quality, pool, pruned_embeddings, n_select, cfg, seed, work,
                                                      progress=progress)
    else:
        check_scale(method, len(pool), cfg.max_items)
        embeddings = gather_rows(pruned_embeddings, pool)
        from curation.selection.api import select  # torch: imported when a pick runs
        result = select(method, quality=quality, embeddings=embeddings, budget=n_select, config=cfg, seed=seed,
                        progress=progress)
        del embeddings
        positions, history, info = pool[result.indices], result.history, result.info
    seconds = time.perf_counter() - started
    positions = np.sort(np.asarray(positions, dtype=np.int64))
    ids_by_shard = read_ids(pruned_scores, positions)
    ids = np.concatenate(list(ids_by_shard.values())) if ids_by_shard else np.empty(0, dtype=object)
    chosen = np.searchsorted(pool, positions)
    selected_ids = _selected_frame(ids, quality[chosen], score,
                                   read_quality(pruned_scores)[pool][chosen] if score != "quality" else None)
    selected = write_selected_documents(
        documents, ids_by_shard, work, engine=engine, config_digest=selection_key(
            pruned_scores, pruned_embeddings, documents, selection, budget, seed),
        inputs={"documents": documents.fingerprint, "pruned_scores": pruned_scores.fingerprint,
                "pruned_embeddings": pruned_embeddings.fingerprint})
    if len(selected) != n_select:
        raise RuntimeError(f"selection: {len(selected)} documents written for {n_select} selected ids")
    history = history.copy()
    if not history.empty and "step" in history and "block" in history and history["block"].nunique() > 1:
        history["step"] = np.arange(len(history))  # MLflow wants one increasing step per series
    metrics = {"budget_docs": float(n_select), "candidates": float(len(pool)), "corpus_docs": float(len(documents)),
               "pruned_candidates": float(n_candidates), "selection_seconds": seconds, "selection_cache_hit": 0.0,
               "selected_tokens": float(selected.manifest.stats.get("selected_tokens", float("nan")))}
    if tokens is not None:
        metrics["budget_tokens"] = float(tokens["budget"])
        metrics["selected_token_error"] = metrics["selected_tokens"] / tokens["budget"] - 1.0
    metrics.update({f"info_{k}": float(v) for k, v in info.items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)})
    from curation.cache import atomic_write, atomic_write_text

    atomic_write(work / "selected_ids.parquet", lambda p: selected_ids.to_parquet(p, index=False))
    atomic_write(work / "history.parquet", lambda p: history.to_parquet(p, index=False))
    atomic_write_text(done, json.dumps({"metrics": metrics}))
    log.info("selected %d of %d candidates with %s in %.1fs (sharded)", n_select, len(pool), method, seconds)
    return ShardSelectionRun(selected_ids, ShardedDataset(work / "selected_documents", keep=True), history, metrics)


def _shard_token_budget(documents: Any, pruned_scores: Any, pool: np.ndarray, budget: Mapping[str, Any],
                        work: Any) -> Optional[dict[str, Any]]:
    """With ``budget.tokens`` / ``budget.token_ratio``: the budget in tokens, each pool candidate's
    ``n_tokens`` and (``budget.domain_column``) its domain, read shard by shard from ``documents``
    (counts kept in ``work/document_tokens.parquet``, so a resumed run does not count again)."""
    from pathlib import Path

    from curation.selection.sharded import read_ids
    from curation.selection.tokens import check_token_budget, token_budget

    if budget.get("tokens") is None and budget.get("token_ratio") is None:
        return None
    column = budget.get("domain_column")
    path = Path(work) / "document_tokens.parquet"
    if path.is_file():
        table = pd.read_parquet(path)
    else:
        from curation.cache import atomic_write
        from curation.data.tokens import count_tokens

        parts = []
        for name in documents.names:
            frame = documents.read(name)
            if column is not None and column not in frame.columns:
                raise KeyError(f"budget.domain_column={column!r}: the documents have no such column (have "
                               f"{[c for c in frame.columns if c != 'text']}); set it to null for one domain")
            part = pd.DataFrame({"id": frame["id"].astype(str).to_numpy(),
                                 "n_tokens": count_tokens(frame["text"].tolist())})
            if column is not None:
                part["domain"] = frame[column].astype("string").fillna("unknown").to_numpy()
            parts.append(part)
        table = pd.concat(parts, ignore_index=True)
        Path(work).mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda p: table.to_parquet(p, index=False))
    table = table.set_index("id")
    ids = np.concatenate([v.astype(str) for v in read_ids(pruned_scores, pool).values()])
    wanted = int(token_budget(budget, float(table["n_tokens"].sum())))
    check_token_budget(float(wanted), table["n_tokens"].to_numpy(), budget, "the ingested corpus")
    return {"budget": wanted,
            "n_tokens": table["n_tokens"].reindex(ids).to_numpy(dtype="float64"),
            "groups": table["domain"].reindex(ids).to_numpy() if column is not None else None,
            "proportions": budget.get("domain_proportions")}


def _select_shards_to_tokens(method: str, cfg: Any, quality: np.ndarray, pool: np.ndarray, pruned_embeddings: Any,
                             tokens: dict[str, Any], seed: int, work: Any, engine: Any, in_process: Optional[bool],
                             progress: Optional[Callable[[int, int], None]]) -> tuple[np.ndarray, pd.DataFrame, dict]:
    """:func:`run_selection_shards`' pick to a token budget (:mod:`curation.selection.tokens`): global
    positions, history, info. DataMask runs its blocks, and greedy with a batch-local objective streams its
    batches, at each solved size S (``work/tokens-S<S>``, each resumable); the ordered methods read only quality
    and ``n_tokens``; the rest, and any pick with fixed domain proportions, gather the pool's embeddings
    (refused past ``selection.max_items``)."""
    from pathlib import Path

    from curation.selection.greedy_shards import batch_local, run_greedy_batches
    from curation.selection.sharded import check_scale, gather_rows, run_datamask_blocks
    from curation.selection.tokens import (ORDERED, _check_tokens, check_kept_tokens, fit_to_tokens,
                                          select_tokens)

    n_tokens, budget_tokens = tokens["n_tokens"], float(tokens["budget"])
    if np.isnan(n_tokens).any():
        raise ValueError(f"selection: {int(np.isnan(n_tokens).sum())} candidates are not in documents: the pruned "
                         "corpus is stale; re-make it with `curate pipeline=scoring+pruning`")
    if method == "datamask" and tokens["groups"] is None:
        _check_tokens(n_tokens, len(pool), budget_tokens)
        histories: dict[int, tuple[pd.DataFrame, dict]] = {}

        def run(size: int) -> np.ndarray:
            positions, history, info = run_datamask_blocks(quality, pool, pruned_embeddings, size, cfg, seed,
                                                           Path(work) / f"tokens-S{size}", engine=engine,
                                                           in_process=in_process, progress=progress)
            histories[size] = (history, info)
            return np.searchsorted(pool, positions)

        local, extra = fit_to_tokens(run, n_tokens, budget_tokens, quality=quality)
        history, info = histories[int(extra["token_solved_size"])]
        info = {**{k: v for k, v in info.items() if k != "blocks"}, **extra}
    elif method == "greedy" and batch_local(cfg) and tokens["groups"] is None:
        # select_tokens' in-place min_quality pruning first, then greedy on the kept candidates, streamed
        kept = kept_by_min_quality(quality, cfg.min_quality)
        counts = _check_tokens(n_tokens[kept], len(kept), budget_tokens)
        check_kept_tokens(budget_tokens, counts)
        plain, runs = dataclasses.replace(cfg, min_quality=None), {}

        def run(size: int) -> np.ndarray:
            positions, history, info = run_greedy_batches(quality[kept], pool[kept], pruned_embeddings, size, plain,
                                                          seed, Path(work) / f"tokens-S{size}", progress=progress)
            runs[size] = (history, info)
            return np.searchsorted(pool[kept], positions)

        local, extra = fit_to_tokens(run, counts, budget_tokens, quality=quality[kept])
        history, info = runs[int(extra["token_solved_size"])]
        local, info = kept[np.asarray(local, dtype=np.int64)], {**info, **extra}
    elif method in ORDERED and tokens["groups"] is None:
        result = select_tokens(method, quality=quality, embeddings=np.zeros((len(pool), 1), dtype="float32"),
                               n_tokens=n_tokens, budget_tokens=budget_tokens, config=cfg, seed=seed)
        local, history, info = result.indices, result.history, result.info
    else:
        check_scale(method, len(pool), getattr(cfg, "max_items", None))
        embeddings = gather_rows(pruned_embeddings, pool)
        result = select_tokens(method, quality=quality, embeddings=embeddings, n_tokens=n_tokens,
                               budget_tokens=budget_tokens, config=cfg, seed=seed, groups=tokens["groups"],
                               proportions=tokens["proportions"], progress=progress)
        del embeddings
        local, history, info = result.indices, result.history, result.info
    info = {k: v for k, v in info.items() if k not in ("config",)}
    return pool[np.asarray(local, dtype=np.int64)], history, info
