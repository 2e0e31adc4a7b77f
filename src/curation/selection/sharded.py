"""Selection on a sharded pruned corpus (issue #14 item 5): bounded memory, blocks as tasks.

The pruned corpus is ``pruned_scores`` (a sharded frame: ``id``, ``quality`` ...) and
``pruned_embeddings`` (sharded ``.npy`` float32, aligned row for row). A *global position* is a
row of their concatenation in shard-then-row order. The driver holds only per-document arrays of
8 bytes (the quality column, float64; a permutation of positions, int64) and never the
embeddings or the ids of the corpus:

* ``datamask`` (DATAMASK Sec. 4.3 "Splitting", seeds/000): the candidates are cut into random
  blocks of ``block_size`` items by :func:`curation.selection.datamask.plan_blocks` (a seeded
  permutation of N int64), each with its share of the budget. Every block is an independent
  task (a spawned process locally, ``selection.block_workers`` at once, or a Ray task) that
  gathers only its rows' embeddings from the memory-mapped shards, runs
  :func:`~curation.selection.datamask.run_block` with per-block checkpoints, and writes its
  selected positions with a completion marker: a finished block is never redone and a killed
  one resumes from its last checkpoint. The merge concatenates the blocks' selections.
  Because the plan and the per-block seeds are those of the in-process
  :func:`~curation.selection.datamask.select_datamask`, every block sees the same rows in the same
  order and the same random stream, so the selection is the in-process one (same items; the
  tests check one block and several blocks; only the float summation order of a different torch
  thread count could move an item).
* ``topk_quality`` and ``random`` work on the quality column alone (8 bytes/doc): exact global
  top-k with ties to the earlier position, or a seeded choice of k of N positions (the in-memory
  :func:`~curation.selection.baselines.select_topk_quality` / ``select_random`` results).
* ``greedy`` whose batches each read only their own rows (DiSF, PWS: :mod:`curation.selection.greedy_shards`)
  streams DiSF Algorithm 1's batches from the shards, one in memory at a time, with no limit.
* ``greedy`` otherwise (facility location, block-standardised or standardised two-term objectives),
  ``semdedup`` and ``dvrl`` hold their whole candidate set (and copies of it: greedy's
  float64 objective, SemDeDup's k-means and per-cluster similarity blocks) in one process: they
  run on the gathered candidate pool up to :data:`MAX_ITEMS` (or ``selection.max_items``) and refuse
  past it, naming datamask / topk_quality / random or ``budget.candidates``.

Selected ids and selected documents are written per shard (:func:`write_selected_documents`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from curation.cache import atomic_write, atomic_write_text, save_npy
from curation.selection.budget import kept_by_min_quality
from curation.selection.config import UNIT_DIVERSITIES, parse_selection_config
from curation.shards.executor import EngineConfig, ShardResult, ShardTask, run_shards
from curation.shards.lineage import LineageError, check_manifest_inputs
from curation.shards.store import ShardedDataset, ShardWriter

log = logging.getLogger(__name__)

# Candidates an in-memory method may hold, by method. Greedy keeps a float64 copy of the candidate
# embeddings (N x d x 8 bytes: 0.6 GB at 200k x 384) plus per-candidate gains; DVRL a float32 copy
# plus its network's activations; SemDeDup k-means plus per-cluster similarity blocks.
MAX_ITEMS = {"greedy": 200_000, "dvrl": 200_000, "semdedup": 500_000}
STREAMING = ("datamask", "topk_quality", "random")
DIAGNOSE_MAX = 200_000  # describe_selection diagnoses a seeded sample of this many candidates past it


def diagnosis_sample(pool: np.ndarray, seed: int, limit: int | None = None) -> tuple[np.ndarray, bool]:
    """The candidate positions ``describe_selection`` diagnoses: all of ``pool``, or past ``limit``
    (default :data:`DIAGNOSE_MAX`) a seeded random sample of that many, sorted; and whether it sampled."""
    limit = DIAGNOSE_MAX if limit is None else limit
    if len(pool) <= limit:
        return pool, False
    rng = np.random.default_rng([seed, 104729])
    return np.sort(rng.choice(pool, size=limit, replace=False)), True


class ScaleLimitError(ValueError):
    """An in-memory method was asked to hold more candidates than its limit."""


def check_scale(method: str, n_candidates: int, max_items: Optional[int] = None) -> None:
    """Refuse an in-memory method past its limit (``selection.max_items``, else :data:`MAX_ITEMS`)."""
    if method in STREAMING:
        return
    limit = int(max_items) if max_items is not None else MAX_ITEMS.get(method)
    if limit is not None and n_candidates > limit:
        streams = (" greedy streams its batches when each batch's objective is its own: diversity disf or pws, "
                   "with standardize false or lam 0 or 1 (selection=greedy_disf does)." if method == "greedy" else "")
        raise ScaleLimitError(
            f"selection.method={method} holds every candidate in one process; its limit is {limit:,} items "
            f"(selection.max_items), the candidate pool has {n_candidates:,}. Use selection=datamask (independent "
            f"blocks), selection=topk_quality or selection=random (stream the quality column), or select from a "
            f"seeded subsample with budget.candidates=<= {limit}.{streams}")


# --- positions, quality, ids, embeddings ---


def offsets(dataset: ShardedDataset) -> np.ndarray:
    """Global position of the first row of each shard, plus the total (len = shards + 1)."""
    return np.concatenate([[0], np.cumsum([s.rows for s in dataset.manifest.shards])]).astype(np.int64)


def read_quality(pruned_scores: ShardedDataset, column: str = "quality") -> np.ndarray:
    """The quality column in global position order, float64 (8 bytes/doc)."""
    from curation.pruning import quality_column

    return quality_column(pruned_scores, column, key="selection.score")


def by_shard(dataset: ShardedDataset, positions: np.ndarray) -> dict[str, np.ndarray]:
    """Sorted global ``positions`` -> ``{shard name: local rows}`` (shards without rows omitted)."""
    bounds = offsets(dataset)
    positions = np.asarray(positions, dtype=np.int64)
    cut = np.searchsorted(positions, bounds)
    out = {}
    for i, name in enumerate(dataset.names):
        part = positions[cut[i]:cut[i + 1]]
        if len(part):
            out[name] = part - bounds[i]
    return out


def gather_rows(embeddings: ShardedDataset, positions: np.ndarray) -> np.ndarray:
    """The float32 rows at sorted global ``positions``, read from memory-mapped shards: only the
    pages of those rows are touched, so memory is the gathered rows."""
    positions = np.asarray(positions, dtype=np.int64)
    if len(positions) and (np.diff(positions) <= 0).any():
        raise ValueError("gather_rows needs strictly increasing positions")
    width = json.loads(embeddings.manifest.schema.get("shape_tail", "[0]"))
    out = np.empty((len(positions), *width), dtype=np.float32)
    at = 0
    for name, rows in by_shard(embeddings, positions).items():
        out[at:at + len(rows)] = embeddings.array(name, mmap=True)[rows]
        at += len(rows)
    return out


def gather_to_file(embeddings: ShardedDataset, positions: np.ndarray, path: Path, *,
                   normalize: bool = False) -> np.ndarray:
    """:func:`gather_rows` into a block-local ``.npy`` file, returned memory-mapped (copy-on-write).

    A DataMask block reads its input rows for its whole run. File-backed, clean pages are page
    cache the kernel can drop and re-read under memory pressure, whereas an anonymous copy is not.
    Values are those of :func:`gather_rows` (NaN/inf refused, checked in slices).

    ``normalize``: write ``F.normalize(rows, dim=1)`` instead (row by row the same values as
    normalising the whole matrix), for objectives that read only unit vectors: the objective then
    keeps no copy at all (``run_block(..., unit_rows=True)``)."""
    positions = np.asarray(positions, dtype=np.int64)
    if len(positions) and (np.diff(positions) <= 0).any():
        raise ValueError("gather_to_file needs strictly increasing positions")
    width = json.loads(embeddings.manifest.schema.get("shape_tail", "[0]"))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(len(positions), *width))
    at = 0
    for name, rows in by_shard(embeddings, positions).items():
        for lo in range(0, len(rows), 65536):  # slices: a bounded temporary per copy
            part = embeddings.array(name, mmap=True)[rows[lo:lo + 65536]]
            if not np.isfinite(part).all():
                raise ValueError(f"embeddings shard {name} has NaN or inf values (rows {rows[lo]}..)")
            if normalize:
                import torch
                import torch.nn.functional as F

                part = F.normalize(torch.from_numpy(part), dim=1).numpy()
            out[at:at + len(part)] = part
            at += len(part)
    out.flush()
    del out
    os.replace(tmp, path)
    return np.load(path, mmap_mode="c")


def read_ids(pruned_scores: ShardedDataset, positions: np.ndarray) -> dict[str, np.ndarray]:
    """``{shard: ids}`` of the rows at sorted global ``positions`` (reads the id column shard by shard)."""
    out = {}
    for name, rows in by_shard(pruned_scores, positions).items():
        out[name] = pruned_scores.read(name, ["id"])["id"].astype(str).to_numpy()[rows]
    return out


# --- streaming methods ---


def topk_positions(quality: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` highest scores, ties to the earlier position: ``select_topk_quality`` without its full
    argsort (one ``np.partition`` for the k-th score, then the tied rows in position order)."""
    q = np.asarray(quality, dtype=np.float64)
    if not 0 < k <= len(q):
        raise ValueError(f"k={k} must be in (0, {len(q)}]")
    kth = np.partition(q, len(q) - k)[len(q) - k]  # the k-th highest score
    above = np.flatnonzero(q > kth)
    tied = np.flatnonzero(q == kth)[: k - len(above)]
    return np.sort(np.concatenate([above, tied])).astype(np.int64)


