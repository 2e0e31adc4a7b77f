"""Scoring on shards (issue 14): fit on a sample once, then apply per document shard.

1. **fit** (:func:`fit_on_sample`, in the driver, once): the sample of at most
   ``scoring.fit_sample_docs`` documents (:mod:`curation.scoring.sample`) is read shard by
   shard, with its rows of the embedding shards; :func:`curation.scoring.run.fit_scoring`
   trains the raters, fits the 0-15 merge map and measures the eval ROC-AUC on it. The
   result goes to ``<stage>/fit`` atomically: ``raters/`` (a ``persistence`` folder, also
   the ``rater_models`` output), ``merge_map.npz`` and ``metrics.json``.
2. **apply** (:func:`score_shard`, per shard, local or Ray): one document shard (``id``,
   ``text``) and its embedding shard -> the ``scores`` shard (``id``, rater columns,
   ``<c>_0_5``, ``quality``), by :func:`curation.scoring.run.apply_scoring`. The fitted raters
   reach the worker through the folder, not the task's pickle (a fastText model does not
   pickle): each worker process loads ``<stage>/fit`` once (:func:`load_fitted`).

Memory: the fit holds the sample (bounded by ``fit_sample_docs``) plus one 8-byte hash
per document to choose it; the apply holds one shard. Bad-input counts are per-shard
stats, summed in the manifest. A killed run resumes: a finished fit is not redone,
finished shards are skipped (:func:`curation.shards.run_shards`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from curation.cache import atomic_folder, atomic_write
from curation.scoring.config import ScoringConfig
from curation.scoring.merge import MergeMap
from curation.scoring.run import (apply_scoring, dsir_names, fit_scoring, in_output_order, needs_embeddings,
                                  score_dsir)
from curation.scoring.sample import sample_mask, sample_threshold
from curation.shards import EngineConfig, ShardedDataset, ShardResult, ShardTask, ShardWriter, run_shards
from curation.shards.executor import engine_from_data

log = logging.getLogger(__name__)

SCORING_REMAKE = "curate pipeline=scoring"
FIT_METRICS = "metrics.json"  # written last (the folder is renamed into place whole): the fit is done
_FITTED: dict[str, tuple[dict[str, Any], MergeMap | None]] = {}


def engine_of(scoring_engine: str | None, data: Mapping[str, Any] | None) -> EngineConfig:
    """``scoring.engine`` (None = ``data.engine``; ``inprocess`` = ``local``), ``data.ray_address`` and
    ``data.workers``."""
    return engine_from_data(data, scoring_engine)


def load_fitted(fit_dir: str) -> tuple[dict[str, Any], MergeMap | None]:
    """The raters and merge map of a finished fit, loaded once per worker process."""
    from curation.scoring.persistence import load_raters

    stamp = os.stat(Path(fit_dir) / FIT_METRICS).st_mtime_ns  # a re-made fit at the same path is reloaded
    key = f"{fit_dir}@{stamp}"
    if key not in _FITTED:
        _FITTED.clear()
        merge_path = Path(fit_dir) / "merge_map.npz"
        _FITTED[key] = (load_raters(Path(fit_dir) / "raters"),
                        MergeMap.load(merge_path) if merge_path.is_file() else None)
    return _FITTED[key]


def _load_inputs(doc_root: str, emb_root: str | None, name: str) -> tuple[pd.DataFrame, np.ndarray | None]:
    frame = pd.read_parquet(ShardWriter(doc_root, "frame").shard_path(name), columns=["id", "text"])
    emb = np.load(ShardWriter(emb_root, "array").shard_path(name)) if emb_root else None
    return frame, emb


def _load_ids(doc_root: str, name: str) -> tuple[pd.DataFrame, None]:
    return pd.read_parquet(ShardWriter(doc_root, "frame").shard_path(name), columns=["id"]), None


def score_shard(loaded: tuple[pd.DataFrame, np.ndarray | None], name: str, *, fit_dir: str,
                cfg: ScoringConfig, scored_by_fit: str | None = None) -> ShardResult:
    """The ``scores`` shard of one document shard (and its embedding shard).

    ``scored_by_fit``: the fit's sample pass (:class:`SamplePasses`), which scored every row of a shard that lies
    wholly in the fit sample with every rater but DSIR, and kept the rows' hashed n-grams; such a shard's scores
    are read from there, DSIR's made from the kept n-grams, and merged here, not computed a second time (the
    same numbers: a document's scores depend on it alone)."""
    frame, emb = loaded
    raters, merge = load_fitted(fit_dir)
    raw = _scored_by_fit(scored_by_fit, name, frame, dsir_names(raters))
    if raw is None and "text" not in frame.columns:
        raise RuntimeError(f"scoring: shard {name}'s scores from the fit's pass do not hold its documents' ids in "
                           "order, or its DSIR features are missing (was the documents folder rewritten during the "
                           "run?); re-run the scoring stage")
    if raw is None:
        scores, counts = apply_scoring(frame, emb, cfg, raters, merge)
    else:
        scores, counts, z = raw
        if z is not None:
            score_dsir(scores, z, raters, dsir_names(raters), counts)
        scores = in_output_order(scores, cfg, raters)
        if merge is not None:
            scores, merged = merge.apply(scores)
            counts.update({f"merge/{k}": v for k, v in merged.items()})  # as apply_scoring names them
    counts["fit/rows_scored_once"] = 0 if raw is None else len(scores)  # rows whose scores the fit's pass made
    return ShardResult({"scores": scores}, {**counts, "rows": len(scores)})


