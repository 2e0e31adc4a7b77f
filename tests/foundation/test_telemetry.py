"""Nothing phones home (issue #44, item 8): ``curate``, ``kedro run`` and ``curate-megatron`` run on the
default path, with none of the telemetry switches set by the caller, and neither send telemetry nor open a
network connection.

Each command runs in a fresh Python process whose environment has no ``KEDRO_DISABLE_TELEMETRY``,
``DO_NOT_TRACK``, ``MLFLOW_DISABLE_TELEMETRY`` or CI / pytest variable (a user's shell), with the socket layer
guarded: a name lookup or a connection to anything but this machine is recorded and refused. Kedro's telemetry
hook (the ``kedro-telemetry`` plugin's ``telemetry_hook``, registered for ``kedro`` commands and every
``KedroSession``) must have run and found no consent, and its Heap sender must never have been called.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import CORPUS_SHARDS, make_project

pytestmark = pytest.mark.slow  # runs the commands in fresh processes

# Runs ``sys.argv[1]`` (curate | kedro | curate-megatron) with the rest of argv, the network guarded.
GUARDED = r"""
import json, os, socket, sys

REPORT = os.environ.pop("TELEMETRY_TEST_REPORT")
LOCAL = {None, "", "localhost", "127.0.0.1", "::1", "0.0.0.0"}


def note(**event):
    with open(REPORT, "a") as out:
        out.write(json.dumps(event) + "\n")


real_getaddrinfo = socket.getaddrinfo


def getaddrinfo(host, *args, **kwargs):
    if host not in LOCAL:
        note(kind="lookup", host=str(host))
        raise OSError("the network is refused by the test")
    return real_getaddrinfo(host, *args, **kwargs)


socket.getaddrinfo = getaddrinfo
real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex


def _remote(sock, address):
    return sock.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in LOCAL


def connect(self, address):
    if _remote(self, address):
        note(kind="connect", host=str(address[0]))
        raise OSError("the network is refused by the test")
    return real_connect(self, address)


def connect_ex(self, address):
    if _remote(self, address):
        note(kind="connect", host=str(address[0]))
        return 111
    return real_connect_ex(self, address)


socket.socket.connect, socket.socket.connect_ex = connect, connect_ex

import kedro_telemetry.plugin as plugin  # the hook object the plugin's entry points name

real_send = plugin._send_heap_event


def send(event_name, *args, **kwargs):
    note(kind="heap", event=event_name)
    return False


plugin._send_heap_event = send
command, sys.argv = sys.argv[1], sys.argv[1:]
code = 0
try:
    if command == "curate":
        from curation.hydra_app import main
    elif command == "kedro":
        from kedro.framework.cli import main
    else:
        from curation.pretraining.launch import main
    code = main()
except SystemExit as exit:
    code = exit.code
finally:
    note(kind="hook", consent=plugin.telemetry_hook._consent)
    note(kind="env", **{k: os.environ.get(k) for k in ("KEDRO_DISABLE_TELEMETRY", "MLFLOW_DISABLE_TELEMETRY")})
sys.exit(code or 0)
"""

# what a user's shell would not have, or what would switch the telemetry off for us
SWITCHES = ("KEDRO_DISABLE_TELEMETRY", "DO_NOT_TRACK", "MLFLOW_DISABLE_TELEMETRY", "HF_HUB_DISABLE_TELEMETRY",
            "RAY_USAGE_STATS_ENABLED", "CI", "GITHUB_ACTIONS", "GITHUB_ACTION", "PYTEST_CURRENT_TEST",
            "PYTEST_VERSION", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "HYDRA_FULL_ERROR")


def _run(command: str, args: list[str], project: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess, list]:
    report = tmp_path / f"{command}.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in SWITCHES and not k.startswith("PYTEST_")}
    env.update(CURATION_PROJECT_ROOT=str(project), TELEMETRY_TEST_REPORT=str(report), COLUMNS="160")
    done = subprocess.run([sys.executable, "-c", GUARDED, command, *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=300)
    events = [json.loads(line) for line in report.read_text().splitlines()] if report.exists() else []
    return done, events


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, Path]:
    """(a project without a .telemetry file, 12 documents of the bundled corpus)."""
    base = tmp_path_factory.mktemp("telemetry")
    project = make_project(base / "project")
    assert not (project / ".telemetry").exists()  # only the entry point can switch the telemetry off here
    path = base / "docs.parquet"
    pd.read_parquet(CORPUS_SHARDS[0], columns=["id", "text"]).head(12).to_parquet(path)
    return project, path


INGEST = ["pipeline=ingest", "data.workers=1", "data.decontaminate=off", "data.dedup.fuzzy=false"]


def _assert_nothing_sent(done: subprocess.CompletedProcess, events: list, hook_ran: bool) -> None:
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    sent = [e for e in events if e["kind"] in ("lookup", "connect", "heap")]
    assert sent == [], sent
    hook = [e for e in events if e["kind"] == "hook"]
    assert len(hook) == 1
    # the hook ran (a KedroSession or a kedro command) and found no consent; not run at all otherwise
    assert hook[0]["consent"] is (False if hook_ran else None), hook
    env = [e for e in events if e["kind"] == "env"][0]
    assert env["KEDRO_DISABLE_TELEMETRY"] and env["MLFLOW_DISABLE_TELEMETRY"], env
    assert "Heap" not in done.stdout + done.stderr and "anonymous usage data" not in done.stdout + done.stderr


def test_curate_sends_no_telemetry(corpus, tmp_path):
    project, path = corpus
    # MLflow tracking on (the default): the MLflow run is recorded in the project's sqlite store
    done, events = _run("curate", [*INGEST, f"data.path={path}", "run.namespace=telemetry_curate"], project,
                        tmp_path)
    _assert_nothing_sent(done, events, hook_ran=True)
    assert (project / "mlruns" / "mlflow.db").exists()


def test_kedro_run_sends_no_telemetry(corpus, tmp_path):
    project, path = corpus
    # (not data.decontaminate=off: `kedro run --params` reads `off` as YAML's false)
    # (MLflow off: curate's test covers it; here, Kedro's CLI hooks around the command)
    params = ",".join(["tracking.enabled=false", "data.workers=1", "data.dedup.fuzzy=false", f"data.path={path}",
                       "run.namespace=telemetry_kedro"])
    done, events = _run("kedro", ["run", "--pipelines", "ingest", "--params", params], project, tmp_path)
    _assert_nothing_sent(done, events, hook_ran=True)


def test_curate_megatron_sends_no_telemetry(corpus, tmp_path):
    project, path = corpus
    from curation.lm import train_tokenizer

    docs = pd.read_parquet(path)
    train_tokenizer(docs["text"].tolist(), vocab_size=400).save(str(tmp_path / "tokenizer.json"))
    done, events = _run("curate-megatron", ["convert", "--input", str(path), "--tokenizer",
                                            str(tmp_path / "tokenizer.json"), "--output-prefix",
                                            str(tmp_path / "out" / "sel")], project, tmp_path)
    _assert_nothing_sent(done, events, hook_ran=False)


def test_the_projects_consent_file_says_no(monkeypatch):
    """The checkout's ``.telemetry`` is Kedro's own opt-out, read from the project root by the plugin: it covers
    ``kedro`` commands that load no project code (and a KedroSession made without curation.settings)."""
    from kedro_telemetry.plugin import _check_for_telemetry_consent

    from tests.conftest import REPO

    for name in SWITCHES:
        monkeypatch.delenv(name, raising=False)
    assert _check_for_telemetry_consent(REPO) is False
