"""Children die with their parent: after SIGKILL of `curate`, no worker or trainer it started runs on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from curation import processes
from tests.conftest import CORPUS_DIR
from tests.processes import GONE_WITHIN_S, MARKER_ENV, marked_processes, wait_ended, wait_for, wait_gone

BIN = Path(sys.executable).parent


def _kill_all(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_die_with_parent_kills_a_subprocess_when_its_parent_is_killed(tmp_path):
    """The helper itself, on a real process tree: parent (python) -> child (sleep), parent SIGKILLed."""
    if not processes.supported():
        pytest.skip("parent-death signal is Linux only")
    pid_file = tmp_path / "child.pid"
    parent_code = (
        "import subprocess, sys\n"
        "from curation.processes import die_with_parent_kwargs\n"
        "child = subprocess.Popen(['sleep', '300'], **die_with_parent_kwargs())\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "child.wait()\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code])
    try:
        child = int(wait_for(lambda: pid_file.is_file() and pid_file.read_text(), 60, "child pid", parent))
        parent.kill()
        parent.wait()
        assert not wait_ended({child}), f"the child still runs {GONE_WITHIN_S:.0f} s after its parent's SIGKILL"
    finally:
        parent.kill()
        if pid_file.is_file():
            _kill_all([int(pid_file.read_text())])


def test_the_reaper_ends_what_was_started_under_its_mark_when_its_owner_is_killed(tmp_path):
    """A process that is no child with a parent-death signal (a `sleep` in a session of its own, as Ray's
    agents are to curate) but was started under the owner's Reaper mark ends once the owner is SIGKILLed;
    one started outside the mark runs on."""
    if not processes.supported():
        pytest.skip("Linux only")
    pids = tmp_path / "pids"
    owner_code = (
        "import subprocess, sys, threading\n"
        "from curation.processes import Reaper\n"
        "reaper = Reaper()\n"
        "with reaper.mark():\n"
        "    marked = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        "free = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        f"open({str(pids)!r}, 'w').write(f'{{marked.pid}} {{free.pid}} {{reaper.process.pid}}')\n"
        "threading.Event().wait(120)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", owner_code])
    marked = free = watcher = None
    try:
        marked, free, watcher = map(int, wait_for(lambda: pids.is_file() and pids.read_text(), 60, "pids",
                                                  owner).split())
        assert _alive(marked) and _alive(watcher), "the marked process or the watcher ended before the owner"
        owner.kill()
        owner.wait()
        left = wait_ended({marked, watcher})
        assert not left, f"still running {GONE_WITHIN_S:.0f} s after their owner's SIGKILL: {left} (watcher {watcher})"
        assert _alive(free), "a process started outside the mark was ended"
    finally:
        owner.kill()
        _kill_all([p for p in (marked, free) if p is not None])


@pytest.mark.slow  # a local Ray instance started and shut down (~10 s)
def test_a_local_ray_session_leaves_no_process_behind_when_it_ends_normally(tmp_path):
    """``ray_session`` of a local instance, ended normally: Ray's shutdown and the reaper's watcher leave no
    process of it running, the watcher included."""
    if not processes.supported():
        pytest.skip("Linux only")
    pytest.importorskip("ray")
    marker = f"ray-{uuid.uuid4().hex[:12]}"
    code = ("from curation.shards.executor import EngineConfig, ray_session\n"
            "with ray_session(EngineConfig(engine='ray')) as ray:\n"
            "    print('cpus', ray.cluster_resources().get('CPU'))\n")
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, MARKER_ENV: marker}, capture_output=True,
                          text=True, timeout=300)
    try:
        assert done.returncode == 0 and "cpus" in done.stdout, done.stdout[-2000:] + done.stderr[-3000:]
        left = wait_gone(marker)
        assert not left, f"still running {GONE_WITHIN_S:.0f} s after the session ended: {left}"
    finally:
        _kill_all(marked_processes(marker))


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return False


@pytest.mark.parametrize("stage, overrides, needle", [
    # scoring's isolated fastText trainer (a subprocess); the default reference raters are trained once
    # and shared, so the run trains on the (labelled) bundled corpus itself to have a trainer to kill
    pytest.param("scoring", ["pipeline=ingest+scoring", "scoring.training.source=corpus"], "fasttext.train_supervised",
                 marks=pytest.mark.optin),  # opt-in (suite time): ~25 s in CI; the joblib case kills the same trainer
    # the local engine's shard workers (data.workers=2) and their fork server, in the ingest's validate step
    ("shard workers", ["pipeline=ingest", "data.workers=2"], "multiprocessing.forkserver"),
    # a DataMask block process of selection (spawned by a ProcessPoolExecutor; with one block worker a
    # single block runs in curate itself, so two are asked for)
    pytest.param("selection", ["selection=datamask", "selection.block_workers=2"], "spawn_main",
                 marks=pytest.mark.optin),  # opt-in (suite time): ~40 s in CI; shard workers are the same kind of pool
    # a local Ray instance, killed during its start-up (once the raylet runs): its GCS server, raylet, agents
    # and workers are not curate's children but end with it all the same (curation.processes.Reaper)
    ("ray start-up", ["pipeline=ingest", "data.engine=ray"], "raylet"),
    # a sweep on Hydra's joblib launcher: its loky workers (one idle), and the trainer of a job in one
    pytest.param("joblib sweep", ["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "pipeline=ingest+scoring",
                                  "scoring.training.source=corpus"], "fasttext.train_supervised",
                 marks=pytest.mark.optin),  # opt-in (suite time): ~60 s in CI; the loky test below is its ground
])
@pytest.mark.slow  # a `curate` subprocess per stage, killed once its child runs
def test_no_child_survives_sigkill_of_curate(project, stage, overrides, needle):
    """Start `curate`, wait until the child is running (found in /proc by the marker its environment
    carries), SIGKILL `curate`, and wait for every process of that run to end (each end wakes the wait; a
    minute at most: a loaded machine's forkserver once took longer than the fixed 5 s this test gave it)."""
    if not processes.supported():
        pytest.skip("parent-death signal is Linux only")
    marker = f"kill-{uuid.uuid4().hex[:12]}"
    env = {**os.environ, MARKER_ENV: marker, "CURATION_PROJECT_ROOT": str(project),
           "KEDRO_DISABLE_TELEMETRY": "true"}
    args = [str(BIN / "curate"), *overrides, f"data.path={CORPUS_DIR}", "data.max_docs=300",
            "cache.enabled=false", "tracking.enabled=false"]
    log = open(project / "curate.log", "w")
    curate = subprocess.Popen(args, cwd=project, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        children = wait_for(
            lambda: {pid: cmd for pid, cmd in marked_processes(marker).items() if needle in cmd},
            300, f"{stage} child process", curate)
        os.kill(curate.pid, signal.SIGKILL)
        curate.wait()
        left = wait_gone(marker)
        assert not left, f"running {GONE_WITHIN_S:.0f} s after SIGKILL of curate (children were {children}): {left}"
    finally:
        curate.kill()
        _kill_all(marked_processes(marker))
        log.close()


def test_loky_workers_die_with_their_parent_once_the_backend_is_patched():
    """The ground of the opt-in "joblib sweep" stage in a few seconds: a process that patched joblib's ``loky``
    backend (:func:`curation.processes.loky_workers_die_with_parent`, as ``curate`` does before Hydra's joblib
    launcher starts) runs two busy loky workers and is SIGKILLed; neither worker runs on."""
    if not processes.supported():
        pytest.skip("parent-death signal is Linux only")
    marker = f"loky-{uuid.uuid4().hex[:12]}"
    code = ("import time\n"
            "from joblib import Parallel, delayed\n"
            "from curation.processes import loky_workers_die_with_parent\n"
            "loky_workers_die_with_parent()\n"
            "Parallel(n_jobs=2, backend='loky')(delayed(time.sleep)(300) for _ in range(2))\n")
    parent = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, MARKER_ENV: marker})
    try:
        workers = wait_for(lambda: len({p for p, cmd in marked_processes(marker, {parent.pid}).items()
                                        if "loky" in cmd}) >= 2 and marked_processes(marker, {parent.pid}),
                           120, "two loky workers", parent)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        left = wait_gone(marker)
        assert not left, f"running {GONE_WITHIN_S:.0f} s after SIGKILL of their parent (workers {workers}): {left}"
    finally:
        parent.kill()
        _kill_all(marked_processes(marker))