def _scored_by_fit(folder: str | None, name: str, frame: pd.DataFrame, dsir: list[str]):
    """Shard ``name``'s unmerged scores, counts and (with ``dsir`` raters) kept DSIR features from the fit's sample
    pass, if it scored all of the shard's rows (in order) with every rater but DSIR; else None."""
    if folder is None:
        return None
    writer = ShardWriter(folder, "frame")
    stats = writer.stats(name)
    if not writer.is_complete(name) or not stats.get(ALL_RATERS):
        return None
    raw = pd.read_parquet(writer.shard_path(name))
    if len(raw) != len(frame) or not (raw["id"].to_numpy() == frame["id"].to_numpy()).all():
        return None
    z = _kept_features(str(Path(folder).parent / DSIR_FEATURES), name, len(raw)) if dsir else None
    if dsir and z is None:
        return None
    return raw, {k: v for k, v in stats.items() if k not in ("rows", ALL_RATERS)}, z


# --- the fit's passes over the whole sample, one shard per task (a worker pool or Ray) -------------

_RATERS: dict[str, dict[str, Any]] = {}


def _raters_in(folder: str) -> dict[str, Any]:
    """Raters saved for the fit's sample pass, loaded once per worker process."""
    from curation.scoring.persistence import load_raters

    if folder not in _RATERS:
        _RATERS.clear()  # one fit at a time: the previous one's raters are not needed
        _RATERS[folder] = load_raters(Path(folder))
    return _RATERS[folder]


def _sample_rows(frame: pd.DataFrame, emb: np.ndarray | None, threshold: int | None):
    mask = sample_mask(frame["id"], threshold)
    return frame[mask].reset_index(drop=True), (None if emb is None else emb[mask])


def _keep_features(folder: str, name: str, z) -> None:
    from scipy.sparse import save_npz

    Path(folder).mkdir(parents=True, exist_ok=True)

    def write(path: Path) -> None:
        with open(path, "wb") as handle:  # a file, not a name: save_npz would add ".npz" to the temporary name
            save_npz(handle, z, compressed=False)

    atomic_write(Path(folder) / f"{name}.npz", write)


def _kept_features(folder: str | None, name: str, rows: int):
    """Shard ``name``'s DSIR features kept by :func:`sample_pass_shard` (None: not kept, or not ``rows`` rows)."""
    if folder is None or not (Path(folder) / f"{name}.npz").is_file():
        return None
    from scipy.sparse import load_npz

    z = load_npz(Path(folder) / f"{name}.npz").tocsr()
    return z if z.shape[0] == rows else None


ALL_RATERS = "scored_by_every_rater"  # stat of a sample-pass shard that holds every rater's scores of every row
DSIR_FEATURES = "dsir_features"  # the sample pass's folder of kept DSIR features, beside its components


