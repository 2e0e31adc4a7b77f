"""One writer per namespace: a lock per ``run.namespace``, held for the whole run.

Two runs writing one namespace would overwrite each other's outputs, while the first one has
already printed (and recorded in MLflow) numbers about files that are no longer its own. So every
``curate`` job and every ``kedro run`` holds ``data/.locks/<namespace>.lock``:

* an exclusive ``flock`` on the file, which the kernel releases when the process ends, however
  it ends (a killed run never leaves a lock that blocks the next one);
* inside, who holds it: pid, host, command line, start time. A second run in the namespace fails
  at once with a message that names the first run (``NamespaceBusy``), or, with
  ``run.wait_for_lock=true``, waits until it is free (a log line every minute);
* a run that finds the record of a holder that is gone (killed; its flock died with it) takes the
  lock over and says so in the log.

The lock is re-entrant within a process (``curate`` takes it before composing the Kedro session,
and the tracking hook asks again for ``kedro run``). Sweep jobs write to namespaces of their own
(``<namespace>/multirun/<sweep>/<job>``), so jobs of one sweep, also parallel ones, never wait for
each other.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shlex
import socket
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator
from urllib.parse import quote

from curation.errors import UserError

log = logging.getLogger(__name__)

LOCKS = Path("data") / ".locks"


class NamespaceBusy(UserError):
    """Another live run holds the namespace."""


def lock_path(root: Path, namespace: str) -> Path:
    """``<root>/data/.locks/<namespace>.lock``; a ``/`` in the namespace is escaped (one flat folder)."""
    return Path(root) / LOCKS / f"{quote(str(namespace), safe='')}.lock"


def command_line(argv: list[str] | None = None) -> str:
    argv = list(sys.argv if argv is None else argv)
    if argv:
        argv[0] = Path(argv[0]).name
    return shlex.join(argv)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    try:  # a zombie has ended, only its parent has not reaped it yet
        return stat.read_text().rsplit(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True


def _ago(started: float) -> str:
    seconds = max(0.0, time.time() - started)
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


@dataclass
class Holder:
    pid: int
    host: str
    command: str
    started: float  # unix time

    @classmethod
    def me(cls) -> "Holder":
        return cls(os.getpid(), socket.gethostname(), command_line(), time.time())

    def describe(self) -> str:
        when = datetime.fromtimestamp(self.started, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"pid {self.pid} on {self.host}, started {when} ({_ago(self.started)}): {self.command}"

    def alive(self) -> bool | None:
        """Whether the holder's process still runs (None: another host, cannot tell)."""
        return pid_alive(self.pid) if self.host == socket.gethostname() else None


def _read_holder(fd: int) -> Holder | None:
    try:
        raw = os.pread(fd, 1 << 16, 0)
        data = json.loads(raw.decode()) if raw.strip() else None
        return Holder(int(data["pid"]), str(data["host"]), str(data["command"]), float(data["started"])) \
            if data else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


