"""Budgets and corpus picking: the one place that turns scores into the documents a model trains on.

- :func:`resolve_budget` / :func:`candidate_pool`: how many documents, from which candidates
  (the ``budget`` config group);
- :func:`run_selection`: the selection pipeline's pick (``selection.method`` on the pruned corpus);
- :func:`select_corpus` / :func:`corpus_documents`: a named corpus recipe (Table 2, verification);
- :func:`top_fraction`: the top share of documents by a score (Meta-rater, seeds/004 Alg. 1 step 3).

Named pre-training corpora: which documents a comparison run trains on.

DATAMASK Table 2 (seeds/000 Sec. 4.1, 4.4) and Ultra-FineWeb's verification
(seeds/002 Sec. 2.2, Table 8) compare corpora cut from one source by different
recipes. A :class:`CorpusSpec` names one recipe on our corpus:

==============  ==================  ======  ==============  =============================
name            method              pool    score           paper analogue
==============  ==================  ======  ==============  =============================
raw             random              raw     (unused)        FineWeb (the unfiltered source)
semdedup        semdedup            raw     quality         FineWeb-Semdedup
edu             topk_quality        raw     edu             FineWeb-Edu (Edu classifier)
dclm            topk_quality        raw     fasttext_dclm   FineWeb-DCLM (DCLM fastText)
datamask        datamask            pruned  quality         FineWeb-Mask's method, the project's default knobs
datamask_paper  datamask            pruned  quality         FineWeb-Mask (Sec. 4.4 recipe: DATAMASK_PAPER)
selection       selection           -       -               this run's ``selected_documents``
==============  ==================  ======  ==============  =============================

``pool: raw`` draws from every ingested document (``scores``/``embeddings``),
``pool: pruned`` from the quality-pruned corpus (DATAMASK Sec. 4.3 prunes
before its joint selection; the baselines select from the raw source).
Every corpus keeps the same budget (the ``budget`` group: documents, or with ``budget.tokens`` /
``budget.token_ratio`` the same reference tokens within 1%, :mod:`curation.selection.tokens`), and
the trainers spend the same number of tokens on each, as Table 2 does.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

import numpy as np
import pandas as pd

from curation.cache import array_digest, config_key, frame_fingerprint, result_cache
from curation.errors import UserError
from curation.selection.api import select
from curation.selection.baselines import select_topk_quality

log = logging.getLogger(__name__)

POOLS = ("raw", "pruned")
SELECTION = "selection"  # method name: the namespace's existing selection


# --- budgets ---


class BudgetError(UserError, ValueError):
    """The budget cannot be met by the candidates: none at all (pruning removed every document), or fewer than
    the budget asks for."""


def resolve_budget(budget: Mapping[str, Any], n_corpus: int, n_candidates: int, n_pool: int | None = None) -> int:
    """Documents to select: ``budget.docs``, else ``keep_ratio`` x the ingested corpus size.

    The ratio refers to the corpus before pruning, as in DATAMASK (FineWeb-Mask
    keeps ~10% of FineWeb after dropping its low-quality 40-50%), unless
    ``ratio_of: candidates``. ``n_pool`` is the size of the candidate subsample
    (``budget.candidates``); with ``ratio_of: corpus`` the budget shrinks by
    ``n_pool / n_candidates`` so the corpus keep ratio is unchanged.
    """
    n_pool = n_candidates if n_pool is None else n_pool
    if n_candidates == 0 or n_pool == 0:  # n_corpus * n_pool / n_candidates would divide by zero
        raise BudgetError(f"no candidate to select from: the pruned corpus is empty (0 of {n_corpus:,} ingested "
                          f"documents kept by pruning). Fix: prune less (a lower pruning.threshold, or "
                          f"pruning.mode=bottom_pct), then run `curate pipeline=pruning+selection`.")
    ratio_of = budget.get("ratio_of", "corpus")
    if ratio_of not in ("corpus", "candidates"):
        raise ValueError(f"budget.ratio_of must be 'corpus' or 'candidates', got {ratio_of!r}")
    if budget.get("docs") is not None:
        wanted = int(budget["docs"])
    else:
        ratio = float(budget["keep_ratio"])
        if not 0 < ratio < 1:
            raise ValueError(f"budget.keep_ratio must be in (0, 1), got {ratio}")
        base = n_pool if ratio_of == "candidates" else n_corpus * n_pool / n_candidates
        wanted = int(round(ratio * base))
    if not 0 < wanted < n_pool:
        raise BudgetError(f"budget of {wanted} documents must be in (0, {n_pool}) — the pruned corpus "
                         "(or its budget.candidates subsample) has that many; lower budget.keep_ratio/budget.docs "
                         "or prune less")
    return wanted


def candidate_pool(n_candidates: int, budget: Mapping[str, Any], seed: int) -> np.ndarray:
    """Positions of the candidates the selection sees: all, or a seeded random ``budget.candidates`` subset."""
    wanted = budget.get("candidates")
    if wanted is None or int(wanted) >= n_candidates:
        return np.arange(n_candidates)
    if int(wanted) < 2:
        raise ValueError(f"budget.candidates must be >= 2 (or null), got {wanted}")
    rng = np.random.default_rng([int(seed), 7919])
    return np.sort(rng.choice(n_candidates, size=int(wanted), replace=False))


def top_fraction(score: np.ndarray, keep_frac: float) -> np.ndarray:
    """Indices of the top ``keep_frac`` documents by ``score``, sorted (Meta-rater seeds/004 Alg. 1 step 3).

    Ties are broken by document order (stable), so the selection is reproducible.
    """
    if not 0 < keep_frac <= 1:
        raise ValueError(f"metarater.keep_frac must be in (0, 1], got {keep_frac}")
    return select_topk_quality(score, max(1, int(round(len(score) * keep_frac))))


# --- the selection pipeline's pick ---


@dataclass
class SelectionRun:
    """The result of :func:`run_selection`: chosen ids (with quality), the documents, history, metrics."""

    selected_ids: pd.DataFrame
    selected_documents: pd.DataFrame
    history: pd.DataFrame
    metrics: dict[str, float]


def run_selection(pruned_scores: pd.DataFrame, pruned_embeddings: np.ndarray, documents: pd.DataFrame,
                  selection: Mapping[str, Any], budget: Mapping[str, Any], seed: int,
                  progress: Optional[Callable[[int, int], None]] = None) -> SelectionRun:
    """Run ``selection.method`` (:func:`curation.selection.select`) on the candidate pool of the pruned
    corpus for the resolved budget; documents keep ``documents`` order."""
    from curation.data.tokens import count_tokens

    method = selection["method"]
    pool = candidate_pool(len(pruned_scores), budget, seed)
    score = check_score_column(selection, list(pruned_scores.columns))
    from curation.pruning import numeric_scores

    quality = numeric_scores(score, pruned_scores[score], key="selection.score")[pool]
    embeddings = np.array(pruned_embeddings[pool], dtype="float32")  # a writable copy of the memory map
    config = {k: v for k, v in selection.items() if k != "method"}
    tokens = resolve_token_budget(documents, budget, {"enabled": False})
    started = time.perf_counter()
    if tokens is None:
        n_select = resolve_budget(budget, len(documents), len(pruned_scores), len(pool))
        result = select(method, quality=quality, embeddings=embeddings, budget=n_select, config=config,
                        seed=seed, progress=progress)
    else:
        from curation.selection.tokens import select_tokens

        pool_ids = pruned_scores["id"].astype(str).iloc[pool]
        result = select_tokens(method, quality=quality, embeddings=embeddings,
                               n_tokens=tokens.n_tokens.reindex(pool_ids).to_numpy(), budget_tokens=tokens.budget,
                               config=config, seed=seed, progress=progress,
                               groups=None if tokens.groups is None else tokens.groups.reindex(pool_ids).to_numpy(),
                               proportions=tokens.proportions)
        n_select = len(result.indices)
    seconds = time.perf_counter() - started
    ids = pruned_scores["id"].iloc[pool[result.indices]].reset_index(drop=True)
    selected_ids = _selected_frame(ids, quality[result.indices], score,
                                   pruned_scores["quality"].to_numpy(dtype="float64")[pool[result.indices]]
                                   if score != "quality" and "quality" in pruned_scores else None)
    selected_documents = documents[documents["id"].isin(set(ids))].reset_index(drop=True)
    selected_documents["n_tokens"] = count_tokens(selected_documents["text"].tolist())
    history = result.history.copy()
    if not history.empty and "step" in history and "block" in history and history["block"].nunique() > 1:
        # MLflow wants one increasing step per series: number steps across blocks.
        history["step"] = np.arange(len(history))
    metrics = {"budget_docs": float(n_select), "candidates": float(len(quality)), "corpus_docs": float(len(documents)),
               "pruned_candidates": float(len(pruned_scores)), "selection_seconds": seconds,
               "selected_tokens": float(selected_documents["n_tokens"].sum())}
    if tokens is not None:
        metrics["budget_tokens"] = float(tokens.budget)
        metrics["selected_token_error"] = metrics["selected_tokens"] / tokens.budget - 1.0
    metrics.update({f"info_{k}": float(v) for k, v in result.info.items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)})
    log.info("selected %d of %d candidates with %s in %.1fs", n_select, len(quality), method, seconds)
    return SelectionRun(selected_ids, selected_documents, history, metrics)


def check_score_column(selection: Mapping[str, Any], columns: list[str]) -> str:
    """``selection.score`` (default ``quality``), refused with the columns there are when the scores lack it."""
    from curation.configuration import ConfigError

    score = str(selection.get("score") or "quality")
    if score not in columns:
        raters = [c for c in columns if c != "id"]
        raise ConfigError("selection.score", f"{score!r} is not a column of the pruned scores (they have "
                          f"{raters}); set selection.score to one of them (quality = the merged 0-15 score), or "
                          "turn that rater on in the scoring config and re-run scoring", score)
    return score


def _selected_frame(ids: Any, values: np.ndarray, score: str, merged: Optional[np.ndarray]) -> pd.DataFrame:
    """``selected_ids``: id and the merged ``quality``; with another ``selection.score``, that column too."""
    if score == "quality":
        return pd.DataFrame({"id": ids, "quality": values})
    frame = pd.DataFrame({"id": ids, score: values})
    if merged is not None:
        frame.insert(1, "quality", merged)
    return frame


# --- the selection pipeline's pick on shards (issue #14 item 5) ---


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
    ``topk_quality`` / ``random`` read only the quality column; the in-memory methods gather the pool's
    embeddings and refuse past ``selection.max_items``. ``selected_documents`` is written per documents
    shard, in document order. ``work`` (a result-cache entry or staging folder) holds the block
    checkpoints and outputs: a killed run resumes, a finished one is read back (``selection_cache_hit``).
    """
    from pathlib import Path

    from curation.selection.baselines import select_random
    from curation.selection.config import parse_selection_config
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
        kept = np.arange(len(pool), dtype=np.int64)
        if cfg.min_quality is not None:  # in-place pruning, as select() applies it
            kept = np.flatnonzero(quality >= cfg.min_quality).astype(np.int64)
        if not 0 < n_select < len(kept):
            raise ValueError(f"budget {n_select} must be in (0, {len(kept)}): the candidates left after "
                             f"selection.min_quality={cfg.min_quality}")
        local = topk_positions(quality[kept], n_select) if method == "topk_quality" else \
            select_random(len(kept), n_select, seed)
        positions = pool[kept[local]]
    else:
        check_scale(method, len(pool), cfg.max_items)
        embeddings = gather_rows(pruned_embeddings, pool)
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
    positions, history, info. DataMask runs its blocks at each solved size S (``work/tokens-S<S>``, each
    resumable); the ordered methods read only quality and ``n_tokens``; the rest, and any pick with fixed
    domain proportions, gather the pool's embeddings (refused past ``selection.max_items``)."""
    from pathlib import Path

    from curation.selection.sharded import check_scale, gather_rows, run_datamask_blocks
    from curation.selection.tokens import ORDERED, fit_to_tokens, select_tokens

    n_tokens, budget_tokens = tokens["n_tokens"], float(tokens["budget"])
    if np.isnan(n_tokens).any():
        raise ValueError(f"selection: {int(np.isnan(n_tokens).sum())} candidates are not in documents: the pruned "
                         "corpus is stale; re-make it with `curate pipeline=scoring+pruning`")
    if method == "datamask" and tokens["groups"] is None:
        from curation.selection.tokens import _check_tokens

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


