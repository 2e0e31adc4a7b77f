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


GONE_WITHIN_S = 60.0  # how long a test waits for processes to end: generous, a loaded CI machine is slow


def _wait_for_exit_event(pids, timeout: float) -> None:
    """Block until one of ``pids`` ends or ``timeout`` seconds pass. Each process gets a pidfd (Linux >= 5.3),
    which becomes readable the moment the process ends, so this wakes on the event itself; where pidfds are not
    available, it returns after 50 ms (the caller looks again)."""
    import select

    fds = []
    try:
        for pid in pids:
            try:
                fds.append(os.pidfd_open(pid))
            except ProcessLookupError:
                return  # ended already
            except (AttributeError, OSError):
                time.sleep(min(timeout, 0.05))
                return
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        poller.poll(max(0.0, timeout) * 1000)
    finally:
        for fd in fds:
            os.close(fd)


def wait_ended(pids, timeout: float = GONE_WITHIN_S) -> set[int]:
    """Wait until every process of ``pids`` has ended (a zombie counts as ended), at most ``timeout`` seconds;
    the pids still running then (empty: all ended). It returns once the last one ends, not after a fixed time:
    a test that waits a fixed 5 s for a process to die fails on a loaded machine where it dies in 6."""
    from curation.namespace_lock import pid_alive

    deadline = time.monotonic() + timeout
    while True:
        left = {pid for pid in pids if pid_alive(pid)}
        remaining = deadline - time.monotonic()
        if not left or remaining <= 0:
            return left
        _wait_for_exit_event(left, remaining)


def wait_gone(marker: str, timeout: float = GONE_WITHIN_S, exclude: set[int] = frozenset()) -> dict[int, str]:
    """Wait until no live process carries ``MARKER_ENV=marker`` (:func:`marked_processes`), at most ``timeout``
    seconds; what is still running then (empty: all gone). Woken by the processes' ends (:func:`wait_ended`'s
    pidfds), and it looks again at least once a second, for a process started while it waited."""
    deadline = time.monotonic() + timeout
    while True:
        left = marked_processes(marker, exclude)
        remaining = deadline - time.monotonic()
        if not left or remaining <= 0:
            return left
        _wait_for_exit_event(set(left), min(remaining, 1.0))


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
