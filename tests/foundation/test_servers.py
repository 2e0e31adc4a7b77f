"""`kedro viz` shows the pipelines and `mlflow server` lists the runs, both on 127.0.0.1."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.processes import MARKER_ENV, marked_processes, start_in_group, stop_group

BIN = Path(sys.executable).parent


def _free_port() -> int:
    """A free port below 49152 (kedro-viz refuses the ephemeral range the OS hands out for port 0)."""
    rng = random.Random(os.getpid())
    for _ in range(200):
        port = rng.randint(20000, 40000)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-40000")


def _get_json(url: str, timeout_s: float = 60.0, data: bytes | None = None) -> dict:
    """Poll ``url`` until it answers (bounded: at most ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=5) as response:
                return json.loads(response.read())
        except Exception as exc:  # not up yet
            last = exc
            time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {timeout_s}s: {last}")


def _serve(args: list[str], cwd: Path) -> subprocess.Popen:
    """The server in its own process group: its workers are stopped with it (``_stop``)."""
    env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "true", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    log = (cwd / "server.log").open("w")  # read back when the server does not come up
    return start_in_group(args, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)


def _stop(process: subprocess.Popen) -> None:
    stop_group(process)


@pytest.mark.slow  # starts `kedro viz`
def test_kedro_viz_lists_the_pipelines(project):
    before = set(marked_processes(os.environ[MARKER_ENV]))
    port = _free_port()
    server = _serve([str(BIN / "kedro"), "viz", "run", "--host", "127.0.0.1", "--port", str(port), "--no-browser"],
                    project)
    try:
        main = _get_json(f"http://127.0.0.1:{port}/api/main")
    except TimeoutError as exc:
        raise AssertionError((project / "server.log").read_text()[-3000:]) from exc
    finally:
        _stop(server)
    # Nothing of the server is left: kedro viz's uvicorn worker outlived a SIGTERM of its parent alone.
    left = {pid: cmd for pid, cmd in marked_processes(os.environ[MARKER_ENV]).items() if pid not in before}
    assert not left, f"kedro viz left processes behind: {left}"
    assert {"__default__", "ingest"} <= {p["id"] for p in main["pipelines"]}
    names = {n["name"] for n in main["nodes"]}
    assert {"ingest_documents_node", "compute_document_statistics_node", "documents"} <= names


@pytest.mark.slow  # starts `mlflow server` on the session's ingest sweep
def test_mlflow_server_lists_the_runs(ingest_sweep):
    project = ingest_sweep.project
    port = _free_port()
    server = _serve([str(BIN / "mlflow"), "server", "--backend-store-uri", ingest_sweep.store,
                     "--host", "127.0.0.1", "--port", str(port), "--workers", "1"], project.parent)
    try:
        experiments = _get_json(f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/search",
                                data=json.dumps({"max_results": 10}).encode())
        experiment_id = next(e["experiment_id"] for e in experiments["experiments"] if e["name"] == "curation")
        runs = _get_json(f"http://127.0.0.1:{port}/api/2.0/mlflow/runs/search",
                         data=json.dumps({"experiment_ids": [experiment_id]}).encode())
    finally:
        _stop(server)
    assert len(runs["runs"]) == 3 and {run["info"]["status"] for run in runs["runs"]} == {"FINISHED"}  # parent + 2
    params = [{p["key"]: p["value"] for p in run["data"].get("params", [])} for run in runs["runs"]]
    assert sorted(p["data.max_docs"] for p in params if "data.max_docs" in p) == ["40", "80"]