# --- named corpus recipes ---


@dataclass
class CorpusSpec:
    method: str = "random"  # a curation.selection method, or "selection" (the run's selected_documents)
    pool: str = "raw"  # raw: every ingested document | pruned: the quality-pruned corpus
    score: str = "quality"  # column of the scores table the method reads as quality
    config: dict[str, Any] = field(default_factory=dict)  # overrides of conf/selection/<method>.yaml defaults

    def validate(self, key: str) -> "CorpusSpec":
        """``key``: where the spec sits in the config (``table2.corpora.edu``), for the error message."""
        if self.pool not in POOLS:
            raise ValueError(f"config key '{key}.pool': must be one of {POOLS}, got {self.pool!r}")
        if self.method != SELECTION:  # fail when the config is read, not after an hour of other cells
            from curation.selection.config import parse_selection_config

            try:
                parse_selection_config(self.method, self.config)
            except (ValueError, TypeError, KeyError) as err:
                raise ValueError(f"config key '{key}': {err}") from None
        return self


def select_corpus(
    spec: CorpusSpec,
    *,
    scores: pd.DataFrame,
    embeddings: np.ndarray,
    pruned_scores: pd.DataFrame,
    pruned_embeddings: np.ndarray,
    n_select: int,
    seed: int,
    tokens: Optional[TokenBudget] = None,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Ids of the ``n_select`` documents of corpus ``spec`` (or, with ``tokens``, of the documents holding
    ``tokens.budget`` tokens within 1%: :func:`curation.selection.tokens.select_tokens`) and the
    selection's info.

    scores/embeddings: one row per ingested document (aligned); pruned_*: the
    pruned corpus (aligned). Raises ``KeyError`` naming a missing score column
    and ``ValueError`` for NaN scores.
    """
    if spec.method == SELECTION:
        raise ValueError("method 'selection' reads selected_documents; it is not computed here")
    table, emb = (scores, embeddings) if spec.pool == "raw" else (pruned_scores, pruned_embeddings)
    if spec.score not in table.columns:
        raise KeyError(f"score column {spec.score!r} is not in the {spec.pool} scores; have {list(table.columns)}")
    quality = table[spec.score].to_numpy(dtype="float64")
    if np.isnan(quality).any():
        raise ValueError(f"score column {spec.score!r} has {int(np.isnan(quality).sum())} NaN values")
    if tokens is None:
        result = select(spec.method, quality=quality, embeddings=np.asarray(emb, dtype="float32"), budget=n_select,
                        config=spec.config, seed=seed)
    else:
        from curation.selection.tokens import select_tokens

        ids_all = table["id"].astype(str)
        result = select_tokens(spec.method, quality=quality, embeddings=np.asarray(emb, dtype="float32"),
                               n_tokens=tokens.n_tokens.reindex(ids_all).to_numpy(), budget_tokens=tokens.budget,
                               config=spec.config, seed=seed,
                               groups=None if tokens.groups is None else tokens.groups.reindex(ids_all).to_numpy(),
                               proportions=tokens.proportions)
    ids = table["id"].to_numpy()[result.indices]
    info = {"n_pool": len(table), "score_mean": float(quality[result.indices].mean()),
            "selection_seconds": float(result.info["wall_time_s"])}
    info.update({k: float(result.info[k]) for k in ("token_solve_runs", "token_trimmed_docs", "token_error")
                 if k in result.info})
    return ids, info


@dataclass
class TokenBudget:
    """A token budget on the ingested documents: ``budget`` tokens, each document's ``n_tokens`` (indexed
    by id), and optional fixed domain proportions (``groups``: id -> domain; ``proportions``)."""

    budget: int
    n_tokens: pd.Series
    groups: Optional[pd.Series] = None
    proportions: Optional[dict[str, float]] = None

    def key(self) -> list[Any]:
        """What a cached pick depends on besides the pool and the recipe."""
        return [self.budget, array_digest(self.n_tokens.to_numpy()),
                None if self.groups is None else frame_fingerprint(self.groups.to_frame("g").reset_index(), ["g"]),
                self.proportions]


def document_tokens(documents: pd.DataFrame, cache: Mapping[str, Any]) -> pd.Series:
    """``n_tokens`` of every ingested document (reference tokenizer, :mod:`curation.data.tokens`), indexed
    by id; cached by the documents' ids and texts."""
    from curation.data.tokens import count_tokens

    key = config_key("ntokens-v1", frame_fingerprint(documents, ["id", "text"]))
    frame = result_cache(cache).frame("ntokens", key, lambda: pd.DataFrame(
        {"id": documents["id"].astype(str).to_numpy(), "n_tokens": count_tokens(documents["text"].tolist())}))
    return frame.set_index("id")["n_tokens"]