def sample_pass_shard(loaded, name: str, *, threshold: int | None, raters_dir: str, cfg: ScoringConfig,
                      columns: tuple[str, ...], dsir_model: dict | None, features_dir: str) -> ShardResult:
    """One shard's part of the fit's one pass over the sample.

    * ``dsir_model``: DSIR's raw-side bucket counts of the shard's sample rows (``counts``, (1, buckets)), their
      hashed n-grams kept in ``features_dir`` for the DSIR scores made once DSIR is fitted (which needs every
      shard's counts first): the fit's merge sample (a DSIR column among ``columns``) and the scoring pass.
    * ``components``: the shard's sample rows scored by the raters in ``raters_dir`` (every rater but DSIR):
      the merge's ``columns``, or, for a shard wholly in the sample (a corpus smaller than ``fit_sample_docs``:
      every shard), every rater's columns; the scoring pass then only adds DSIR's and merges
      (:func:`score_shard`): on a small corpus the dearest raters used to run twice on every document.
    """
    frame, emb = _sample_rows(*loaded, threshold)
    whole = len(frame) == len(loaded[0])
    outputs, counts = {}, {}
    if dsir_model is not None:
        from curation.scoring.dsir import DSIRConfig, DSIRImportance

        hasher = DSIRImportance(DSIRConfig(**dsir_model))
        if len(frame):
            t0 = time.perf_counter()
            z = hasher.features(frame["text"].tolist())
            counts["dsir/features/seconds"] = time.perf_counter() - t0
        else:  # an empty shard (sklearn's hashing refuses an empty input)
            from scipy.sparse import csr_matrix

            z = csr_matrix((0, hasher.cfg.buckets))
        outputs["counts"] = np.asarray(z.sum(axis=0)).reshape(1, -1)
        if whole or dsir_names(columns):
            _keep_features(features_dir, name, z)
        counts["fit/dsir_rows_hashed_once"] = len(frame)  # hashed here only, not again to score
    scores, scored = apply_scoring(frame, emb, cfg, _raters_in(raters_dir), None,
                                   only=None if whole else set(columns) - set(dsir_names(columns)))
    outputs["components"] = scores
    return ShardResult(outputs, {**({**counts, **scored} if whole else {}), "rows": len(scores),
                                 ALL_RATERS: int(whole)})


class SamplePasses:
    """The fit's pass over the whole sample (DSIR's raw counts and the merge components, at once) as per-shard
    tasks on ``engine``: what :func:`~curation.scoring.run.fit_scoring` otherwise does in the driver, on one
    core, in two passes. The outputs are identical (per-document scores; integer counts summed in float64 are
    exact in any order), so the pool is used only when it has more than one worker."""

    def __init__(self, documents: ShardedDataset, embeddings: ShardedDataset | None, cfg: ScoringConfig,
                 threshold: int | None, engine: EngineConfig, work: Path):
        self.documents, self.cfg, self.threshold, self.engine, self.work = documents, cfg, threshold, engine, work
        self.emb_root = str(embeddings.root) if embeddings is not None and needs_embeddings(cfg) else None
        self._counts: np.ndarray | None = None
        self._ran = False

    def _pass(self, raters: dict[str, Any], columns: list[str], dsir_model: dict | None) -> None:
        """The pass, once: ``raters`` (DSIR's left out: it is fitted from this pass's counts) score every shard."""
        from curation.scoring.persistence import save_raters

        raters_dir = self.work / "raters"
        save_raters({k: v for k, v in raters.items() if k not in dsir_names(raters)}, raters_dir, None)
        outputs = {"components": (self.work / "components", "frame")}
        if dsir_model is not None:
            outputs["counts"] = (self.work / "dsir_counts", "array")
        tasks = [ShardTask(n, partial(_load_inputs, str(self.documents.root), self.emb_root, n))
                 for n in self.documents.names]
        run_shards(partial(sample_pass_shard, threshold=self.threshold, raters_dir=str(raters_dir), cfg=self.cfg,
                           columns=tuple(columns), dsir_model=dsir_model,
                           features_dir=str(self.work / DSIR_FEATURES)),
                   tasks, outputs, self.engine, desc="scoring fit: sample pass")
        if dsir_model is not None:
            writer = ShardWriter(self.work / "dsir_counts", "array")
            self._counts = np.sum(np.concatenate([np.load(writer.shard_path(n)) for n in self.documents.names]),
                                  axis=0)
        self._ran = True

    def _merge_columns(self) -> list[str]:
        return sorted({*self.cfg.merge.components, self.cfg.merge.reference})

    def dsir_raw_counts(self, hasher, raters: dict[str, Any]) -> np.ndarray:
        """DSIR's raw-side counts, from the pass (which scores the sample with ``raters`` meanwhile)."""
        from dataclasses import asdict

        self._pass(raters, self._merge_columns(), asdict(hasher.cfg))
        return self._counts

    def components(self, raters: dict[str, Any], columns: list[str]) -> pd.DataFrame:
        """The sample's ``columns`` in sample order: from the pass (run now if DSIR did not need it first),
        DSIR's from the n-gram counts the pass kept."""
        from dataclasses import asdict

        if not self._ran:  # no DSIR raw side to count first: its features are still kept for the scoring pass
            self._pass(raters, columns, asdict(self.cfg.dsir.model) if dsir_names(raters) else None)
        writer = ShardWriter(self.work / "components", "frame")
        dsir = [c for c in columns if c in dsir_names(raters)]
        parts = []
        for name in self.documents.names:
            part = pd.read_parquet(writer.shard_path(name))
            if dsir:
                z = _kept_features(str(self.work / DSIR_FEATURES), name, len(part))
                if z is None:
                    raise RuntimeError(f"scoring fit: the sample pass kept no DSIR features of shard {name}")
                score_dsir(part, z, raters, dsir, {})
            parts.append(part)
        return pd.concat(parts, ignore_index=True)[["id", *columns]]


