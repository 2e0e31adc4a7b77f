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

:func:`run_tasks` is the same engines for work that is not a shard (the cells of ``decide``: one
model trained and evaluated per task): ``fn(task)`` returns a value, not files, and the values come
back in task order; the pool, the Ray session and the failure handling are the ones shards use.

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
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TypeVar

import numpy as np
import pandas as pd

from curation.errors import UserError
from curation.shards.store import ShardWriter

log = logging.getLogger(__name__)

ShardValue = pd.DataFrame | np.ndarray
T = TypeVar("T")
R = TypeVar("R")


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
    elif engine.engine in ("local", "ray"):
        job = partial(run_one, fn, outputs=dict(outputs))
        pending_names = [t.name for t in pending]
        workers = min(engine.workers, len(pending))
        done = [0]

        def progress(i: int, stats: dict[str, float]) -> None:
            done[0] += 1
            if engine.progress:
                where = f"{workers} workers" if engine.engine == "local" else "ray"
                log.info("%s: shard %s done (%d/%d pending, %s) in %.1fs", desc, pending_names[i], done[0],
                         len(pending), where, stats["shard_seconds"])

        if engine.engine == "local":
            _pool_map(job, pending, pending_names, engine, desc, "shard", progress)
        else:
            _ray_map(job, pending, pending_names, engine, progress, engine.ray_num_cpus, engine.ray_num_gpus)
    else:
        raise ValueError(f"engine must be 'local' or 'ray', got {engine.engine!r}")
    first = next(iter(writers.values()))
    return [first.stats(n) for n in names]


def run_tasks(fn: Callable[[T], R], tasks: Sequence[T], engine: EngineConfig | None = None, *,
              names: Sequence[str] | None = None, desc: str = "tasks", what: str = "task",
              num_cpus: float | None = None, num_gpus: float | str | None = None,
              on_result: Callable[[int, R], None] | None = None) -> list[R]:
    """``fn(task)`` for every task on ``engine``; the results in task order.

    The engines of :func:`run_shards`, for work whose result is a value (it must pickle), not shard
    files: ``local`` with ``workers`` <= 1 (or one task) calls ``fn`` here, in order; ``local`` with more
    runs it in the pool shards use (``fn`` reaches each worker once, a task pickles alone, a worker's
    thread pools get its share of the CPUs: :func:`task_cpus`); ``ray`` runs one Ray task per task
    (``num_cpus`` / ``num_gpus`` each, default ``engine.ray_num_cpus`` / ``ray_num_gpus``; ``"auto"`` GPUs
    = one when the cluster has any), ``fn`` put in the object store once. ``on_result(i, result)`` is
    called here, in the driver, as each task finishes (in completion order: what must not be done by a
    worker, such as logging to MLflow, goes there). ``fn`` must be safe to run at once on different tasks;
    resuming is ``fn``'s own (a cache), this function keeps no markers. ``names`` (default the indices)
    and ``what`` name the tasks in errors."""
    engine = engine or EngineConfig()
    labels = [str(n) for n in names] if names is not None else [str(i) for i in range(len(tasks))]
    if len(labels) != len(tasks):
        raise ValueError(f"{desc}: {len(labels)} names for {len(tasks)} tasks")
    results: list[Any] = [None] * len(tasks)

    def done(i: int, result: R) -> None:
        results[i] = result
        if on_result is not None:
            on_result(i, result)

    if engine.engine == "local" and (engine.workers <= 1 or len(tasks) <= 1):
        for i, task in enumerate(tasks):
            done(i, fn(task))
    elif engine.engine == "local":
        _pool_map(fn, tasks, labels, engine, desc, what, done)
    elif engine.engine == "ray":
        _ray_map(fn, tasks, labels, engine, done, engine.ray_num_cpus if num_cpus is None else num_cpus,
                 engine.ray_num_gpus if num_gpus is None else num_gpus)
    else:
        raise ValueError(f"engine must be 'local' or 'ray', got {engine.engine!r}")
    return results


def task_cpus() -> int | None:
    """The CPUs the engine gave the task running in this process: its share in a local pool worker, the CPUs
    a Ray task reserved; None in the driver (nothing set them: the caller's own settings hold)."""
    if _WORKER_CPUS:
        return _WORKER_CPUS
    ray = sys.modules.get("ray")  # a Ray worker has imported Ray; the driver of a local run need not
    if ray is not None and ray.is_initialized():
        context = ray.get_runtime_context()
        if context.worker.mode == ray.WORKER_MODE:
            cpus = context.get_assigned_resources().get("CPU")
            return max(1, int(cpus)) if cpus else None
    return None


# --- the local engine's worker pool -------------------------------------------------------------

_WORKER_CPUS = 0  # in a pool worker: its share of the driver's CPUs (cpus_available)
_WORKER_JOB: Callable[[Any], Any] | None = None  # what a task runs (set once per worker): run_one's partial, or fn
_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def _init_worker(parent_pid: int, job: Callable[[Any], Any], cpus: int, tmp: str | None) -> None:
    """A worker's start: die with the driver, take ``job`` (a shard's :func:`run_one` with its ``fn`` and
    outputs, or :func:`run_tasks`' ``fn``) once, use its share of the CPUs for thread pools (torch, BLAS;
    as Ray's ``OMP_NUM_THREADS`` for a task's CPUs), and the driver's temporary folder."""
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
    _WORKER_JOB = job


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