def resolve_token_budget(documents: pd.DataFrame, budget: Mapping[str, Any],
                         cache: Mapping[str, Any]) -> Optional[TokenBudget]:
    """The :class:`TokenBudget` of ``budget`` (``tokens`` or ``token_ratio`` of the ingested documents'
    tokens; ``domain_column`` / ``domain_proportions``), or None for a document budget."""
    from curation.selection.tokens import check_token_budget, token_budget

    if budget.get("tokens") is None and budget.get("token_ratio") is None:
        return None
    n_tokens = document_tokens(documents, cache)
    wanted = token_budget(budget, float(n_tokens.sum()))
    check_token_budget(float(wanted), n_tokens.to_numpy(), budget, "the ingested corpus")
    groups = None
    column = budget.get("domain_column")
    if column is not None:
        if column not in documents.columns:
            raise KeyError(f"budget.domain_column={column!r}: the documents have no such column (have "
                           f"{[c for c in documents.columns if c != 'text']}); set it to null for one domain")
        groups = pd.Series(documents[column].astype("string").fillna("unknown").to_numpy(),
                           index=documents["id"].astype(str))
    proportions = budget.get("domain_proportions")
    return TokenBudget(int(wanted), n_tokens, groups, dict(proportions) if proportions is not None else None)


def corpus_documents(
    documents: pd.DataFrame,
    scores: pd.DataFrame,
    embeddings: np.ndarray,
    pruned_scores: pd.DataFrame,
    pruned_embeddings: np.ndarray,
    corpus: CorpusSpec,
    budget: Mapping[str, Any],
    seed: int,
    cache: Mapping[str, Any],
) -> tuple[pd.DataFrame, dict[str, float]]:
    """The documents of one named corpus (:func:`select_corpus` for the resolved budget, documents or tokens,
    cached by content), in ``documents`` order with an ``n_tokens`` column, and ``corpus_docs``,
    ``corpus_chars``, ``corpus_tokens``, ``corpus_score_mean`` and ``corpus_cache_hit`` (with a token budget
    also ``budget_tokens`` and ``corpus_token_error``)."""
    tokens = resolve_token_budget(documents, budget, cache)
    table = scores if corpus.pool == "raw" else pruned_scores
    if tokens is None:
        n_select = resolve_budget(budget, len(documents), len(table))
        key = config_key("corpus-v1", dataclasses.asdict(corpus), n_select, seed,
                         frame_fingerprint(table, ["id", corpus.score] if corpus.score in table else ["id"]),
                         array_digest(embeddings if corpus.pool == "raw" else pruned_embeddings))
    else:
        n_select = 0
        key = config_key("corpus-tokens-v1", dataclasses.asdict(corpus), tokens.key(), seed,
                         frame_fingerprint(table, ["id", corpus.score] if corpus.score in table else ["id"]),
                         array_digest(embeddings if corpus.pool == "raw" else pruned_embeddings))
    store = result_cache(cache)
    info: dict[str, Any] = {}

    def compute() -> pd.DataFrame:
        ids, more = select_corpus(corpus, scores=scores, embeddings=embeddings, pruned_scores=pruned_scores,
                                  pruned_embeddings=pruned_embeddings, n_select=n_select, seed=seed, tokens=tokens)
        info.update(more)
        return pd.DataFrame({"id": ids})

    ids = store.frame("corpus", key, compute)["id"]
    chosen = documents[documents["id"].isin(set(ids))].reset_index(drop=True)
    # a document budget counts only the chosen documents, through the same cached count
    n_tokens = tokens.n_tokens if tokens is not None else document_tokens(chosen, cache)
    chosen["n_tokens"] = n_tokens.reindex(chosen["id"].astype(str)).to_numpy()
    metrics = {"corpus_docs": float(len(chosen)), "corpus_chars": float(chosen["text"].str.len().sum()),
               "corpus_tokens": float(chosen["n_tokens"].sum()),
               "corpus_pool": float(len(table)), "corpus_cache_hit": float(store.hits)}
    if tokens is not None:
        metrics["budget_tokens"] = float(tokens.budget)
        metrics["corpus_token_error"] = metrics["corpus_tokens"] / tokens.budget - 1.0
    if corpus.score in table:
        metrics["corpus_score_mean"] = float(table.loc[table["id"].isin(set(ids)), corpus.score].mean())
    if "selection_seconds" in info:  # computed now, not loaded
        metrics["corpus_selection_seconds"] = float(info["selection_seconds"])
    return chosen, metrics
