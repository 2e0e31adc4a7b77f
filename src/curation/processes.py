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
