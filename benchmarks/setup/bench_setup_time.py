"""A fresh clone's ``bash scripts/setup.sh``, timed (issue #53: <= 180 s on 2 idle cores).

``git clone`` of this checkout's HEAD into a temporary folder, then its set-up from nothing: no ``.venv``, no
``data/06_models``, an empty uv cache (``UV_CACHE_DIR``) and no pip cache, as a new user's first command. Recorded:
the wall seconds, the CPU seconds of the whole process tree (``/usr/bin/time``), its peak RSS, the 1/5/15-minute
load before and after (sampled every 5 s in between: median and max of the 1-minute load), and from the files'
times when the install ended and each artifact was written. Appends a row to
``benchmarks/results/setup_time.csv`` (the project's record since 2026-11-27).

    .venv/bin/python benchmarks/setup/bench_setup_time.py --note "alone on 2 idle cores"
"""

from __future__ import annotations

import csv
import datetime as dt
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402

CSV = bench.RESULTS / "setup_time.csv"


def _stamp(path: Path) -> str:
    return dt.datetime.fromtimestamp(path.stat().st_mtime, dt.timezone.utc).strftime("%H:%M:%S") if path.exists() \
        else "n/a"


def main() -> None:
    args = bench.parser(__doc__, note="", keep=(False, "keep the clone")).parse_args()
    commit = subprocess.run(["git", "-C", str(bench.ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="setup_time_"))
    clone, cache = work / "clone", work / "uv-cache"
    subprocess.run(["git", "clone", "-q", str(bench.ROOT), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CURATION_SHARED_MODELS",
                                                              "CURATION_EMBEDDING_ARTIFACTS", "PYTHONPATH")}
    env.update(UV_CACHE_DIR=str(cache), PIP_NO_CACHE_DIR="1")
    loads, done = [], threading.Event()

    def sample() -> None:
        while not done.wait(5.0):
            loads.append(bench.loadavg())

    load_start = bench.loadavg3()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.time()
    run = subprocess.run(["/usr/bin/time", "-f", "TIME %e %U %S %M", "bash", "scripts/setup.sh"], cwd=clone, env=env,
                         capture_output=True, text=True)
    wall = time.time() - started
    done.set()
    if run.returncode:
        raise SystemExit(f"set-up failed ({run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    timing = re.search(r"TIME ([\d.]+) ([\d.]+) ([\d.]+) (\d+)", run.stderr)
    _, user, system, rss_kb = timing.groups()
    shared = clone / "data" / "06_models" / "shared"
    artifacts = sorted(p.name for p in shared.iterdir()) if shared.is_dir() else []
    times = {p.name.rsplit("-", 1)[0]: _stamp(p) for p in (shared.iterdir() if shared.is_dir() else [])}
    static = sorted((clone / "data" / "06_models" / "embedding").glob("static-*"))
    warnings = [line for line in (run.stdout + run.stderr).splitlines() if re.search(r"warn|error", line, re.I)
                and not line.startswith("TIME")]
    row = {"date": dt.date.today().isoformat(), "commit": commit, "where": f"git clone {bench.ROOT} (fresh: no .venv, "
           "no data/06_models, empty uv cache UV_CACHE_DIR, PIP_NO_CACHE_DIR=1)", "installer": "uv 0.13.9",
           "builds": "Ultra-FineWeb fastText in one worker process; heads, DSIR, DCLM here; bytecode "
           "(scripts/bytecode.py, nice 10) in the background",
           "wall_s": round(wall, 1), "install_s": "", "build_s": "",
           "cpu_s": round(float(user) + float(system), 1), "max_rss_mb": round(int(rss_kb) / 1024),
           "load_start": load_start, "load_end": bench.loadavg3(), "artifacts": " ".join(artifacts),
           "note": (f"{args.note}; 1-min load sampled every 5 s: median {statistics.median(loads):.2f}, max "
                    f"{max(loads):.2f}; " if loads else f"{args.note}; ") +
           f"from the files' times (UTC): started {dt.datetime.fromtimestamp(started, dt.timezone.utc):%H:%M:%S}, "
           f"install stamp {_stamp(clone / '.venv' / '.curation-install-stamp')}, "
           f"bytecode stamp {_stamp(clone / '.venv' / '.curation-bytecode-stamp')}, "
           + ", ".join(f"{k} {v}" for k, v in sorted(times.items()))
           + (f", static embedder {_stamp(static[0])}" if static else "")
           + f", prebuilt stamp {_stamp(clone / '.venv' / '.curation-prebuilt')}"
           + (f"; set-up output lines with warn/error: {len(warnings)}" + (f" ({warnings[0][:200]})" if warnings
                                                                              else ""))}
    install = clone / ".venv" / ".curation-install-stamp"
    if install.exists():
        row["install_s"] = round(install.stat().st_mtime - started, 1)
        row["build_s"] = round(started + wall - install.stat().st_mtime, 1)
    print(row, flush=True)
    with CSV.open() as handle:
        lines = handle.read().splitlines()
    header = next(line for line in lines if not line.startswith("#")).split(",")
    with CSV.open("a", newline="") as handle:
        csv.DictWriter(handle, fieldnames=header, extrasaction="ignore").writerow(row)
    (bench.RESULTS / "setup_time_last_output.txt").write_text(run.stdout + "\n--- stderr ---\n" + run.stderr)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