# --- DataMask blocks as independent tasks ---


@dataclass
class BlockTask:
    """One DataMask block: its rows (global positions into the pruned corpus) and budget."""

    block_id: int
    budget: int
    embeddings_root: str
    work: str  # <work>/blocks
    config: dict  # DataMaskConfig as a dict
    seed: int
    threads: int = 1

    def paths(self) -> dict[str, Path]:
        stem = Path(self.work) / f"block_{self.block_id:05d}"
        return {"positions": stem.with_suffix(".positions.npy"), "quality": stem.with_suffix(".quality.npy"),
                "selected": stem.with_suffix(".selected.npy"), "history": stem.with_suffix(".history.parquet"),
                "done": stem.with_suffix(".done.json"), "rows": stem.with_suffix(".rows.npy"),
                "progress": stem.with_suffix(".progress.json")}


PROGRESS_WRITE_S = 1.0  # a block's progress file is rewritten at most this often (and at its last step)
PROGRESS_POLL_S = 1.0  # the driver reads the blocks' progress files this often while they run


class BlockProgressFile:
    """The progress callback of a block task: ``<block>.progress.json`` holds the steps done, the block's
    step count and the latest objective (``{"step", "steps", "values", "values_step"}``), rewritten
    atomically at most once per :data:`PROGRESS_WRITE_S` and at the last step, so a block in another process
    (or a Ray task) costs no queue or connection to report, a loop of millisecond steps no file per step, and
    the driver reads whole files only (:class:`BlockSteps`; it reads once a second, so a file more often would
    be read by no one). ``forward``: a callback of this process to call as well, with every step and every
    history row (the in-process path)."""

    def __init__(self, path: Path, forward: Optional[Callable[..., None]] = None) -> None:
        self.path, self.forward = Path(path), forward
        self.state: dict[str, Any] = {"step": 0, "steps": 0, "values": {}, "values_step": -1}
        self._written_at = -float("inf")
        self._written: dict[str, Any] = {}

    def _write(self) -> None:
        atomic_write_text(self.path, json.dumps(self.state))
        self._written_at, self._written = time.monotonic(), {**self.state, "values": dict(self.state["values"])}

    def _maybe_write(self, done: int, total: int) -> None:
        if (done >= total and self.state != self._written) or \
                time.monotonic() - self._written_at >= PROGRESS_WRITE_S:
            self._write()

    def __call__(self, done: int, total: int) -> None:
        self.state.update(step=int(done), steps=int(total))
        self._maybe_write(done, total)
        if self.forward is not None:
            self.forward(done, total)

    def values(self, done: int, total: int, values: Mapping[str, float]) -> None:
        self.state.update(step=int(done), steps=int(total), values={k: float(v) for k, v in values.items()},
                          values_step=int(done))
        self._maybe_write(done, total)
        if self.forward is not None:
            from curation.selection.progress import report_values

            report_values(self.forward, done, total, values)


