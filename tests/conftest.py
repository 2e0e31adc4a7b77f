"""Shared fixtures: the real bundled corpus and an isolated copy of the project.

Tests that run Kedro or Hydra work in a temporary copy of the project's
``conf/`` and ``pyproject.toml`` (``CURATION_PROJECT_ROOT`` points at it), so
their data layers and MLflow store never touch the checkout.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
CORPUS_DIR = REPO / "data" / "01_raw" / "corpus"
CORPUS_SHARDS = sorted(CORPUS_DIR.glob("corpus-*.parquet"))

os.environ.setdefault("KEDRO_DISABLE_TELEMETRY", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# one cache of derived embedding models (static, ONNX) for every test project: built once per checkout
os.environ.setdefault("CURATION_EMBEDDING_ARTIFACTS", str(REPO / "data" / "06_models" / "embedding"))
# one cache of the reference raters (scoring.training.source=reference) for every test project: built once
# per checkout (scripts/setup.sh builds the default ones)
os.environ.setdefault("CURATION_SHARED_MODELS", str(REPO / "data" / "06_models" / "shared"))
# one decontamination n-gram index of the evaluation tasks for every test project (built once per checkout)
os.environ.setdefault("CURATION_DECONTAMINATION_INDEX", str(REPO / "data" / "06_models" / "decontamination"))

# Marks every process this test run starts (see tests/processes.py and pytest_sessionfinish below).
from tests.processes import MARKER_ENV, marked_processes  # noqa: E402

os.environ[MARKER_ENV] = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
_STARTED_DURING: dict[int, str] = {}  # pid of a live child -> the test it appeared in
LEFTOVER_GRACE_S = 15.0


@pytest.fixture(autouse=True)
def _restore_torch_threads():
    """Put torch's global intra-op thread count back after each test: training, evaluation, the embedder
    and block tasks call ``torch.set_num_threads``, and without this the setting of one test would leak
    into every later one (a test's speed, and any thread-dependent rounding, would depend on the order)."""
    import torch

    before = torch.get_num_threads()
    yield
    if torch.get_num_threads() != before:
        torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _note_new_processes(request: pytest.FixtureRequest):
    """Remember in which test each process of the run appeared (for the session-end report)."""
    yield
    for pid in marked_processes(os.environ[MARKER_ENV], exclude={os.getpid()}):
        _STARTED_DURING.setdefault(pid, request.node.nodeid)


def _own_helpers(me: int) -> set[int]:
    """The pids of multiprocessing's resource tracker and fork server when they are children of this
    pytest process.

    A spawn-context pool (the static embedder's workers) starts the tracker, a forkserver-context pool
    (the local engine's shard workers, ``data.workers``) the fork server, once per interpreter; each
    reads a pipe from its parent and exits at EOF, i.e. when pytest itself exits, so it cannot outlive
    the run. A tracker or fork server of any other parent (a leaked worker's) is still reported.
    """
    from multiprocessing import forkserver, resource_tracker

    own = set()
    for pid in (getattr(resource_tracker._resource_tracker, "_pid", None),
                getattr(forkserver._forkserver, "_forkserver_pid", None)):
        if pid is None:
            continue
        try:
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == me:
            own.add(pid)
    return own


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if a process it started outlives it (a server, a worker, a browser): kill it and say
    which test started it. Orphans count too: they are found by the variable they inherited."""
    me = os.getpid()
    spared = {me} | _own_helpers(me)
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    left = marked_processes(os.environ[MARKER_ENV], exclude=spared)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = marked_processes(os.environ[MARKER_ENV], exclude=spared)
    if not left:
        return
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    lines = [f"  pid {pid} (from {_STARTED_DURING.get(pid, 'a session fixture')}): {cmd[:200]}"
             for pid, cmd in sorted(left.items())]
    message = "processes started by the tests outlived them (now killed):\n" + "\n".join(lines)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(message, red=True, bold=True)
    else:
        print(message)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def corpus_sample() -> pd.DataFrame:
    """The first 600 rows of the real corpus (shards are shuffled, so every source appears)."""
    return pd.read_parquet(CORPUS_SHARDS[0], dtype_backend="numpy_nullable").head(600).reset_index(drop=True)


def make_project(root: Path) -> Path:
    """A runnable project folder: conf/ and pyproject.toml of the checkout, empty data layers."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "conf", root / "conf", ignore=shutil.ignore_patterns("local"))
    (root / "conf" / "local").mkdir(exist_ok=True)
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    (root / "src").mkdir(exist_ok=True)  # kedro checks that source_dir exists; the package is installed
    # the bundled corpus, as in a clone: the reference raters' training data (scoring.training.reference_path)
    (root / "data" / "01_raw").mkdir(parents=True, exist_ok=True)
    (root / "data" / "01_raw" / "corpus").symlink_to(CORPUS_DIR, target_is_directory=True)
    return root


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An isolated project; its MLflow store is ``<project>/mlruns/mlflow.db``."""
    root = make_project(tmp_path / "project")
    monkeypatch.setenv("CURATION_PROJECT_ROOT", str(root))
    monkeypatch.chdir(root)
    return root


# --- runs shared by several tests (each costs a `curate`/`kedro` process: tens of seconds on 2 cores) ---

BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class SharedRun:
    """A finished run in its own project, shared by the tests that only read it (never write to ``project``)."""

    project: Path
    stdout: str
    store: str  # the MLflow tracking URI of the project


def _shared_run(root: Path, args: list[str]) -> SharedRun:
    store = f"sqlite:///{root}/mlruns/mlflow.db"
    (root / "mlruns").mkdir()
    import mlflow

    mlflow.MlflowClient(tracking_uri=store).search_experiments()  # the tables exist before any server reads them
    env = {**os.environ, "CURATION_PROJECT_ROOT": str(root), "KEDRO_DISABLE_TELEMETRY": "true", "COLUMNS": "160"}
    done = subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return SharedRun(root, done.stdout, store)


def _shared_across_workers(tmp_path_factory: pytest.TempPathFactory, name: str, args: list[str]) -> SharedRun:
    """:func:`_shared_run` once per test session, also under pytest-xdist: a session fixture is otherwise set
    up by every worker whose files use it (the two below cost 40-60 s each; with 2 workers both built them).
    The first worker to ask runs it under a lock in the session's shared temp folder and leaves a marker;
    the others wait on the lock and read it. Safe because these runs are only read (:class:`SharedRun`)."""
    import fcntl
    import json

    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return _shared_run(make_project(tmp_path_factory.mktemp(name) / "project"), args)
    base = tmp_path_factory.getbasetemp().parent / "shared" / name  # the parent is this session's, all workers'
    base.mkdir(parents=True, exist_ok=True)
    done = base / "done.json"
    with open(base.parent / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes (or the worker dies)
        if done.is_file():
            saved = json.loads(done.read_text())
            return SharedRun(Path(saved["project"]), saved["stdout"], saved["store"])
        project = base / f"project-{uuid.uuid4().hex[:8]}"  # a failed attempt's folder is not reused
        run = _shared_run(make_project(project), args)
        done.write_text(json.dumps({"project": str(run.project), "stdout": run.stdout, "store": run.store}))
        return run


@pytest.fixture(scope="session")
def ingest_sweep(tmp_path_factory: pytest.TempPathFactory) -> SharedRun:
    """``curate -m pipeline=ingest data.max_docs=40,80``: a parent MLflow run and a child per job, run once per
    session; read by the multirun, notebook, MLflow server and MLflow UI (browser) tests."""
    return _shared_across_workers(tmp_path_factory, "ingest_sweep", [
        str(BIN / "curate"), "-m", "pipeline=ingest", f"data.path={CORPUS_DIR}", "data.max_docs=40,80"])


@pytest.fixture(scope="session")
def kedro_ingest_run(tmp_path_factory: pytest.TempPathFactory) -> SharedRun:
    """``kedro run --pipelines ingest`` on 30 documents, run once per session; read by the tests of what a
    `kedro run` records (its defaults, its run name, its summary)."""
    return _shared_across_workers(tmp_path_factory, "kedro_ingest", [
        str(BIN / "kedro"), "run", "--pipelines", "ingest", "--params", f"data.max_docs=30,data.path={CORPUS_DIR}"])


# The default job (ingest -> scoring -> pruning -> selection) on 250 documents, small selection settings.
DEFAULT_JOB_250 = [f"data.path={CORPUS_DIR}", "data.max_docs=250", "embedding.show_progress=false",
                   "selection=datamask", "selection.steps=40", "selection.history_every=5", "selection.group_size=32",
                   "budget.keep_ratio=0.1"]


@contextlib.contextmanager
def job_in_new_project(tmp_path_factory: pytest.TempPathFactory, name: str, overrides: list[str]):
    """A fresh project (``make_project``) made current (``CURATION_PROJECT_ROOT`` and the working directory)
    where the job of ``overrides`` has run in process; yields its root with the project still current."""
    from curation.config_loader import compose_config
    from curation.hydra_app import run_kedro

    root = make_project(tmp_path_factory.mktemp(name) / "project")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CURATION_PROJECT_ROOT", str(root))
        patch.chdir(root)
        run_kedro(compose_config(root / "conf", overrides), project_path=root)
        yield root


@pytest.fixture(scope="session")
def _default_job_250(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with job_in_new_project(tmp_path_factory, "default_job", DEFAULT_JOB_250) as root:
        return root


@pytest.fixture
def default_job_250(_default_job_250: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project where the default job ran once per session on 250 documents (``DEFAULT_JOB_250``), made the
    current project (as ``project`` does). Shared: the pipelines test re-runs scoring and a selection sweep
    in it, the reports test a fig7 sweep (its own experiment) and the report job; each reads only what it
    wrote or what the default job wrote."""
    monkeypatch.setenv("CURATION_PROJECT_ROOT", str(_default_job_250))
    monkeypatch.chdir(_default_job_250)
    return _default_job_250
