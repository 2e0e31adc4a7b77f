"""Run a plain per-shard function over input shards: locally (in the driver, or in a pool of
``workers`` processes), or as Ray tasks.

The function never knows which engine runs it (datatrove's ``LocalPipelineExecutor`` /
``RayPipelineExecutor`` split, STYLE.md section 6): it gets one loaded shard and returns
its outputs and counts. The engine

* skips shards whose completion marker exists in every output (``skip_completed``),
* redoes a shard killed half-way (no marker: its partial files are overwritten),
* writes each output shard atomically, then the per-shard stats JSON, then the markers,
* returns the per-shard stats in input order, so counts add up across shards.

Both engines write through the same :func:`run_one`, so their outputs are byte-identical
shard for shard (the Ray test checks the digests, ``tests/shards/test_workers.py`` the local pool's).

The local engine with ``workers > 1`` runs :func:`run_one` in a ``ProcessPoolExecutor`` started
once per :func:`run_shards` call: ``fn`` and the output folders reach each worker once (the pool's
initializer), a task pickles only its :class:`ShardTask`, and at most ``workers`` shards are
submitted at a time, so memory is about ``workers`` x one shard. Heavy per-stage state (a fitted
fastText model, an embedder) is loaded by ``fn`` through a per-process cache
(``curation.scoring.sharded.load_fitted``, ``curation.embedding.sharded.shared_embedder``), as under
Ray: once per worker, not once per shard.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import select
import signal
import tempfile
import threading
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from curation.errors import UserError
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
    # local engine: shards processed at once, each in a worker process (memory ~ workers x one shard);
    # 1 = one shard at a time in the driver. The config's data.workers defaults to cpus_available()
    # (engine_from_data); this class keeps 1, so a direct caller's fn need not pickle.
    workers: int = 1


def cpus_available() -> int:
    """CPUs this process may use: its affinity mask (``taskset``, a container's cpuset), else the
    machine's count. In a shard worker: its share, the driver's CPUs divided by ``workers`` (so a
    stage that starts its own pool, like the static embedder, does not multiply the processes)."""
    if _WORKER_CPUS:
        return _WORKER_CPUS
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def engine_from_data(data: Mapping[str, Any] | None, engine: str | None = None) -> EngineConfig:
    """The per-shard engine of the ``data`` group: ``data.engine`` (or ``engine``, a stage's own
    choice; ``inprocess`` = ``local``), ``data.ray_address`` and ``data.workers`` (None = every CPU
    this process may use)."""
    data = data or {}
    name = engine or data.get("engine") or "local"
    workers = data.get("workers")
    workers = cpus_available() if workers is None else int(workers)
    if workers < 1:
        raise ValueError(f"data.workers must be >= 1 or null (= the CPUs available), got {workers}")
    return EngineConfig(engine="local" if name == "inprocess" else name, ray_address=data.get("ray_address"),
                        workers=workers)


def _writers(outputs: Mapping[str, tuple[str | Path, str]]) -> dict[str, ShardWriter]:
    return {key: ShardWriter(root, kind) for key, (root, kind) in outputs.items()}


def run_one(fn: Callable[[Any, str], ShardResult], task: ShardTask,
            outputs: Mapping[str, tuple[str | Path, str]]) -> dict[str, float]:
    """Load, process and write one shard; returns its stats. Markers go last, so a crash before
    them leaves the shard unfinished in every output."""
    writers = _writers(outputs)
    start = time.perf_counter()
    try:
        result = fn(task.load(), task.name)
    except Exception as err:
        # the error keeps its type (callers catch LineageError, ValueError...); the note names the shard
        err.add_note(f"in shard {task.name} (finished shards are kept: a re-run resumes after them)")
        raise
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
    stale = sum(w.clear_staging(t.name) for t in pending for w in writers.values())
    if stale:
        log.info("%s: removed %d temporary file(s) an interrupted run left", desc, stale)
    if engine.engine == "local" and (engine.workers <= 1 or len(pending) <= 1):
        for i, task in enumerate(pending, 1):
            stats = run_one(fn, task, outputs)
            if engine.progress:
                log.info("%s: shard %s done (%d/%d pending) in %.1fs", desc, task.name, i, len(pending),
                         stats["shard_seconds"])
    elif engine.engine == "local":
        _run_pool(fn, pending, outputs, engine, desc)
    elif engine.engine == "ray":
        _run_ray(fn, pending, outputs, engine, desc)
    else:
        raise ValueError(f"engine must be 'local' or 'ray', got {engine.engine!r}")
    first = next(iter(writers.values()))
    return [first.stats(n) for n in names]


# --- the local engine's worker pool -------------------------------------------------------------

_WORKER_CPUS = 0  # in a shard worker: its share of the driver's CPUs (cpus_available)
_WORKER_JOB: tuple[Callable[[Any, str], ShardResult], dict] | None = None  # fn and outputs, set once per worker
_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def _init_worker(parent_pid: int, fn: Callable[[Any, str], ShardResult], outputs: dict, cpus: int,
                 tmp: str | None) -> None:
    """A shard worker's start: die with the driver, take ``fn`` and the outputs once, use its share
    of the CPUs for thread pools (torch, BLAS; as Ray's ``OMP_NUM_THREADS`` for a task's CPUs), and
    the driver's temporary folder."""
    global _WORKER_CPUS, _WORKER_JOB
    from curation.processes import die_with_parent

    # A killed curate takes its workers with it. Under spawn the worker's parent is the driver (a
    # parent-death signal); under forkserver it is the fork server, which outlives the driver as long as
    # a worker holds its pipe (every worker does), and a worker would wait on its task queue for ever:
    # a thread ends the worker when the driver ends.
    parent = os.getppid()
    die_with_parent(parent)
    if parent != parent_pid:
        _end_with(parent_pid)
    _WORKER_CPUS = cpus
    for var in _THREAD_VARS:  # read by torch and BLAS libraries loaded from now on
        os.environ.setdefault(var, str(cpus))
    try:  # numpy's BLAS, loaded by the fork server before the variables were set
        from threadpoolctl import threadpool_limits

        threadpool_limits(int(os.environ["OMP_NUM_THREADS"]))
    except (ImportError, ValueError):  # threadpoolctl comes with scikit-learn
        pass
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if tmp:
        tempfile.tempdir = tmp
    _WORKER_JOB = (fn, outputs)


def _end_with(pid: int) -> None:
    """Kill this process when process ``pid`` ends (a pidfd where Linux has one, else a poll per second)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:  # already gone
        os._exit(1)
    except (AttributeError, OSError):
        fd = None

    def watch() -> None:
        if fd is not None:
            select.select([fd], [], [])  # readable when the process has ended
        else:
            while True:
                time.sleep(1.0)
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                except PermissionError:
                    continue
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="end-with-driver", daemon=True).start()


def _run_in_worker(task: ShardTask) -> dict[str, float]:
    assert _WORKER_JOB is not None, "a shard worker runs only after _init_worker"
    fn, outputs = _WORKER_JOB
    try:
        return run_one(fn, task, outputs)
    except Exception as err:
        try:  # the error goes back to the driver pickled; one that does not unpickle would break the pool
            pickle.loads(pickle.dumps(err))
        except Exception:
            raise RuntimeError("".join(traceback.format_exception(err)).rstrip()) from None
        raise


def _pool_context() -> multiprocessing.context.BaseContext:
    # forkserver, not fork: the driver may hold threads (torch's and BLAS's pools, MLflow's, tqdm's
    # monitor) and loaded models; a fork copies the threads' locks in whatever state they are, and a
    # worker can hang on one (POSIX fork-with-threads; Python 3.12 warns about it). The fork server is
    # a fresh process, started once per driver, that has imported only this module (numpy, pandas,
    # pyarrow: no torch, no model, no MLflow) and forks each worker, which is cheaper than spawn's
    # fresh interpreter per worker.
    # A worker loads its models itself, once (see the module docstring; docs/scaling.md measures what
    # sharing a model loaded before the fork would save).
    if "forkserver" in multiprocessing.get_all_start_methods():
        from multiprocessing import forkserver

        ctx = multiprocessing.get_context("forkserver")
        preload = ["curation.shards.executor"]
        method = multiprocessing.get_start_method(allow_none=True)
        if method not in (None, "fork", "spawn", "forkserver"):
            # a child sets its parent's start method: in a joblib job that is loky's, whose context
            # exists where its module is imported (else: "cannot find context for 'loky'")
            preload.append(type(multiprocessing.get_context(method)).__module__)
        ctx.set_forkserver_preload(preload)  # ignored once the server runs
        # The server's socket goes into a pymp-* folder of the temporary folder, made once per process:
        # the system's, not curate's run_tempdir (deep under data/, past AF_UNIX's 108-byte path limit).
        saved, tempfile.tempdir = tempfile.tempdir, None
        try:
            forkserver.ensure_running()
            return ctx
        except OSError as err:
            log.warning("shard workers: the fork server did not start (%s); spawning them instead", err)
        finally:
            tempfile.tempdir = saved
    return multiprocessing.get_context("spawn")


def _run_pool(fn, pending: Sequence[ShardTask], outputs, engine: EngineConfig, desc: str) -> None:
    workers = min(engine.workers, len(pending))
    cpus = max(1, cpus_available() // workers)
    queue = list(pending)
    in_flight: dict[Future, str] = {}
    done = 0
    with ProcessPoolExecutor(workers, mp_context=_pool_context(), initializer=_init_worker,
                             initargs=(os.getpid(), fn, dict(outputs), cpus, tempfile.tempdir)) as pool:
        try:
            # Bounded submission: at most ``workers`` shards in flight, each loaded in its worker only.
            while queue or in_flight:
                while queue and len(in_flight) < workers:
                    task = queue.pop(0)
                    in_flight[pool.submit(_run_in_worker, task)] = task.name
                finished, _ = wait(list(in_flight), return_when=FIRST_COMPLETED)
                for future in finished:
                    name = in_flight[future]
                    try:
                        stats = future.result()
                    except BrokenProcessPool as err:
                        running = sorted(in_flight.values())
                        raise RuntimeError(
                            f"{desc}: a worker process died (killed, out of memory, a crash in native code, or a "
                            f"script without `if __name__ == '__main__':`) "
                            f"while shard(s) {', '.join(running)} ran; finished shards are kept: a re-run "
                            f"resumes after them (data.workers=1 runs the shards in this process)") from err
                    except Exception:
                        log.error("%s: shard %s failed", desc, name)
                        raise
                    del in_flight[future]
                    done += 1
                    if engine.progress:
                        log.info("%s: shard %s done (%d/%d pending, %d workers) in %.1fs", desc, name, done,
                                 len(pending), workers, stats["shard_seconds"])
        except BaseException:
            # the shards already running finish (and are marked complete); none is started after an error
            pool.shutdown(wait=True, cancel_futures=True)
            raise


class RayClusterError(UserError, ConnectionError):
    """``data.ray_address`` names a Ray cluster that does not answer."""

    def __init__(self, address: str, err: BaseException) -> None:
        said = " ".join(str(err).split())[:200]
        super().__init__(
            f"data.ray_address={address!r}: no Ray cluster answered there ({type(err).__name__}: {said}). Fix: start "
            f"one (`ray start --head` on the head node) or point data.ray_address at a running cluster (host:6379 or "
            f"ray://host:10001); data.ray_address=null starts a local Ray instance on this machine, data.engine=local "
            f"needs no Ray")


@contextmanager
def ray_session(engine: EngineConfig):
    """Ray, connected to ``engine.ray_address`` (a local instance when None) unless already up; a
    session started here is shut down on exit."""
    try:
        import ray
    except ImportError as err:
        raise ImportError("engine=ray needs Ray: pip install -e '.[ray]'") from err
    from curation.processes import Reaper

    started_here = False
    reaper = None
    try:
        if not ray.is_initialized():
            # A local instance's daemons (GCS, raylet, agents, workers) end with this process, however it
            # ends, also when it is killed during Ray's start-up (curation.processes.Reaper).
            reaper = Reaper() if engine.ray_address is None else None
            with reaper.mark() if reaper is not None else nullcontext():
                try:
                    ray.init(address=engine.ray_address, include_dashboard=False, log_to_driver=False,
                             configure_logging=False)
                except (ConnectionError, TimeoutError, RuntimeError) as err:
                    if engine.ray_address is None:
                        raise
                    raise RayClusterError(engine.ray_address, err) from err
            started_here = True
        yield ray
    finally:
        if started_here:
            ray.shutdown()
        if reaper is not None:
            reaper.close()


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