class BlockSteps:
    """The steps of every block of one :func:`run_datamask_blocks` call as one count for its ``progress``
    callback, and the blocks' objective (the mean of each block's latest values; with one block, that block's)
    for the callback's ``values`` method. Blocks report by :meth:`update` (in this process) or through their
    progress files (:meth:`poll`, for blocks in other processes)."""

    def __init__(self, tasks: Sequence["BlockTask"], steps: int, progress: Callable[..., None]) -> None:
        self.progress, self.steps = progress, int(steps)
        self.tasks = list(tasks)
        self.done = {t.block_id: (self.steps if t.paths()["done"].is_file() else 0) for t in tasks}
        self.values: dict[int, tuple[int, dict[str, float]]] = {}
        self.total = self.steps * len(self.tasks)

    def update(self, block_id: int, done: int, values: Optional[Mapping[str, float]] = None,
               values_step: int = -1) -> None:
        self.done[block_id] = max(self.done.get(block_id, 0), int(done))
        count = sum(self.done.values())
        self.progress(count, self.total)
        if values and values_step > self.values.get(block_id, (-1, {}))[0]:
            self.values[block_id] = (values_step, dict(values))
            latest = [v for _, v in self.values.values()]
            mean = {k: sum(v[k] for v in latest) / len(latest) for k in latest[0] if all(k in v for v in latest)}
            from curation.selection.progress import report_values

            report_values(self.progress, count, self.total, mean)

    def block_callback(self, task: "BlockTask") -> "BlockProgressFile":
        """The callback of a block run in this process: its progress file, and :meth:`update` at once."""
        steps = self

        class _Forward:
            def __call__(self, done: int, total: int) -> None:
                steps.update(task.block_id, done)

            def values(self, done: int, total: int, values: Mapping[str, float]) -> None:
                steps.update(task.block_id, done, values, done)

        return BlockProgressFile(task.paths()["progress"], _Forward())

    def poll(self) -> None:
        """Read every block's progress file (a missing or unreadable one is skipped: read next time)."""
        changed = False
        for task in self.tasks:
            try:
                state = json.loads(task.paths()["progress"].read_text())
            except (OSError, ValueError):
                continue
            known = self.values.get(task.block_id, (-1, {}))[0]
            if int(state.get("step", 0)) > self.done.get(task.block_id, 0) or int(state.get("values_step", -1)) > known:
                changed = True
                self.update(task.block_id, int(state.get("step", 0)), state.get("values") or None,
                            int(state.get("values_step", -1)))
        if not changed:
            self.progress(sum(self.done.values()), self.total)