def _pooled(engine: EngineConfig | None) -> bool:
    return engine is not None and (engine.engine == "ray" or engine.workers > 1)


def read_sample(documents: ShardedDataset, embeddings: ShardedDataset | None,
                threshold: int | None) -> tuple[pd.DataFrame, np.ndarray | None]:
    """The fit sample (document order; ``threshold`` from ``sample_threshold``) and its embedding rows,
    read one shard at a time."""
    frames, vectors = [], []
    for name in documents.names:
        frame = documents.read(name)
        mask = sample_mask(frame["id"], threshold)
        frames.append(frame[mask])
        if embeddings is not None:
            vectors.append(np.asarray(embeddings.array(name))[mask])
    sample = pd.concat(frames, ignore_index=True)
    return sample, (np.concatenate(vectors) if embeddings is not None else None)


def sample_passes_folder(fit_dir: Path, clean: bool = True) -> Path:
    """This process's folder for the fit's per-shard passes, beside ``fit_dir``. Private to the process: the
    scoring cache entry is shared by every run with the same key, and two runs started together fit into it
    side by side (each result lands atomically); one shared work folder let each run delete the other's
    passes mid-read (a FileNotFoundError on ``raters/edu.joblib``). Folders left by killed processes are
    removed here (their passes are cheap to redo)."""
    from curation.namespace_lock import pid_alive

    prefix = f".{fit_dir.name}.sample-passes-"
    work = fit_dir.with_name(f"{prefix}{os.getpid()}")
    if not clean:
        return work
    if fit_dir.parent.is_dir():
        for left in fit_dir.parent.glob(prefix + "*"):
            pid = left.name[len(prefix):]
            if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
                shutil.rmtree(left, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)  # this pid's own leftover (a reused pid): never another live run's
    return work


def fit_on_sample(documents: ShardedDataset, embeddings: ShardedDataset | None, cfg: ScoringConfig,
                  fit_dir: str | Path, *, meta: Mapping[str, Any] | None = None, embedder=None,
                  reference=None, engine: EngineConfig | None = None, keep_passes: bool = False,
                  ) -> dict[str, float]:
    """Fit on the sample into ``fit_dir`` (skipped when a finished fit is there); its metrics.
    ``reference``: the reference raters (``training.source=reference``; see ``fit_scoring``).
    ``engine`` with more than one worker (or Ray): the passes over the whole sample run per shard on
    it (:class:`SamplePasses`), with the same result; ``keep_passes``: their folder
    (:func:`sample_passes_folder`) is left for the caller (:func:`score_shards` reads the shards the
    sample pass scored with every rater, then removes it)."""
    from curation.scoring.persistence import save_raters

    fit_dir = Path(fit_dir)
    if (fit_dir / FIT_METRICS).is_file():
        return json.loads((fit_dir / FIT_METRICS).read_text())
    threshold = sample_threshold((documents.read(n, ["id"])["id"] for n in documents.names), cfg.fit_sample_docs)
    sample, vectors = read_sample(documents, embeddings if needs_embeddings(cfg) else None, threshold)
    log.info("scoring: fitting on a sample of %d of %d documents", len(sample), len(documents))
    hooks: dict[str, Any] = {}
    work = sample_passes_folder(fit_dir)
    engine = engine or EngineConfig()  # as run_shards: the default local pool
    if _pooled(engine):
        passes = SamplePasses(documents, embeddings, cfg, threshold, engine, work)
        hooks = {"dsir_raw_counts": passes.dsir_raw_counts, "sample_components": passes.components}
    try:
        fitted = fit_scoring(sample, vectors, cfg, embedder, reference, **hooks)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    if not keep_passes:
        shutil.rmtree(work, ignore_errors=True)
    metrics = {k: float(v) for k, v in fitted.metrics.items()}

    def write(tmp: Path) -> None:
        save_raters(fitted.raters, tmp / "raters", meta)
        if fitted.merge is not None:
            fitted.merge.save(tmp / "merge_map.npz")
        (tmp / FIT_METRICS).write_text(json.dumps(metrics, sort_keys=True))

    atomic_folder(fit_dir, write)
    del fitted, sample, vectors
    release_freed_memory()  # the sample's texts and the training copies: give the pages back before the shards
    return metrics


