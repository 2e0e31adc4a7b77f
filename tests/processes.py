"""Processes started by tests: each server in its own process group, stopped with the whole group,
and the session-wide record of every process the test run started (see tests/conftest.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

# Every process the test run starts inherits this variable (subprocess, multiprocessing, Ray, Chromium),
# so a leftover is found by its environment even after its parent died and it was re-parented to init.
MARKER_ENV = "CURATION_TEST_RUN"


def marked_processes(marker: str, exclude: set[int] = frozenset()) -> dict[int, str]:
    """pid -> command line of the live processes whose environment holds ``MARKER_ENV=marker``."""
    needle = f"{MARKER_ENV}={marker}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in exclude:
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # ended meanwhile, or not ours to read
            continue
        if cmdline:  # a zombie has none: it is gone, only not reaped yet
            found[int(entry.name)] = cmdline
    return found


def start_in_group(args: list[str], **popen_kwargs) -> subprocess.Popen:
    """Start ``args`` as the leader of a new process group (and session): its workers join the group."""
    return subprocess.Popen(args, start_new_session=True, **popen_kwargs)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def stop_group(process: subprocess.Popen, grace_s: float = 20) -> None:
    """SIGTERM the whole group of ``process``, SIGKILL what is left after ``grace_s``.

    Stopping only the leader is not enough: ``kedro viz run`` answers SIGTERM by exiting while its
    uvicorn worker (a multiprocessing child, ~650 MB) lives on, re-parented to init.
    """
    pgid = process.pid
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + grace_s
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _group_alive(pgid):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait(timeout=10)
    deadline = time.monotonic() + 10
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)


def wait_for(predicate, timeout: float, what: str, process: subprocess.Popen | None = None):
    """Poll ``predicate`` every 50 ms until it returns something truthy (returned); fail the test if
    ``process`` ends first or ``timeout`` seconds pass."""
    import pytest

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        if process is not None and process.poll() is not None:
            pytest.fail(f"process ended (exit {process.returncode}) before {what}")
        time.sleep(0.05)
    pytest.fail(f"no {what} within {timeout} s")


HELD_ENV = "CURATION_TEST_HELD"
_HELD_CURATE = """
import os, sys, threading
from pathlib import Path
import {module} as target

def held(*args, **kwargs):
    Path(os.environ[{env!r}]).write_text("held")
    threading.Event().wait(600)  # bounded: never outlive a test that died before killing it
    os._exit(3)

target.{function} = held
sys.argv[0] = "curate"
from curation.hydra_app import main
sys.exit(main())
"""


def held_curate(module: str, function: str) -> list[str]:
    """The command of a ``curate`` (its overrides follow) in which ``module.function`` -- a stage the run reaches
    through a module attribute, e.g. a node's lazy ``from module import function`` -- is replaced by one that
    writes the file named in ``$CURATION_TEST_HELD`` and waits to be killed. The run stops at that point
    whatever the machine's speed, so a test kills it there (or finds it still running) without a race."""
    import sys

    return [sys.executable, "-c", _HELD_CURATE.format(module=module, function=function, env=HELD_ENV)]