def run_block_task(task: BlockTask, progress: Optional[Callable[..., None]] = None) -> dict:
    """Gather one block's embeddings from the memory-mapped shards, run DataMask on it
    (:func:`~curation.selection.datamask.run_block`, checkpointing into ``<work>/ckpt`` and resuming
    from it), write its selected global positions and history, then the completion marker. Its steps and
    objective go to ``<block>.progress.json`` as it runs (:class:`BlockProgressFile`; ``progress``, when
    given: a callback of this process called as well)."""
    import torch

    from curation.selection.datamask import resolve_device, run_block

    paths = task.paths()
    if paths["done"].is_file():
        return json.loads(paths["done"].read_text())
    torch.set_num_threads(max(1, task.threads))
    cfg = parse_selection_config("datamask", {**task.config, "checkpoint_dir": str(Path(task.work) / "ckpt"),
                                              "resume": True})
    positions = np.load(paths["positions"])
    quality = np.load(paths["quality"])
    # PWS and facility location read only unit vectors: the block file holds them, so the block's
    # anonymous memory holds no N x d copy (DiSF standardises the raw features: those are kept)
    unit_rows = cfg.diversity in UNIT_DIVERSITIES
    embeddings = gather_to_file(ShardedDataset(task.embeddings_root), positions, paths["rows"], normalize=unit_rows)
    device = block_device(resolve_device(cfg.device), task.block_id,
                          torch.cuda.device_count() if torch.cuda.is_available() else 0)
    started = time.perf_counter()
    result = run_block(torch.from_numpy(embeddings).to(device), torch.from_numpy(quality).to(device), task.budget,
                       cfg, seed=task.seed, block_id=task.block_id, unit_rows=unit_rows,
                       progress=progress if isinstance(progress, BlockProgressFile)
                       else BlockProgressFile(paths["progress"], progress))
    del embeddings
    paths["rows"].unlink(missing_ok=True)
    selected = positions[result.indices]
    atomic_write(paths["selected"], lambda p: save_npy(p, selected))
    atomic_write(paths["history"], lambda p: result.history.to_parquet(p, index=False))
    info = {k: (float(v) if isinstance(v, (int, float, np.number)) else v) for k, v in result.info.items()}
    info["block_seconds"] = time.perf_counter() - started
    atomic_write_text(paths["done"], json.dumps(info))
    return info


