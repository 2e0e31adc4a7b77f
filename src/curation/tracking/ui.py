"""Where the MLflow UI of a run's store is, and the URLs that open a run in it.

``mlflow ui`` serves on ``MLFLOW_HOST:MLFLOW_PORT`` (its own defaults 127.0.0.1 and 5000). The summary's
command and URLs use the port the UI will really have: the one an ``mlflow ui`` already serving this store
answers on (it knows the run: ``/api/2.0/mlflow/runs/get``), else ``MLFLOW_PORT`` or 5000 when that port is
free, else the first free port above it (5000 is often taken: macOS's AirPlay receiver, another UI). Only
this machine is probed, with short timeouts; a remote tracking server is its own UI.

Every URL carries ``workflowType=machine_learning``: MLflow 3.17's UI opens an experiment in the view its
sidebar toggle last had in this browser (GenAI by default: a run page then sits under *GenAI >
Evaluations*), whatever the experiment's kind tag says (mlflow/mlflow#24498); the URL's ``workflowType``
comes first.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import urllib.request
from dataclasses import dataclass

DEFAULT_PORT = 5000
WORKFLOW = "workflowType=machine_learning"
_PROBE_S = 0.3
_PORTS_TRIED = 50


@dataclass(frozen=True)
class UiAddress:
    base: str  # http://host:port, no trailing slash
    command: str | None  # the command that serves it; None when it is already serving (or a remote server)
    serving: bool = False  # an ``mlflow ui`` of this store already answers at ``base``


def _remote(uri: str) -> bool:
    return uri.startswith(("http://", "https://", "databricks"))


def _host() -> str:
    host = os.environ.get("MLFLOW_HOST") or "127.0.0.1"
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


def _port() -> int:
    try:
        return int(os.environ.get("MLFLOW_PORT") or DEFAULT_PORT)
    except ValueError:
        return DEFAULT_PORT


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=_PROBE_S):
            return True
    except OSError:
        return False


def _serves_run(host: str, port: int, run_id: str | None) -> bool:
    """An MLflow server at ``host:port`` that knows ``run_id`` (so it serves this store)."""
    if not run_id:
        return False
    url = f"http://{host}:{port}/api/2.0/mlflow/runs/get?run_id={run_id}"
    try:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # this machine: never a proxy
        with opener.open(url, timeout=2 * _PROBE_S) as answer:  # noqa: S310 -- http://127.0.0.1 or MLFLOW_HOST
            return json.loads(answer.read().decode()).get("run", {}).get("info", {}).get("run_id") == run_id
    except Exception:  # noqa: BLE001 -- not an MLflow server, another store, slow: not this store's UI
        return False


def _free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        try:
            sock.bind((host, port))
            return True
        except OSError:
            return False


def ui_address(tracking_uri: str, run_id: str | None = None) -> UiAddress | None:
    """The UI for ``tracking_uri``: a running ``mlflow ui`` of this store, or the command and port to start one."""
    if not tracking_uri:
        return None
    if _remote(tracking_uri):
        return UiAddress(tracking_uri.rstrip("/"), None, serving=True) if tracking_uri.startswith("http") else None
    host, port = _host(), _port()
    command = f"mlflow ui --backend-store-uri {shlex.quote(tracking_uri)}"
    if _listening(host, port):
        if _serves_run(host, port, run_id):
            return UiAddress(f"http://{host}:{port}", None, serving=True)
        busy = port
        port = next((p for p in range(busy + 1, busy + 1 + _PORTS_TRIED) if _free(host, p)), busy)
    return UiAddress(f"http://{host}:{port}", f"{command} --port {port}")


def run_url(base: str, experiment_id: str, run_id: str) -> str:
    """The run's own page, in the model-training view."""
    return f"{base}/#/experiments/{experiment_id}/runs/{run_id}?{WORKFLOW}"


def runs_table_url(base: str, experiment_id: str) -> str:
    """The experiment's runs table, in the model-training view."""
    return f"{base}/#/experiments/{experiment_id}/runs?{WORKFLOW}"
