"""Peak memory of a child process and all its descendants (``/proc`` polled every 0.1 s; Ray's included, shared
pages once per process), for the scale benchmarks (no psutil here). Imported with ``benchmarks/`` on the path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from _driver import ROOT, SCALE, loadavg


def tree_rss_kib(pid: int) -> tuple[int, int]:
    """(RSS, anonymous RSS) in KiB of ``pid`` and every descendant."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    total, anon, stack = 0, 0, [pid]
    while stack:
        p = stack.pop()
        stack.extend(children.get(p, []))
        try:
            with open(f"/proc/{p}/status") as handle:
                for line in handle:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                    elif line.startswith("RssAnon:"):
                        anon += int(line.split()[1])
        except OSError:
            pass
    return total, anon


@dataclass
class Measured:
    stdout: str
    seconds: float
    peak_rss_mb: float
    peak_anon_mb: float


def run_measured(args: list[str], **popen_kwargs) -> Measured:
    """Run ``args`` to the end (stdout/stderr captured as text) and return its peak tree memory; a failure
    raises with the end of its output."""
    start = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=popen_kwargs.pop("stderr", subprocess.PIPE),
                            text=True, **popen_kwargs)
    peak = [0, 0]

    def poll() -> None:
        while proc.poll() is None:
            rss, anon = tree_rss_kib(proc.pid)
            peak[0], peak[1] = max(peak[0], rss), max(peak[1], anon)
            time.sleep(0.1)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    out, err = proc.communicate()
    thread.join()
    if proc.returncode != 0:
        command = " ".join(str(a) for a in args if "\n" not in str(a))[:300]  # a -c program left out
        raise RuntimeError(f"{command} failed ({proc.returncode}):\n{(err or out)[-4000:]}")
    return Measured(out, time.perf_counter() - start, peak[0] / 1024, peak[1] / 1024)


def run_json(code: str, *args, python: str = sys.executable, load=loadavg, cwd=None, **env) -> dict:
    """``python -c <code> <args>`` with ``src/`` and ``benchmarks/scale`` on the path (and ``env``): the JSON of
    its last line, its wall seconds (``wall_seconds``), peak memory and ``load()`` before and after."""
    before = load()
    run = run_measured([python, "-c", code, *map(str, args)], cwd=cwd,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(SCALE)]), **env})
    return {**json.loads(run.stdout.strip().splitlines()[-1]), "wall_seconds": run.seconds,
            "peak_rss_mb": run.peak_rss_mb, "peak_anon_mb": run.peak_anon_mb, "load_before": before,
            "load_after": load()}