def block_device(device, block_id: int, n_gpus: int):
    """The device of one block task: a bare ``cuda`` (``device: cuda`` or ``auto`` on a GPU machine)
    becomes ``cuda:<block_id mod n_gpus>``, so ``selection.block_workers`` = the number of GPUs runs one
    block per GPU at once; an explicit ``cuda:i`` or ``cpu`` is kept. (Under Ray a block task reserves
    one GPU and sees only that one: ``n_gpus`` is then 1.)"""
    import torch

    device = torch.device(device)
    if device.type == "cuda" and device.index is None and n_gpus > 1:
        return torch.device("cuda", block_id % n_gpus)
    return device


def _run_blocks_local(tasks: Sequence[BlockTask], workers: int, in_process: Optional[bool],
                      steps: Optional[BlockSteps] = None) -> None:
    if in_process is None:
        in_process = len(tasks) == 1 and workers == 1
    if in_process:
        # One block at a time and only one to run (every corpus that fits one block, the default job's
        # included): this process runs it. A spawned child would add ~3 s of interpreter start and
        # imports (5.2 s of DataMask took 8.3 s on the bundled corpus) for the same selection, and its
        # memory is freed all the same (the block's rows are file-backed; large tensors are unmapped).
        import torch

        threads = torch.get_num_threads()
        try:
            for task in tasks:
                if steps is None:
                    run_block_task(task)
                else:
                    run_block_task(task, steps.block_callback(task))
        finally:
            torch.set_num_threads(threads)  # run_block_task sets the block's own
        return
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    # spawn: a clean interpreter per block (no forked torch thread pools); one task per child, so a
    # block's memory is returned to the system when it ends
    from curation.processes import die_with_parent

    # each block process dies with this one (a killed curate leaves no worker writing into its folders)
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"), max_tasks_per_child=1,
                             initializer=die_with_parent, initargs=(os.getpid(),)) as pool:
        futures = [pool.submit(run_block_task, task) for task in tasks]
        if steps is not None:  # the blocks report through their progress files: read them while they run
            from concurrent.futures import FIRST_EXCEPTION, wait

            while wait(futures, timeout=PROGRESS_POLL_S, return_when=FIRST_EXCEPTION).not_done:
                if any(f.done() and f.exception() is not None for f in futures):
                    break
                steps.poll()
        for future in futures:
            future.result()


def _run_blocks_ray(tasks: Sequence[BlockTask], engine: EngineConfig, workers: int,
                    steps: Optional[BlockSteps] = None) -> None:
    from curation.shards.executor import gpus_per_task, ray_session

    with ray_session(engine) as ray:
        # a block on cuda/auto reserves one GPU when the cluster has any (one block per GPU at once)
        on_gpu = bool(tasks) and str(tasks[0].config.get("device", "cpu")) != "cpu"
        gpus = gpus_per_task("auto", ray.cluster_resources()) if on_gpu else 0.0
        remote = ray.remote(num_cpus=max(1, tasks[0].threads) if tasks else 1, num_gpus=gpus, max_retries=2,
                            retry_exceptions=False)(run_block_task)
        refs = [remote.remote(t) for t in tasks]
        # the blocks' progress files (on a cluster, seen where the work folder is shared)
        while steps is not None and ray.wait(refs, num_returns=len(refs), timeout=PROGRESS_POLL_S)[1]:
            steps.poll()
        ray.get(refs)


