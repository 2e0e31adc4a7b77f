"""Ctrl-C, SIGTERM and SIGKILL leave a true record (issue #44, class 4).

``curate`` interrupted mid-run exits 130 (SIGINT) or 143 (SIGTERM) with one line and no trace, and its MLflow run
is KILLED (before: FINISHED with partial metrics, or RUNNING forever, with ~340 lines of trace for Ctrl-C and
nothing for SIGTERM). A run killed with SIGKILL cannot say anything: the next run of its namespace closes its
MLflow run as KILLED. Real ``curate`` processes on the bundled corpus's ingest (the longest stage that needs no
trained rater), signalled once their MLflow run exists.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import CORPUS_DIR

pytestmark = pytest.mark.slow  # real curate processes

BIN = Path(sys.executable).parent


def _env(project: Path) -> dict[str, str]:
    return {**os.environ, "CURATION_PROJECT_ROOT": str(project), "KEDRO_DISABLE_TELEMETRY": "true", "COLUMNS": "160"}


def _runs(project: Path) -> list[tuple[str, str]]:
    db = project / "mlruns" / "mlflow.db"
    if not db.is_file():
        return []
    try:
        with sqlite3.connect(db, timeout=1) as con:
            return con.execute("select run_uuid, status from runs order by start_time").fetchall()
    except sqlite3.Error:
        return []


def _start_and_signal(project: Path, sig: int, namespace: str) -> tuple[subprocess.CompletedProcess, list]:
    proc = subprocess.Popen([str(BIN / "curate"), "pipeline=ingest", f"data.path={CORPUS_DIR}",
                             f"run.namespace={namespace}"], cwd=project, env=_env(project),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if any(status == "RUNNING" for _, status in _runs(project)):
            time.sleep(1.0)  # into the ingest stage
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before it could be signalled"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=240)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), _runs(project)


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_interrupted_run_says_one_line_exits_128_plus_the_signal_and_is_recorded_killed(project, sig, code):
    done, runs = _start_and_signal(project, sig, f"interrupt_{sig}")
    assert done.returncode == code, done.stderr[-3000:]
    name = signal.Signals(sig).name
    lines = [line for line in done.stderr.splitlines() if "interrupted" in line]
    assert len(lines) == 1 and lines[0].startswith(f"curate: interrupted ({name})"), done.stderr[-3000:]
    assert "re-run the same command to resume" in lines[0]
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout
    assert [status for _, status in runs] == ["KILLED"], runs
    assert runs[0][0] in lines[0]


def test_the_next_run_closes_the_mlflow_run_of_a_killed_one(project):
    done, runs = _start_and_signal(project, signal.SIGKILL, "orphan")
    killed_by = time.time()
    assert done.returncode == -signal.SIGKILL and [s for _, s in runs] == ["RUNNING"]
    time.sleep(3)  # the next run takes over later: its start is not the killed run's end (issue #52)
    again = subprocess.run([str(BIN / "curate"), "pipeline=ingest", f"data.path={CORPUS_DIR}", "data.max_docs=20",
                            "run.namespace=orphan"], cwd=project, env=_env(project), capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    statuses = dict(_runs(project))
    assert statuses[runs[0][0]] == "KILLED" and sorted(statuses.values()) == ["FINISHED", "KILLED"]
    with sqlite3.connect(project / "mlruns" / "mlflow.db") as con:
        start, end = con.execute("select start_time, end_time from runs where run_uuid = ?", (runs[0][0],)).fetchone()
        tag = con.execute("select value from tags where run_uuid = ? and key = 'curation.end_time'",
                          (runs[0][0],)).fetchone()
    assert start <= end <= killed_by * 1000, (start, end, killed_by)  # its last sign of life, not the next run's start
    assert tag and tag[0].startswith("estimated")


def test_a_sweep_whose_job_fails_closes_its_parent_run_failed(project):
    # the second job's data.path does not exist: found when that job reads it (a value out of range, such as
    # data.max_docs=-3, is refused before any job runs: test_bad_inputs.py, sweep cases)
    done = subprocess.run([str(BIN / "curate"), "-m", "pipeline=ingest", "data.max_docs=5",
                           f"data.path={CORPUS_DIR},{project / 'nowhere.parquet'}"], cwd=project, env=_env(project),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    db = project / "mlruns" / "mlflow.db"
    with sqlite3.connect(db) as con:
        runs = dict(con.execute("select name, status from runs").fetchall())
    parent = [status for name, status in runs.items() if name.startswith("sweep ")]
    assert parent == ["FAILED"], runs  # it stayed RUNNING forever before
    assert "FINISHED" in runs.values()  # the job that ran
