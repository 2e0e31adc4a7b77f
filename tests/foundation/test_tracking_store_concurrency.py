"""Runs started together on one MLflow store, and a store left half-migrated (issue #52, part 1).

Before: MLflow creates and migrates an empty SQLite store when a process first opens it, with nothing that keeps
a second process from doing the same at once; eight `curate pipeline=ingest` runs started together on a fresh
store all exited 1 and left 0 runs and 4 `_alembic_tmp_*` tables, and from then on every run failed with
`table _alembic_tmp_experiments already exists`. Now the store is prepared under a lock file beside it
(:func:`curation.tracking.store.prepare_store`), and a half-migrated store is repaired with its runs, or refused
in one line with the store as it was.

The stores here are made by MLflow itself: runs recorded through its API, its own alembic migrations run back
(``downgrade``) and forward, and a migration cut short by ending its process right after one of its statements,
as a kill or a crash would.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from curation.errors import user_message
from curation.tracking.store import (TMP_PREFIX, TrackingStoreError, prepare_store, store_lock, store_state)
from tests.conftest import CORPUS_DIR
from tests.processes import wait_for

BIN = Path(sys.executable).parent
# A revision before MLflow's "Add workspace columns and catalog table" migration (1b5f0d9ad7c1), which rebuilds
# `experiments` (and `model_version_tags`, the issue's other leftover) through `_alembic_tmp_` copies.
BEFORE_WORKSPACES = "c8d9e0f1a2b3"

# Runs MLflow's own upgrade of the store argv[1] and ends the process (os._exit: no clean-up, as a kill) right
# after the first statement that matches argv[2].
_CUT_SHORT = """
import os, re, sys
from sqlalchemy import event
from mlflow.store.db.utils import _upgrade_db, create_sqlalchemy_engine
engine = create_sqlalchemy_engine(sys.argv[1])
pattern = re.compile(sys.argv[2], re.I)

@event.listens_for(engine, "after_cursor_execute")
def cut(conn, cursor, statement, *args):
    if pattern.search(statement):
        os._exit(9)

_upgrade_db(engine)
sys.exit(0)
"""


def _runs(uri: str) -> dict[str, str]:
    """run id -> status of every run in the store, read through MLflow."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=uri)
    ids = [e.experiment_id for e in client.search_experiments()]
    return {r.info.run_id: r.info.status for r in client.search_runs(ids, max_results=1000)}


def _store_with_runs(path: Path, runs: int = 3) -> str:
    """A store made by MLflow with ``runs`` finished runs (a param, a metric and a tag each)."""
    import mlflow

    uri = f"sqlite:///{path}"
    client = mlflow.MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("kept", artifact_location=(path.parent / "artifacts").as_uri())
    for i in range(runs):
        run = client.create_run(experiment)
        client.log_param(run.info.run_id, "i", i)
        client.log_metric(run.info.run_id, "m", float(i))
        client.set_terminated(run.info.run_id)
    return uri


def _migrate_back(uri: str, revision: str) -> None:
    """MLflow's own migrations run back to ``revision`` (alembic ``downgrade``): the store of an older MLflow."""
    from alembic import command
    from mlflow.store.db.utils import _get_alembic_config, create_sqlalchemy_engine

    engine = create_sqlalchemy_engine(uri)
    config = _get_alembic_config(uri)
    try:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.downgrade(config, revision)
    finally:
        engine.dispose()


