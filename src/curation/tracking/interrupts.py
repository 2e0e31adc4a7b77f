"""Ctrl-C and SIGTERM end a run in one line, with a true record (issue #44, class 4).

Without this, Ctrl-C printed ~340 lines of trace, SIGTERM nothing, and MLflow's exit handler closed the
interrupted run as FINISHED with partial metrics (Lightning turns Ctrl-C inside ``fit`` into ``sys.exit(1)``).
Now ``curate`` and ``kedro run`` install :func:`install` once the config is composed, and wrap the run in
:func:`handled`: a signal raises :class:`KeyboardInterrupt` (SIGTERM: :class:`Terminated`) in the main thread,
whatever it becomes on the way up (Lightning's ``SystemExit(1)`` included) the command then

- closes the open MLflow runs of this process as KILLED (the job's run, and a sweep's parent run);
- prints ``<prog>: interrupted (SIGTERM): ... re-run the same command to resume`` and nothing else;
- exits 130 (SIGINT) or 143 (SIGTERM), the shell's convention (128 + the signal).

A run killed with SIGKILL cannot say anything: the next run that takes its namespace closes its MLflow run as
KILLED (:mod:`curation.tracking.hooks`: the namespace's run record beside its lock).
"""

from __future__ import annotations

import os
import signal
import sys
from contextlib import contextmanager
from typing import Iterator

_received: list[int] = []


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C's KeyboardInterrupt (Lightning stops gracefully on both)."""


def _on_signal(signum: int, frame: object) -> None:
    _received.append(signum)
    if signum == signal.SIGTERM:
        raise Terminated()
    raise KeyboardInterrupt()


def install() -> None:
    """Record SIGINT and SIGTERM and raise them as exceptions in the main thread (idempotent)."""
    _received.clear()
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)


def received() -> int | None:
    """The first signal this process received since :func:`install`, or None."""
    return _received[0] if _received else None


def close_records(status: str) -> list[str]:
    """End this process's open MLflow runs with ``status`` (KILLED / FAILED): the tracking hook's job run and a
    sweep's parent run; the ids closed. Never raises (the record is best-effort on the way out)."""
    closed: list[str] = []
    try:
        from curation.tracking.hooks import abort_open_runs

        closed += abort_open_runs(status)
    except Exception:  # noqa: BLE001 - the message and the exit status still have to go out
        pass
    try:
        from curation.tracking.store import PARENT_RUN_ENV

        parent = os.environ.pop(PARENT_RUN_ENV, None)
        if parent and "mlflow" in sys.modules:
            import mlflow

            client = mlflow.MlflowClient()
            if client.get_run(parent).info.status == "RUNNING":
                client.set_terminated(parent, status=status)
                closed.append(parent)
    except Exception:  # noqa: BLE001
        pass
    return closed


def _descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (Linux /proc; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def stop_workers() -> None:
    """SIGKILL this process's worker processes (the shard executor's pool, its forkserver, loky workers): an
    interrupted run ends now, and a worker caught half-started does not print its own trace after our line."""
    for pid in _descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"resource_tracker" in f.read():
                    continue  # it unlinks the workers' semaphores once they are gone (killed, it is restarted and
                    # prints a KeyError trace for each)
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@contextmanager
def handled(prog: str) -> Iterator[None]:
    """Run the body; on a signal received meanwhile, close the records KILLED, print one line, exit 128 + sig.
    Any other failure that leaves a sweep's parent run open closes it FAILED and goes on up."""
    try:
        yield
    except BaseException as err:
        sig = received()
        if sig is None:
            if not isinstance(err, SystemExit) or err.code not in (0, None):
                close_records("FAILED")
            raise
        stop_workers()
        closed = close_records("KILLED")
        name = signal.Signals(sig).name
        record = f" (MLflow run{'s' if len(closed) > 1 else ''} {', '.join(closed)} recorded KILLED)" if closed else ""
        print(f"{prog}: interrupted ({name}){record}: re-run the same command to resume", file=sys.stderr,
              flush=True)
        raise SystemExit(128 + sig) from None