class NamespaceLock:
    """The lock of one namespace. ``acquire`` raises :class:`NamespaceBusy` (or waits, ``wait=True``)."""

    def __init__(self, root: Path, namespace: str, *, wait: bool = False, poll_s: float = 1.0,
                 report_every_s: float = 60.0) -> None:
        self.root = Path(root)
        self.namespace = str(namespace)
        self.path = lock_path(self.root, self.namespace)
        self.wait = wait
        self.poll_s = poll_s
        self.report_every_s = report_every_s
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def _relative(self) -> str:
        try:
            return str(self.path.relative_to(Path.cwd()))
        except ValueError:
            return str(self.path)

    def busy_message(self, holder: Holder | None) -> str:
        if holder is None:
            who = "another run (it has not recorded itself yet)"
        elif holder.alive() is False:
            who = (f"a process started by the run {holder.describe()}; that run has ended, but a process it "
                   f"started still holds the lock (find it with: fuser -v {self._relative()})")
        else:
            who = f"the run {holder.describe()}"
        return (f"namespace {self.namespace!r} is in use by {who}. Two runs in one namespace would overwrite "
                f"each other's outputs. Wait for that run to finish (or stop it), run this one in another "
                f"namespace (run.namespace=<name>), or add run.wait_for_lock=true to wait for it "
                f"(lock file: {self._relative()}).")

    def _try(self, fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def acquire(self) -> None:
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited across exec (PEP 446)
        try:
            if not self._try(fd):
                holder = _read_holder(fd)
                if not self.wait:
                    raise NamespaceBusy(self.busy_message(holder))
                log.warning("waiting for namespace %r: in use by %s (run.wait_for_lock=true)", self.namespace,
                            holder.describe() if holder else "another run")
                started = last = time.monotonic()
                while not self._try(fd):
                    time.sleep(self.poll_s)
                    if time.monotonic() - last >= self.report_every_s:
                        last = time.monotonic()
                        holder = _read_holder(fd)
                        log.warning("still waiting for namespace %r (%.0f s): in use by %s", self.namespace,
                                    last - started, holder.describe() if holder else "another run")
                log.info("namespace %r is free after %.0f s of waiting", self.namespace, time.monotonic() - started)
            previous = _read_holder(fd)
            if previous is not None and previous.pid != os.getpid():
                # The flock was free, so whoever the record names no longer holds it: it was killed
                # (a run that ends normally clears the record).
                state = {False: "no longer running", None: "on another host"}.get(previous.alive(),
                                                                                   "running, but not holding it")
                log.warning("namespace %r: taking over the lock left by %s (%s)", self.namespace,
                            previous.describe(), state)
            record = json.dumps(Holder.me().__dict__).encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, record, 0)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)  # a cleared record: the next run takes over silently
        except OSError:
            pass
        finally:
            os.close(fd)  # drops the flock


# Locks this process holds: path -> (lock, depth, owner pid). Re-entrant; a forked child owns none.
_HELD: dict[Path, list] = {}


def held_namespaces() -> list[str]:
    return [entry[0].namespace for entry in _HELD.values() if entry[2] == os.getpid()]


@contextmanager
def namespace_lock(root: Path, namespace: str, *, wait: bool = False) -> Iterator[NamespaceLock]:
    """Hold the lock of ``namespace`` for the block; re-entrant within this process."""
    path = lock_path(root, namespace)
    entry = _HELD.get(path)
    if entry is None or entry[2] != os.getpid():
        lock = NamespaceLock(root, namespace, wait=wait)
        lock.acquire()
        entry = _HELD[path] = [lock, 0, os.getpid()]
    entry[1] += 1
    try:
        yield entry[0]
    finally:
        entry[1] -= 1
        if entry[1] <= 0 and _HELD.get(path) is entry:
            del _HELD[path]
            entry[0].release()


def acquire_early(root: Path, namespace: str) -> NamespaceLock:
    """Take the lock before the run's config is composed (``curate`` with a namespace known from the
    command line): the first :func:`namespace_lock` of the same namespace adopts it; see
    :func:`release_others`."""
    path = lock_path(root, namespace)
    if path in _HELD and _HELD[path][2] == os.getpid():
        return _HELD[path][0]
    lock = NamespaceLock(root, namespace)
    lock.acquire()
    _HELD[path] = [lock, 0, os.getpid()]
    return lock


def release_others(root: Path, namespace: str) -> None:
    """Release the early locks (depth 0) of namespaces other than ``namespace``: the composed config
    chose another one than the command line suggested."""
    keep = lock_path(root, namespace)
    for path, entry in list(_HELD.items()):
        if path != keep and entry[1] <= 0 and entry[2] == os.getpid():
            del _HELD[path]
            entry[0].release()


def release_all() -> None:
    for path, entry in list(_HELD.items()):
        if entry[2] == os.getpid():
            del _HELD[path]
            entry[0].release()