def run_datamask_blocks(quality: np.ndarray, positions: np.ndarray, pruned_embeddings: ShardedDataset, budget: int,
                        config: Mapping[str, Any], seed: int, work: str | Path, *, engine: EngineConfig | None = None,
                        block_workers: int | None = None, in_process: Optional[bool] = None,
                        progress: Optional[Callable[[int, int], None]] = None) -> tuple[np.ndarray, pd.DataFrame, dict]:
    """DataMask over the candidates at global ``positions`` (sorted; ``quality`` aligned with them)
    as independent block tasks. Returns (selected global positions, sorted; history; info).

    The plan is :func:`~curation.selection.datamask.plan_blocks` (one block in input order when the
    candidates fit in ``block_size``; otherwise a seeded permutation of the N candidates, 8 bytes
    each, cut into near-equal blocks with the budget split in proportion), after the in-place
    ``min_quality`` pruning :func:`curation.selection.select` applies. ``in_process=True`` runs the
    blocks in this process, ``False`` each in a spawned process (``block_workers`` at a time), ``None``
    (default) the first when a single block is pending and ``block_workers`` is 1, else the second; with
    ``engine.engine == "ray"`` each block is a Ray task.
    """
    from curation.selection.datamask import plan_blocks, summarize_blocks

    cfg = parse_selection_config("datamask", config)
    q = np.asarray(quality, dtype=np.float64)
    if not np.isfinite(q).all():
        raise ValueError(f"quality contains NaN or inf ({int((~np.isfinite(q)).sum())} values)")
    kept = kept_by_min_quality(q, cfg.min_quality, budget)
    blocks_dir = Path(work) / "blocks"
    blocks_dir.mkdir(parents=True, exist_ok=True)
    plan = plan_blocks(len(kept), budget, cfg.block_size, seed)
    # block_workers and max_items say how the blocks run, not what a block selects: kept out of a block's
    # checkpoint fingerprint, so a resumed run may use other values
    as_dict = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("method", "block_workers", "max_items")}
    workers = max(1, int(block_workers or cfg.block_workers or 1))
    threads = max(1, (os.cpu_count() or 1) // workers)
    tasks = []
    for block_id, (ids, block_budget) in enumerate(plan):
        task = BlockTask(block_id, int(block_budget), str(pruned_embeddings.root), str(blocks_dir), as_dict, int(seed),
                         threads)
        paths = task.paths()
        if not paths["done"].is_file():
            rows = kept[ids]
            # the block's inputs are files, so a task pickles a few paths, not a million positions
            block_positions = np.asarray(positions, dtype=np.int64)[rows]
            atomic_write(paths["positions"], lambda p: save_npy(p, block_positions))
            block_quality = q[rows].astype(np.float32)  # select() hands DataMask float32 quality
            atomic_write(paths["quality"], lambda p: save_npy(p, block_quality))
        tasks.append(task)
    del plan
    pending = [t for t in tasks if not t.paths()["done"].is_file()]
    if len(pending) < len(tasks):
        log.info("datamask: %d of %d blocks already finished, skipped", len(tasks) - len(pending), len(tasks))
    started = time.perf_counter()
    # progress in steps (all blocks together) as they run, not in blocks at the end: one block of 10,000
    # steps is the whole run of a 1M-candidate corpus
    for task in pending:  # a killed run's progress file: the resumed block writes its own from its checkpoint
        task.paths()["progress"].unlink(missing_ok=True)
    steps = BlockSteps(tasks, cfg.steps, progress) if progress is not None else None
    if steps is not None:  # the step count at once: a block gathers its rows and builds its objective first
        progress(sum(steps.done.values()), steps.total)
    if pending:
        if engine is not None and engine.engine == "ray":
            _run_blocks_ray(pending, engine, workers, steps)
        else:
            _run_blocks_local(pending, workers, in_process, steps)
    if steps is not None:
        steps.poll()
        for task in tasks:  # every block finished: all steps done (a resumed block may have skipped its last write)
            steps.done[task.block_id] = steps.steps
        progress(steps.total, steps.total)
    picked, histories, infos = [], [], []
    for task in tasks:
        paths = task.paths()
        picked.append(np.load(paths["selected"]))
        history = pd.read_parquet(paths["history"])
        if len(history):
            histories.append(history)
        infos.append(json.loads(paths["done"].read_text()))
    selected = np.sort(np.concatenate(picked)) if picked else np.empty(0, dtype=np.int64)
    history = pd.concat(histories, ignore_index=True) if histories else pd.DataFrame()
    info = {"n_blocks": len(tasks), "blocks_run": len(pending), "block_workers": workers,
            "blocks_seconds": time.perf_counter() - started, "dropped_min_quality": len(q) - len(kept)}
    if len(selected) != budget or len(np.unique(selected)) != budget:
        raise RuntimeError(f"datamask blocks returned {len(np.unique(selected))} unique of {len(selected)} "
                           f"positions, budget {budget}")
    return selected.astype(np.int64), history, {**info, **summarize_blocks(infos), "blocks": infos}


# --- selected documents as shards ---


def _load_document_shard(documents_root: str, ids_root: str, name: str) -> tuple[pd.DataFrame, np.ndarray]:
    path = Path(ids_root) / f"{name}.parquet"
    ids = pd.read_parquet(path)["id"].to_numpy() if path.is_file() else np.empty(0, dtype=object)
    return ShardedDataset(documents_root).read(name), ids


def _select_shard(loaded: tuple[pd.DataFrame, np.ndarray], name: str) -> ShardResult:
    frame, ids = loaded
    keep = frame["id"].astype(str).isin(pd.Index(ids.astype(str)))
    chosen = frame.loc[keep.to_numpy()].reset_index(drop=True)
    if len(chosen) != len(ids):
        missing = sorted(set(ids.astype(str)) - set(chosen["id"].astype(str)))
        raise LineageError(
            f"selection: {len(missing)} selected ids of shard {name} are not in documents shard {name}, e.g. "
            f"{missing[:3]}: the pruned corpus was made from other documents (re-ingested since?). Re-make it with "
            f"`curate pipeline=scoring+pruning`.")
    from curation.data.tokens import count_tokens

    chosen["n_tokens"] = count_tokens(chosen["text"].tolist())  # reference tokens (curation.data.tokens)
    return ShardResult({"selected_documents": chosen}, {"selected": len(chosen), "documents": len(frame),
                                                        "selected_tokens": int(chosen["n_tokens"].sum())})


def write_selected_documents(documents: ShardedDataset, ids_by_shard: Mapping[str, np.ndarray], work: str | Path,
                             *, engine: EngineConfig | None = None, inputs: Mapping[str, str] | None = None,
                             config_digest: str = "") -> ShardedDataset:
    """``<work>/selected_documents``: per documents shard, the rows whose id was selected, in document
    order (parquet shards a trainer can read), through :func:`~curation.shards.run_shards` (local or Ray,
    resumable). Raises :class:`LineageError` if a selected id is not in its documents shard."""
    work = Path(work)
    unknown = sorted(set(ids_by_shard) - set(documents.names))
    if unknown:
        raise LineageError(f"selection: the pruned corpus has shards {unknown[:3]} that documents ({documents.root}) "
                           "has not: it was made from other documents. Re-make it with "
                           "`curate pipeline=scoring+pruning`.")
    ids_root = work / "selected_ids_by_shard"
    ids_root.mkdir(parents=True, exist_ok=True)
    for name, ids in ids_by_shard.items():
        part = pd.DataFrame({"id": np.asarray(ids, dtype=object)})
        atomic_write(ids_root / f"{name}.parquet", lambda p, v=part: v.to_parquet(p, index=False))
    tasks = [ShardTask(name, partial(_load_document_shard, str(documents.root), str(ids_root), name))
             for name in documents.names]
    out = work / "selected_documents"
    run_shards(_select_shard, tasks, {"selected_documents": (out, "frame")}, engine or EngineConfig(),
               desc="selected documents")
    ShardWriter(out, "frame").finalize(documents.names, stage="selection", inputs=dict(inputs or {}),
                                       config_digest=config_digest, remake="curate pipeline=selection")
    return ShardedDataset(out)


# --- lineage ---


def check_selection_inputs(documents: ShardedDataset, pruned_scores: ShardedDataset,
                           pruned_embeddings: ShardedDataset) -> None:
    """Refuse a pruned corpus not made from the current ``documents`` (issue #14 item 6), or pruned
    embeddings not aligned with the pruned scores. Raises :class:`LineageError` naming the stale
    dataset and the command that re-makes it."""
    check_manifest_inputs("selection", "pruned_scores", pruned_scores.manifest.inputs,
                          {"documents": documents.fingerprint})
    pruned_embeddings.check_aligned_with(pruned_scores, name="pruned_embeddings")
    unknown = sorted(set(pruned_scores.names) - set(documents.names))
    if unknown:
        raise LineageError(f"selection: pruned_scores has shards {unknown[:3]} that documents has not: it is stale. "
                           "Re-make it with `curate pipeline=scoring+pruning`.")
