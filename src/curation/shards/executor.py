"""Run a plain per-shard function over input shards: locally one at a time, or as Ray tasks.

The function never knows which engine runs it (datatrove's ``LocalPipelineExecutor`` /
``RayPipelineExecutor`` split, STYLE.md section 6): it gets one loaded shard and returns
its outputs and counts. The engine

* skips shards whose completion marker exists in every output (``skip_completed``),
* redoes a shard killed half-way (no marker: its partial files are overwritten),
* writes each output shard atomically, then the per-shard stats JSON, then the markers,
* returns the per-shard stats in input order, so counts add up across shards.

Both engines write through the same :func:`run_one`, so their outputs are byte-identical
shard for shard (the Ray test checks the digests).
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from curation.shards.store import ShardWriter

log = logging.getLogger(__name__)

ShardValue = pd.DataFrame | np.ndarray


@dataclass
class ShardTask:
    """One unit of work: a shard name (also the output shard name) and how to load its input."""

    name: str
    load: Callable[[], Any]  # must pickle for the Ray engine (a module-level function / partial)


@dataclass
class ShardResult:
    outputs: dict[str, ShardValue]  # output name -> this shard's rows (keys of the ``outputs`` writers)
    stats: dict[str, float] = field(default_factory=dict)  # counts that add up across shards


@dataclass
class EngineConfig:
    engine: str = "local"  # local | ray
    ray_address: str | None = None  # None = start a local Ray instance; "auto" / "ray://host:10001" = a cluster
    ray_num_cpus: float = 1.0  # CPUs reserved per shard task (fractional allowed)
    # GPUs reserved per shard task: a number, or "auto" = 1 when the cluster has GPUs, else 0 (the
    # embedding stage asks "auto" for a transformer model whose device is not "cpu")
    ray_num_gpus: float | str = 0.0
    max_in_flight: int = 0  # Ray tasks submitted at once; 0 = 2 x cluster CPUs (bounds driver memory)
    progress: bool = True  # a progress line per finished shard


def _writers(outputs: Mapping[str, tuple[str | Path, str]]) -> dict[str, ShardWriter]:
    return {key: ShardWriter(root, kind) for key, (root, kind) in outputs.items()}


def run_one(fn: Callable[[Any, str], ShardResult], task: ShardTask,
            outputs: Mapping[str, tuple[str | Path, str]]) -> dict[str, float]:
    """Load, process and write one shard; returns its stats. Markers go last, so a crash before
    them leaves the shard unfinished in every output."""
    writers = _writers(outputs)
    start = time.perf_counter()
    result = fn(task.load(), task.name)
    if set(result.outputs) != set(writers):
        raise ValueError(f"shard {task.name}: function returned outputs {sorted(result.outputs)}, "
                         f"expected {sorted(writers)}")
    infos = {key: writers[key].write(task.name, value) for key, value in result.outputs.items()}
    stats = {**result.stats, "shard_seconds": time.perf_counter() - start}
    first = next(iter(writers.values()))
    first.write_stats(task.name, stats)
    for key, info in infos.items():
        writers[key].mark_complete(info)
    return stats


def run_shards(
    fn: Callable[[Any, str], ShardResult],
    tasks: Sequence[ShardTask],
    outputs: Mapping[str, tuple[str | Path, str]],
    engine: EngineConfig | None = None,
    *,
    desc: str = "shards",
) -> list[dict[str, float]]:
    """Run ``fn`` on every unfinished shard; return every shard's stats, in task order.

    ``outputs`` maps an output name to ``(folder, kind)``; the first output's folder also holds
    the per-shard ``stats/``. Finished shards are not re-run (their stats are read back).
    """
    engine = engine or EngineConfig()
    writers = _writers(outputs)
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        raise ValueError(f"{desc}: shard names are not unique")
    pending = [t for t in tasks if not all(w.is_complete(t.name) for w in writers.values())]
    skipped = len(tasks) - len(pending)
    if skipped:
        log.info("%s: %d of %d shards already finished, skipped", desc, skipped, len(tasks))
    if engine.engine == "local":
        for i, task in enumerate(pending, 1):
            stats = run_one(fn, task, outputs)
            if engine.progress:
                log.info("%s: shard %s done (%d/%d pending) in %.1fs", desc, task.name, i, len(pending),
                         stats["shard_seconds"])
    elif engine.engine == "ray":
        _run_ray(fn, pending, outputs, engine, desc)
    else:
        raise ValueError(f"engine must be 'local' or 'ray', got {engine.engine!r}")
    first = next(iter(writers.values()))
    return [first.stats(n) for n in names]


@contextmanager
def ray_session(engine: EngineConfig):
    """Ray, connected to ``engine.ray_address`` (a local instance when None) unless already up; a
    session started here is shut down on exit."""
    try:
        import ray
    except ImportError as err:
        raise ImportError("engine=ray needs Ray: pip install -e '.[ray]'") from err
    started_here = False
    if not ray.is_initialized():
        ray.init(address=engine.ray_address, include_dashboard=False, log_to_driver=False, configure_logging=False)
        started_here = True
    try:
        yield ray
    finally:
        if started_here:
            ray.shutdown()


def gpus_per_task(setting: float | str, cluster_resources: Mapping[str, float]) -> float:
    """GPUs a Ray task reserves: ``setting`` as a number, or for "auto" one GPU when the cluster has any.

    Ray gives a task that reserves GPUs its own ``CUDA_VISIBLE_DEVICES`` (so ``device: auto`` finds the
    GPU), and one that reserves none no GPU at all."""
    if setting == "auto":
        return 1.0 if float(cluster_resources.get("GPU", 0)) > 0 else 0.0
    value = float(setting)
    if value < 0:
        raise ValueError(f"ray_num_gpus must be >= 0 or 'auto', got {setting!r}")
    return value


def _run_ray(fn, pending: Sequence[ShardTask], outputs, engine: EngineConfig, desc: str) -> None:
    with ray_session(engine) as ray:
        gpus = gpus_per_task(engine.ray_num_gpus, ray.cluster_resources())
        remote = ray.remote(num_cpus=engine.ray_num_cpus, num_gpus=gpus, max_retries=2,
                            retry_exceptions=False)(run_one)
        limit = engine.max_in_flight or max(2, int(2 * ray.cluster_resources().get("CPU", 1)))
        queue = list(pending)
        in_flight: dict[Any, str] = {}
        done = 0
        # Bounded submission: at most ``limit`` shards are in flight, so the object store and the
        # driver hold a few shards' stats, never the corpus.
        while queue or in_flight:
            while queue and len(in_flight) < limit:
                task = queue.pop(0)
                in_flight[remote.remote(fn, task, dict(outputs))] = task.name
            ready, _ = ray.wait(list(in_flight), num_returns=1)
            for ref in ready:
                name = in_flight.pop(ref)
                stats = ray.get(ref)  # an error in fn is raised here, not retried (retry_exceptions=False)
                done += 1
                if engine.progress:
                    log.info("%s [ray]: shard %s done (%d/%d) in %.1fs", desc, name, done, len(pending),
                             stats["shard_seconds"])


def sum_stats(per_shard: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Add per-shard counts (keys missing in a shard count as 0)."""
    total: dict[str, float] = {}
    for stats in per_shard:
        for key, value in stats.items():
            if isinstance(value, (int, float)):
                total[key] = total.get(key, 0) + value
    return total