def _run_in_worker(task: Any) -> Any:
    assert _WORKER_JOB is not None, "a pool worker runs only after _init_worker"
    try:
        return _WORKER_JOB(task)
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


def _pool_map(job: Callable[[Any], Any], tasks: Sequence[Any], names: Sequence[str], engine: EngineConfig,
              desc: str, what: str, done: Callable[[int, Any], None]) -> None:
    """``job(task)`` for every task in a pool of ``engine.workers`` processes; ``done(i, result)`` here as each
    finishes."""
    workers = min(engine.workers, len(tasks))
    cpus = max(1, cpus_available() // workers)
    queue = list(enumerate(tasks))
    in_flight: dict[Future, int] = {}
    with ProcessPoolExecutor(workers, mp_context=_pool_context(), initializer=_init_worker,
                             initargs=(os.getpid(), job, cpus, tempfile.tempdir)) as pool:
        try:
            # Bounded submission: at most ``workers`` tasks in flight, each loaded in its worker only.
            while queue or in_flight:
                while queue and len(in_flight) < workers:
                    i, task = queue.pop(0)
                    in_flight[pool.submit(_run_in_worker, task)] = i
                finished, _ = wait(list(in_flight), return_when=FIRST_COMPLETED)
                for future in finished:
                    i = in_flight[future]
                    try:
                        result = future.result()
                    except BrokenProcessPool as err:
                        running = sorted(names[j] for j in in_flight.values())
                        raise RuntimeError(
                            f"{desc}: a worker process died (killed, out of memory, a crash in native code, or a "
                            f"script without `if __name__ == '__main__':`) "
                            f"while {what}(s) {', '.join(running)} ran; finished {what}s are kept: a re-run "
                            f"resumes after them (data.workers=1 runs the {what}s in this process)") from err
                    except Exception:
                        log.error("%s: %s %s failed", desc, what, names[i])
                        raise
                    del in_flight[future]
                    done(i, result)
        except KeyboardInterrupt:
            # Ctrl-C or SIGTERM (curation.tracking.interrupts raises Terminated, a KeyboardInterrupt): the user asked
            # the run to end, so the tasks running are stopped, not waited for (issue #52: a SIGTERM took as long
            # as the cells in flight to end the run). What they finished is kept; a task is only marked complete
            # (a shard's completion file, a cell's cache entry) once it has finished, so a re-run redoes these.
            processes = [p for p in list((getattr(pool, "_processes", None) or {}).values()) if p.is_alive()]
            for process in processes:
                process.terminate()
            for process in processes:  # Lightning's SIGTERM handler in a worker lets the step end: a bound, then kill
                process.join(5)
                if process.is_alive():
                    process.kill()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        except BaseException:
            # the tasks already running finish (a shard is marked complete, a cell cached); none is started
            # after an error
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


def _call(job: Callable[[Any], Any], task: Any) -> Any:
    """A Ray task: ``job`` comes from the object store (put once per run), ``task`` with the call."""
    return job(task)


def _ray_map(job: Callable[[Any], Any], tasks: Sequence[Any], names: Sequence[str], engine: EngineConfig,
             done: Callable[[int, Any], None], num_cpus: float, num_gpus: float | str) -> None:
    """``job(task)`` as one Ray task per task; ``done(i, result)`` here as each finishes."""
    with ray_session(engine) as ray:
        gpus = gpus_per_task(num_gpus, ray.cluster_resources())
        # a task asking more CPUs than any node has would wait for ever: at most the largest node's
        largest = max((float(n["Resources"].get("CPU", 0)) for n in ray.nodes() if n.get("Alive")), default=1.0)
        cpus = min(float(num_cpus), largest) if largest > 0 else float(num_cpus)
        remote = ray.remote(num_cpus=cpus, num_gpus=gpus, max_retries=2, retry_exceptions=False)(_call)
        job_ref = ray.put(job)
        limit = engine.max_in_flight or max(2, int(2 * ray.cluster_resources().get("CPU", 1)))
        queue = list(enumerate(tasks))
        in_flight: dict[Any, int] = {}
        # Bounded submission: at most ``limit`` tasks are in flight, so the object store and the
        # driver hold a few tasks' results, never the corpus.
        while queue or in_flight:
            while queue and len(in_flight) < limit:
                i, task = queue.pop(0)
                in_flight[remote.options(name=names[i]).remote(job_ref, task)] = i
            ready, _ = ray.wait(list(in_flight), num_returns=1)
            for ref in ready:
                i = in_flight.pop(ref)
                done(i, ray.get(ref))  # an error in the job is raised here, not retried (retry_exceptions=False)


def sum_stats(per_shard: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Add per-shard counts (keys missing in a shard count as 0)."""
    total: dict[str, float] = {}
    for stats in per_shard:
        for key, value in stats.items():
            if isinstance(value, (int, float)):
                total[key] = total.get(key, 0) + value
    return total