def release_freed_memory() -> None:
    """Return freed heap pages to the OS (glibc ``malloc_trim``). Python frees the sample's millions of
    small strings, but glibc keeps the pages, so without this the fit's peak stays resident while the
    shards are scored. A no-op where glibc is not the allocator."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


@dataclass
class ShardedScores:
    scores: ShardedDataset
    metrics: dict[str, float]  # fit metrics + the shards' summed counts
    raters_dir: Path
    cache_hit: bool


def score_shards(documents: ShardedDataset, embeddings: ShardedDataset | None, cfg: ScoringConfig,
                 folder: str | Path, engine: EngineConfig | None = None, *, config_digest: str = "",
                 keep: bool = False, meta: Mapping[str, Any] | None = None, embedder=None,
                 reference=None) -> ShardedScores:
    """Fit (once) and score every document shard into ``<folder>/scores``, aligned with ``documents``.

    Refuses embeddings that are not aligned with ``documents`` (``check_aligned_with``).
    """
    folder = Path(folder)
    if embeddings is not None:
        embeddings.check_aligned_with(documents, name="embeddings")
    elif needs_embeddings(cfg):
        raise ValueError("scoring: the edu / wiki raters need the documents' embeddings")
    out, fit_dir = folder / "scores", folder / "fit"
    hit = (out / "manifest.json").is_file() and (fit_dir / FIT_METRICS).is_file()
    fit_metrics = fit_on_sample(documents, embeddings, cfg, fit_dir, meta=meta, embedder=embedder, reference=reference,
                                engine=engine, keep_passes=not hit)
    if not hit:
        passes = sample_passes_folder(fit_dir, clean=False) / "components"
        emb_root = str(embeddings.root) if embeddings is not None and needs_embeddings(cfg) else None
        tasks = [ShardTask(n, partial(_load_inputs, str(documents.root), emb_root, n)) for n in documents.names]
        scored = ShardWriter(passes, "frame")
        if engine is not None and all(scored.is_complete(n) and scored.stats(n).get(ALL_RATERS)
                                      for n in documents.names):
            # the fit's pass scored every document: what is left is a merge per shard, here (no pool to start),
            # reading only the ids the scores are checked against
            tasks = [ShardTask(n, partial(_load_ids, str(documents.root), n)) for n in documents.names]
            engine = dataclasses.replace(engine, workers=1) if engine.engine == "local" else engine
        try:
            run_shards(partial(score_shard, fit_dir=str(fit_dir), cfg=cfg,
                               scored_by_fit=str(passes) if passes.is_dir() else None),
                       tasks, {"scores": (out, "frame")}, engine, desc="scoring")
        finally:
            shutil.rmtree(passes.parent, ignore_errors=True)
        inputs = {"documents": documents.fingerprint}
        if embeddings is not None:
            inputs["embeddings"] = embeddings.fingerprint
        ShardWriter(out, "frame").finalize(documents.names, stage="scoring", inputs=inputs,
                                           config_digest=config_digest, remake=SCORING_REMAKE,
                                           aligned_with=documents.fingerprint)
    scores = ShardedDataset(out, keep=keep)
    scores.check_aligned_with(documents, name="scores")
    applied = {k: float(v) for k, v in scores.manifest.stats.items() if k not in ("shard_seconds", "rows")}
    return ShardedScores(scores, {**fit_metrics, **applied}, fit_dir / "raters", hit)


def quality_values(scores: ShardedDataset, column: str = "quality") -> np.ndarray:
    """One column of every shard (8 bytes per document), for the share table and summaries."""
    parts = [scores.read(n, [column])[column].to_numpy(dtype=np.float64) for n in scores.names]
    return np.concatenate(parts) if parts else np.empty(0)
