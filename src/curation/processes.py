"""Child processes that die with their parent.

``curate`` starts worker processes (the static embedder's and DataMask's block pools, spawned
interpreters) and the isolated fastText trainer (``subprocess``). Killed with SIGKILL, a parent
runs no clean-up code, and its children would run on, re-parented to init, and keep writing into
the run's staging folders. On Linux each child asks the kernel for a *parent-death signal*
(``prctl(PR_SET_PDEATHSIG, SIGKILL)``): when its parent ends, however it ends, the child is
killed too. Elsewhere the helpers are no-ops.

Use, at each spawn site:

* ``concurrent.futures.ProcessPoolExecutor`` / ``multiprocessing.Pool``:
  ``initializer=die_with_parent, initargs=(os.getpid(),)`` (or call
  :func:`die_with_parent` first thing in an existing initializer);
* ``subprocess``: ``subprocess.run(..., **die_with_parent_kwargs())`` (a ``preexec_fn`` that runs in
  the forked child before ``exec``; the setting survives ``exec``).

The kernel sends the signal when the *thread* that created the child ends, not the process; every
spawn site of the project creates its children from a thread that outlives them (the pool's or the
``subprocess`` call's thread, which waits for them).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from typing import Any, Callable

PR_SET_PDEATHSIG = 1

_prctl: Callable[..., int] | None = None
if sys.platform.startswith("linux"):
    try:  # resolved once, in the parent: a preexec_fn should not load libraries in the forked child
        _prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
        _prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
        _prctl.restype = ctypes.c_int
    except (OSError, AttributeError):
        _prctl = None


def supported() -> bool:
    """True where children can ask for a parent-death signal (Linux)."""
    return _prctl is not None


def die_with_parent(parent_pid: int | None = None, sig: int = signal.SIGKILL) -> None:
    """In a child: have the kernel send ``sig`` to this process when its parent ends.

    ``parent_pid``, the pid the parent had when it started the child, closes the race where the
    parent died before this call: the child is then already re-parented, and ends itself now.
    """
    if _prctl is None:
        return
    if _prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        return  # not fatal: the child merely loses the guarantee
    if parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), sig)


def die_with_parent_kwargs() -> dict[str, Any]:
    """Keyword arguments for ``subprocess.run`` / ``Popen``: the child dies with this process."""
    if _prctl is None:
        return {}
    parent = os.getpid()
    return {"preexec_fn": lambda: die_with_parent(parent)}


def loky_workers_die_with_parent() -> None:
    """Make joblib's ``loky`` backend (Hydra's joblib launcher, scikit-learn's ``n_jobs``) start its
    workers with :func:`die_with_parent`: joblib offers no other way to give loky an initializer, so the
    ``loky`` name is registered again, to a subclass that passes one. A no-op without joblib or Linux."""
    if _prctl is None:
        return
    try:
        from joblib import parallel
        from joblib._parallel_backends import LokyBackend
    except ImportError:
        return
    if getattr(parallel.BACKENDS.get("loky"), "_dies_with_parent", False):
        return

    class LokyDyingWithParent(LokyBackend):
        _dies_with_parent = True

        def configure(self, *args, **kwargs):
            if "initializer" not in kwargs and "initializer" not in self.backend_kwargs:
                kwargs["initializer"], kwargs["initargs"] = die_with_parent, (os.getpid(),)
            return super().configure(*args, **kwargs)

    parallel.register_parallel_backend("loky", LokyDyingWithParent)


# --- processes that a child starts in turn (a local Ray instance) --------------------------------------------

_REAPER = r"""
import os, signal, sys, time
key, value = sys.argv[1], sys.argv[2]
needle = f"{key}={value}".encode()
sys.stdin.buffer.read()  # EOF: the owner closed its end, or ended (however it ended)

def marked():
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        found.append(int(entry))
            except OSError:
                pass
    return found

quiet = 0
deadline = time.monotonic() + 30
while quiet < 3 and time.monotonic() < deadline:  # processes that were starting others: until none is left
    pids = marked()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    quiet = 0 if pids else quiet + 1
    time.sleep(0.2)
"""

REAPER_ENV = "CURATION_REAPED_BY"


class Reaper:
    """Ends every process started while :meth:`mark` is active once this process ends, however it ends.

    A local Ray instance (``ray.init()``) starts a GCS server and a raylet, which start the dashboard and
    runtime-env agents, log monitors and workers in turn; killed during Ray's start-up, the driver runs no
    clean-up, and those grandchildren, whose parent-death signal (if any) points at a process that is not
    the driver, run on. So before starting them, a small watcher process is started in a session of its
    own (a kill of the driver's process group does not reach it) holding the read end of a pipe whose
    write end only this process holds. Everything started while :meth:`mark` is active inherits the
    environment variable ``CURATION_REAPED_BY=<pid>-<nonce>``. When the pipe reports end-of-file (this
    process closed it: :meth:`close`, or ended, even by SIGKILL), the watcher SIGKILLs every process
    whose environment carries that value, until none is left, then ends. Linux only (``/proc``);
    elsewhere a no-op.
    """

    def __init__(self) -> None:
        import subprocess
        import uuid

        self.value = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._write: int | None = None
        self.process: Any = None
        if not sys.platform.startswith("linux"):
            return
        read, write = os.pipe()  # not inheritable (PEP 446): only the watcher's stdin holds the read end
        try:
            self.process = subprocess.Popen([sys.executable, "-c", _REAPER, REAPER_ENV, self.value], stdin=read,
                                            start_new_session=True, close_fds=True)
        finally:
            os.close(read)
        self._write = write

    def mark(self) -> "_Marked":
        return _Marked(self.value)

    def close(self, wait: bool = True) -> None:
        """End every marked process that is still running (the watcher does it), and the watcher."""
        write, self._write = self._write, None
        if write is not None:
            os.close(write)
        if wait and self.process is not None:
            self.process.wait(timeout=60)


class _Marked:
    def __init__(self, value: str) -> None:
        self.value = value
        self._before: str | None = None

    def __enter__(self) -> None:
        self._before = os.environ.get(REAPER_ENV)
        os.environ[REAPER_ENV] = self.value

    def __exit__(self, *exc: Any) -> None:
        if self._before is None:
            os.environ.pop(REAPER_ENV, None)
        else:
            os.environ[REAPER_ENV] = self._before
