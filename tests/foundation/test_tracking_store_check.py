"""A broken MLflow store fails in seconds, in one line naming tracking.uri and tracking.enabled=false (issue #44,
class 5); before, MLflow retried ~100 s and printed a 100-210-line sqlalchemy trace."""

from __future__ import annotations

import os
import sqlite3
import stat
import time

import pytest

from curation.errors import user_message
from curation.tracking.store import TrackingStoreError, check_store


def _store(tmp_path):
    path = tmp_path / "mlflow.db"
    with sqlite3.connect(path) as con:
        con.execute("create table runs (id text)")
    return path


def _check(path):
    started = time.perf_counter()
    with pytest.raises(TrackingStoreError) as err:
        check_store(f"sqlite:///{path}", timeout_s=0.5)
    message = user_message(err.value)
    assert message is not None and "\n" not in message
    assert "tracking.uri" in message and "tracking.enabled=false" in message and str(path) in message
    assert time.perf_counter() - started < 5
    return message


def test_a_good_store_and_a_new_one_pass(tmp_path):
    check_store(f"sqlite:///{_store(tmp_path)}")
    check_store(f"sqlite:///{tmp_path / 'new.db'}")
    check_store("http://127.0.0.1:5000")  # a server: left to MLflow


def test_a_corrupt_store_is_named(tmp_path):
    path = tmp_path / "mlflow.db"
    path.write_bytes(b"this is not a database" * 100)
    assert "not a usable SQLite database" in _check(path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes read-only files; the folder case below covers root")
def test_a_read_only_file_is_named(tmp_path):
    path = _store(tmp_path)
    path.chmod(stat.S_IRUSR)
    assert "read-only" in _check(path)


def test_a_locked_store_is_named(tmp_path):
    path = _store(tmp_path)
    holder = sqlite3.connect(path, check_same_thread=False)
    holder.execute("begin exclusive")
    try:
        assert "locked by another process" in _check(path)
    finally:
        holder.rollback()
        holder.close()


def test_a_store_on_a_read_only_file_system_is_named(tmp_path, monkeypatch):
    path = _store(tmp_path)
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) in (str(path), str(tmp_path)) and mode & os.W_OK
                        else real(p, mode))
    assert "read-only" in _check(path)


@pytest.mark.slow
def test_curate_on_a_corrupt_store_stops_in_one_line_before_any_work(project):
    import subprocess
    import sys
    from pathlib import Path

    from tests.conftest import CORPUS_DIR

    (project / "mlruns").mkdir()
    (project / "mlruns" / "mlflow.db").write_bytes(b"not a database" * 1000)
    env = {**os.environ, "CURATION_PROJECT_ROOT": str(project), "KEDRO_DISABLE_TELEMETRY": "true"}
    done = subprocess.run([str(Path(sys.executable).parent / "curate"), "pipeline=ingest", f"data.path={CORPUS_DIR}",
                           "data.max_docs=5", "run.namespace=store"], cwd=project, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("curate: error:")]
    assert len(errors) == 1 and "tracking.enabled=false" in errors[0] and "(tracking.uri)" in errors[0]
    assert not (project / "data" / "02_intermediate" / "store").exists()  # nothing ingested
