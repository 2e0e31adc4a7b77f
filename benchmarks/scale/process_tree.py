"""Peak memory of a child process and all its descendants, for the scale benchmarks (no psutil here).

``run_measured`` polls ``/proc`` every 0.1 s, summing the RSS (and its anonymous part, RssAnon) of the child
and every descendant (Ray's included; shared pages count once per process: Ray's figure is an upper bound).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass


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
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    peak_rss_mb: float
    peak_anon_mb: float


def run_measured(args: list[str], **popen_kwargs) -> Measured:
    """Run ``args`` to the end (stdout/stderr captured as text) and return its peak tree memory."""
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
    return Measured(proc.returncode, out, err or "", time.perf_counter() - start, peak[0] / 1024, peak[1] / 1024)


def run_json(argv: list[str], **env) -> dict:
    """``python -c <argv>`` with ``src/`` on the path (and ``env``): the JSON of its last line, its peak memory."""
    from pathlib import Path

    src = str(Path(__file__).resolve().parents[2] / "src")
    run = run_measured([sys.executable, "-c", *argv], env={**os.environ, "PYTHONPATH": src, **env})
    if run.returncode != 0:
        raise RuntimeError(run.stderr[-3000:])
    return {**json.loads(run.stdout.strip().splitlines()[-1]), "peak_rss_mb": run.peak_rss_mb,
            "peak_anon_mb": run.peak_anon_mb}