@pytest.fixture
def cut_short_store(tmp_path) -> tuple[Path, str, dict[str, str]]:
    """A store with 3 runs whose upgrade to the installed MLflow's schema died right after it dropped
    `experiments` (the rebuild's ``_alembic_tmp_experiments`` copy is left; SQLite rolled back the rest)."""
    path = tmp_path / "mlflow.db"
    uri = _store_with_runs(path)
    runs = _runs(uri)
    _migrate_back(uri, BEFORE_WORKSPACES)
    done = subprocess.run([sys.executable, "-c", _CUT_SHORT, uri, r"^\s*DROP TABLE experiments\b"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 9, done.stderr[-3000:]  # it was cut where asked, not finished
    state = store_state(path)
    assert f"{TMP_PREFIX}experiments" in state.tmp_tables and state.version == BEFORE_WORKSPACES and state.runs == 3
    return path, uri, runs


@pytest.mark.slow  # MLflow creates a store, migrates it back and forth (~10 s)
def test_a_store_whose_migration_was_cut_short_is_repaired_with_every_run(cut_short_store):
    path, uri, runs = cut_short_store
    # what every run, `mlflow ui` and notebook met before: MLflow's own open of the store fails on the leftover
    import mlflow

    copy = path.with_name("untouched.db")
    copy.write_bytes(path.read_bytes())
    with pytest.raises(Exception, match=f"table {TMP_PREFIX}experiments already exists"):
        mlflow.MlflowClient(tracking_uri=f"sqlite:///{copy}").search_experiments()

    prepare_store(uri)
    state = store_state(path)
    assert not state.tmp_tables and state.runs == 3
    from mlflow.store.db.utils import _get_latest_schema_revision

    assert state.version == _get_latest_schema_revision()
    assert _runs(uri) == runs  # the same runs, FINISHED as they were
    client = mlflow.MlflowClient(tracking_uri=uri)
    run = client.get_run(next(iter(runs)))
    assert run.data.params == {"i": run.data.params["i"]} and "m" in run.data.metrics
    new = client.create_run(client.get_experiment_by_name("kept").experiment_id)  # and it records again
    client.set_terminated(new.info.run_id)
    assert len(_runs(uri)) == 4
    backups = list(path.parent.glob("mlflow.db.before-repair-*"))
    assert len(backups) == 1 and f"{TMP_PREFIX}experiments" in store_state(backups[0]).tmp_tables


@pytest.mark.slow  # the store of the fixture, then a `curate` process (~30 s)
def test_curate_on_a_store_whose_migration_was_cut_short_repairs_it_and_records(cut_short_store, project, tmp_path):
    """The user's path: the next `curate` on the broken store (before: `curate: unexpected error: OperationalError:
    ... table _alembic_tmp_experiments already exists`, and so every later run) repairs it, says so, and
    records its run beside the three kept."""
    path, uri, runs = cut_short_store
    log = tmp_path / "curate.log"
    process = _curate(project, uri, ["run.namespace=after_repair", "data.max_docs=5"], log)
    assert process.wait(timeout=600) == 0, log.read_text()[-3000:]
    shown = " ".join(log.read_text().split())
    assert f"the MLflow store {path} was left half-migrated" in shown and "3 runs kept" in shown
    after = _runs(uri)
    assert len(after) == 4 and {k: after[k] for k in runs} == runs and set(after.values()) == {"FINISHED"}


def test_the_issues_store_at_the_newest_schema_with_leftover_copies_is_repaired(tmp_path):
    """The issue's store: the winner of the race finished every migration (the newest schema), the losers left
    ``_alembic_tmp_experiments`` and ``_alembic_tmp_model_version_tags`` (made as alembic makes them: the
    table's definition under the copy's name, a part of its rows)."""
    path = tmp_path / "mlflow.db"
    uri = _store_with_runs(path)
    runs = _runs(uri)
    con = sqlite3.connect(path)
    for table in ("experiments", "model_version_tags"):
        sql = con.execute("select sql from sqlite_master where type = 'table' and name = ?", (table,)).fetchone()[0]
        con.execute(re.sub(rf'^CREATE TABLE "?{table}"?', f'CREATE TABLE "{TMP_PREFIX}{table}"', sql, count=1))
        con.execute(f"insert into {TMP_PREFIX}{table} select * from {table} limit 1")
    con.commit()
    con.close()
    prepare_store(uri)
    assert not store_state(path).tmp_tables
    assert _runs(uri) == runs


def test_a_half_migrated_store_that_cannot_be_repaired_is_refused_in_one_line_and_left_as_it_was(tmp_path):
    """``runs`` gone and its copy lacking columns (not alembic's copy of it): no repair would keep the runs as
    they were, so the store is put back and refused, in one line naming the file and the fix."""
    path = tmp_path / "mlflow.db"
    uri = _store_with_runs(path)
    con = sqlite3.connect(path)
    con.execute(f"create table {TMP_PREFIX}runs as select run_uuid, name from runs")
    con.execute("pragma foreign_keys = off")
    con.execute("drop table runs")
    con.commit()
    con.close()
    before = sqlite3.connect(path).execute("select name, sql from sqlite_master order by name").fetchall()
    with pytest.raises(TrackingStoreError) as err:
        prepare_store(uri)
    message = user_message(err.value)
    assert message is not None and "\n" not in message and len(message) < 700
    assert str(path) in message and "half-migrated" in message and "tracking.enabled=false" in message
    assert f"mv {path} {path}.broken" in message
    assert sqlite3.connect(path).execute("select name, sql from sqlite_master order by name").fetchall() == before


@pytest.mark.slow  # a store migrated back, two processes (~30 s)
def test_an_older_store_is_upgraded_with_its_runs_and_a_newer_ones_refused_in_one_line(tmp_path):
    """Without a leftover copy, a store's schema is MLflow's business, done under the lock: one of an older MLflow
    (here migrated back past the workspace migration, so tables of later ones are missing) is upgraded by MLflow's
    own creation path with its runs; one a newer MLflow upgraded (a revision this MLflow does not know) is refused
    in one line and left as it was. Each in a process of its own, as a run opens it
    (`python -m curation.tracking.store`, the command the docs give before `mlflow ui`)."""
    from mlflow.store.db.utils import _get_latest_schema_revision

    def prepare(path: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "curation.tracking.store", f"sqlite:///{path}"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)

    older, newer = tmp_path / "older" / "mlflow.db", tmp_path / "newer" / "mlflow.db"
    for path in (older, newer):
        path.parent.mkdir()
    uri = _store_with_runs(older)
    runs = _runs(uri)
    _migrate_back(uri, BEFORE_WORKSPACES)
    done = prepare(older)
    assert done.returncode == 0, done.stderr[-3000:]
    assert store_state(older).version == _get_latest_schema_revision() and store_state(older).runs == 3
    assert f"schema {_get_latest_schema_revision()}, 3 runs" in done.stdout
    assert _runs(uri) == runs

    _store_with_runs(newer)
    with sqlite3.connect(newer) as con:
        con.execute("update alembic_version set version_num = 'f0e1d2c3b4a5'")  # a revision of a later release
    done = prepare(newer)
    errors = [line for line in done.stderr.splitlines() if line.startswith("curation.tracking.store: error:")]
    assert done.returncode == 2 and len(errors) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert f"the MLflow store {newer} (tracking.uri) has schema f0e1d2c3b4a5, of a newer MLflow" in errors[0]
    assert "tracking.enabled=false" in errors[0]
    assert store_state(newer).version == "f0e1d2c3b4a5" and store_state(newer).runs == 3


def _curate(project: Path, uri: str, args: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "CURATION_PROJECT_ROOT": str(project), "KEDRO_DISABLE_TELEMETRY": "true",
           "COLUMNS": "400"}  # the console log unwrapped
    return subprocess.Popen(
        [str(BIN / "curate"), *args, "pipeline=ingest", f"data.path={CORPUS_DIR}", "data.workers=1",
         "cache.enabled=false", f"tracking.uri={uri}"],
        cwd=project, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def _together(project: Path, tmp_path: Path, commands: list[list[str]]) -> str:
    """Start a `curate` per command on a fresh store, made to reach it at the same moment: the test holds the
    store's lock until every one of them waits for it (each says so in its log), then lets go. Each must exit 0;
    the store's URI."""
    path = tmp_path / "fresh" / "mlflow.db"
    path.parent.mkdir()
    uri = f"sqlite:///{path}"
    logs = [tmp_path / f"curate{i}.log" for i in range(len(commands))]
    with store_lock(path):
        runs = [_curate(project, uri, args, log) for args, log in zip(commands, logs)]
        try:
            wait_for(lambda: all("preparing the MLflow store" in " ".join(log.read_text().split()) for log in logs),
                     240, f"all {len(commands)} runs waiting for the store")
            assert not path.exists()  # none of them has touched it yet
        except BaseException:
            for run in runs:
                run.kill()
            raise
    codes = [run.wait(timeout=300) for run in runs]
    assert codes == [0] * len(runs), "\n".join(log.read_text()[-2000:] for log in logs)
    assert not store_state(path).tmp_tables
    return uri


@pytest.mark.slow  # eight `curate` processes: ~230 s on 2 cores under a load of 7-10 from other work (~57 s of CPU
# a core, so about a minute on 2 idle cores)
def test_eight_curate_runs_that_reach_a_fresh_store_together_all_record(project, tmp_path):
    """Eight `curate pipeline=ingest` runs on a fresh store at the same moment (before: all eight exited 1, the
    store held 0 runs and 4 `_alembic_tmp_*` tables): all exit 0 and the store holds their 8 runs, FINISHED."""
    uri = _together(project, tmp_path, [[f"run.namespace=together{i}", "data.max_docs=5"] for i in range(8)])
    assert sorted(_runs(uri).values()) == ["FINISHED"] * 8


@pytest.mark.optin  # (suite time) ~210 s on 2 cores under a load of 10; the eight runs above cover the lock
@pytest.mark.slow
def test_a_parallel_sweep_and_a_run_that_reach_a_fresh_store_together_all_record(project, tmp_path):
    """A sweep on Hydra's joblib launcher (three jobs in three worker processes, its parent run opened by the
    sweep's callback) and a plain run, on a fresh store at the same moment: all record, the sweep's parent with
    its three jobs as children."""
    uri = _together(project, tmp_path, [
        ["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=3", "run.namespace=sweep", "data.max_docs=5,6,7"],
        ["run.namespace=alone", "data.max_docs=5"]])
    assert sorted(_runs(uri).values()) == ["FINISHED"] * 5
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=uri)
    ids = [e.experiment_id for e in client.search_experiments()]
    parents = client.search_runs(ids, "tags.`curation.sweep` = 'true'")
    assert len(parents) == 1
    assert len(client.search_runs(ids, f"tags.mlflow.parentRunId = '{parents[0].info.run_id}'")) == 3


def test_the_store_lock_names_its_holder_and_dies_with_it(tmp_path):
    """A process that waits too long is told who holds the store (and leaves that holder's record alone); a
    holder that is SIGKILLed (a crash mid-migration) leaves no lock behind: the kernel drops its flock."""
    from curation.tracking.store import store_lock_path

    path = tmp_path / "mlflow.db"
    code = ("import sys, threading\nfrom pathlib import Path\nfrom curation.tracking.store import store_lock\n"
            "with store_lock(Path(sys.argv[1])):\n    print('held', flush=True)\n    threading.Event().wait(300)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(TrackingStoreError) as err:
            with store_lock(path, wait_s=0.5):
                pytest.fail("took a lock another process holds")
        message = user_message(err.value)
        assert f"pid {holder.pid}" in message and str(path) in message and "\n" not in message
        assert f'"pid": {holder.pid}' in store_lock_path(path).read_text()
        holder.kill()
        holder.wait()
        with store_lock(path, wait_s=0):  # free at once
            assert f'"pid": {os.getpid()}' in store_lock_path(path).read_text()
        assert store_lock_path(path).read_text() == ""  # cleared on release
    finally:
        holder.kill()
        holder.wait()
