"""DataMask on a sharded pruned set: one 1M-item block as an independent task vs today's in-process call.

Issue #14: ``select('datamask', ...)`` on one 1M x 384 block peaked at 8.3 GB RSS; the goal for the whole
chain is 3 GB. This benchmark writes a pruned set of N synthetic unit vectors (float32, d=384; labelled
synthetic: timing and memory only) with a quality column as S sharded datasets (``pruned_scores`` /
``pruned_embeddings``, written shard by shard), then measures, each in a fresh child process whose process
tree (the driver and the spawned block process) is polled every 0.1 s from /proc:

* ``block_task``: :func:`curation.selection.sharded.run_datamask_blocks` with one block (block_size >= N):
  the driver holds the quality column and the plan (8 bytes/doc each); the block process gathers its rows
  from the memory-mapped ``.npy`` shards and runs DataMask;
* ``in_process`` (``--baseline``): today's path, the whole matrix loaded and ``select('datamask', ...)``;
* ``block_task_half`` (``--half-blocks``): block_size = N / 2, two block processes one after the other
  (a smaller block than the paper's 1M: a different plan, so another selection).

Both run the same seed and config at a small step count (``--steps``), so their selections must be equal
(the CSV records both digests). Run it under ``flock /tmp/bench.lock``; the load average before and after
each measurement is recorded (other processes on the machine may load the cores).

    flock /tmp/bench.lock python benchmarks/scale/bench_selection_blocks.py --n 1000000 --steps 5 \
        --baseline --half-blocks
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "scale"))

from process_tree import run_measured  # noqa: E402

WRITE_CHILD = textwrap.dedent("""
    import sys, numpy as np, pandas as pd
    from curation.shards import ShardWriter, shard_names
    root, n, d, shards = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    names = shard_names(shards)
    sw, ew = ShardWriter(root + "/pruned_scores", "frame"), ShardWriter(root + "/pruned_embeddings", "array")
    bounds = np.linspace(0, n, shards + 1).astype(int)
    for i, name in enumerate(names):
        rng = np.random.default_rng([7, i])
        rows = bounds[i + 1] - bounds[i]
        x = rng.standard_normal((rows, d), dtype=np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        q = np.round(rng.uniform(4, 15, rows), 2)
        ids = [f"syn-{j}" for j in range(bounds[i], bounds[i + 1])]
        sw.mark_complete(sw.write(name, pd.DataFrame({"id": ids, "quality": q})))
        ew.mark_complete(ew.write(name, x))
        del x
    p = sw.finalize(names, stage="pruning")
    ew.finalize(names, stage="pruning", aligned_with=p.fingerprint)
    print("{}")
""")

BLOCK_CHILD = textwrap.dedent("""
    import hashlib, json, sys, time, numpy as np
    from curation.selection.sharded import read_quality, run_datamask_blocks
    from curation.shards import ShardedDataset
    root, work, budget, config = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
    scores, emb = ShardedDataset(root + "/pruned_scores"), ShardedDataset(root + "/pruned_embeddings")
    start = time.perf_counter()
    q = read_quality(scores)
    sel, history, info = run_datamask_blocks(q, np.arange(len(q)), emb, budget, config, 0, work)
    print(json.dumps({"seconds": time.perf_counter() - start, "blocks": info["n_blocks"],
                      "digest": hashlib.sha256(sel.tobytes()).hexdigest()[:16]}))
""")

INPROCESS_CHILD = textwrap.dedent("""
    import hashlib, json, sys, time, numpy as np
    from curation.selection import select
    from curation.shards import ShardedDataset
    root, budget, config = sys.argv[1], int(sys.argv[3]), json.loads(sys.argv[4])
    scores, emb = ShardedDataset(root + "/pruned_scores"), ShardedDataset(root + "/pruned_embeddings")
    start = time.perf_counter()
    q = scores.to_frame(["quality"])["quality"].to_numpy()
    x = np.concatenate([a for _, a in emb.iter_arrays(mmap=False)])  # today: the whole matrix in memory
    result = select("datamask", quality=q, embeddings=x, budget=budget, config=config, seed=0)
    print(json.dumps({"seconds": time.perf_counter() - start, "blocks": result.info["n_blocks"],
                      "digest": hashlib.sha256(result.indices.astype(np.int64).tobytes()).hexdigest()[:16]}))
""")


def measure(argv: list[str]) -> dict:
    run = run_measured([sys.executable, "-c", *argv], env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    if run.returncode != 0:
        raise RuntimeError(run.stderr[-3000:])
    result = json.loads(run.stdout.strip().splitlines()[-1])
    result["peak_rss_mb"] = run.peak_rss_mb
    result["peak_anon_mb"] = run.peak_anon_mb
    return result


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--d", type=int, default=384)
    parser.add_argument("--shards", type=int, default=10)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--keep", type=float, default=0.1, help="budget = keep x n")
    parser.add_argument("--baseline", action="store_true", help="also run today's in-process select()")
    parser.add_argument("--half-blocks", action="store_true",
                        help="also run the block tasks with block_size = n / 2 (two blocks, one process at a time)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "scale" / "selection_blocks.csv")
    parser.add_argument("--no-mlflow", action="store_true")
    args = parser.parse_args()

    config = {"steps": args.steps, "history_every": max(1, args.steps), "checkpoint_every": 0,
              "block_size": max(args.n, 2)}
    budget = int(args.keep * args.n)
    rows = []
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        before = loadavg()
        start = time.perf_counter()
        written = measure([WRITE_CHILD, tmp, str(args.n), str(args.d), str(args.shards)])
        rows.append({"path": "write_shards", "n": args.n, "d": args.d, "steps": 0, "blocks": 0,
                     "seconds": round(time.perf_counter() - start, 2), "peak_rss_mb": round(written["peak_rss_mb"], 1),
                     "peak_anon_mb": round(written["peak_anon_mb"], 1),
                     "digest": "", "load_before": before, "load_after": loadavg()})
        paths = [("block_task", BLOCK_CHILD, config)]
        paths += [("in_process", INPROCESS_CHILD, config)] if args.baseline else []
        if args.half_blocks:
            paths.append(("block_task_half", BLOCK_CHILD, {**config, "block_size": -(-args.n // 2)}))
        for name, child, cfg in paths:
            before = loadavg()
            result = measure([child, tmp, str(Path(tmp) / f"work-{name}"), str(budget), json.dumps(cfg)])
            rows.append({"path": name, "n": args.n, "d": args.d, "steps": args.steps, "blocks": result["blocks"],
                         "seconds": round(result["seconds"], 2), "peak_rss_mb": round(result["peak_rss_mb"], 1),
                         "peak_anon_mb": round(result["peak_anon_mb"], 1),
                         "digest": result["digest"], "load_before": before, "load_after": loadavg()})
            print(rows[-1], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    png = plot(rows, args.out.with_suffix(".png"))
    if not args.no_mlflow:
        sys.path.insert(0, str(ROOT / "src"))
        from curation.tracking.benchmarks import log_benchmark

        metrics = {f"{r['path']}_{k}": r[k] for r in rows for k in ("seconds", "peak_rss_mb", "peak_anon_mb")}
        log_benchmark("selection_blocks", files=[args.out, png], metrics=metrics,
                      params={"n": args.n, "d": args.d, "steps": args.steps, "shards": args.shards,
                              "budget": budget, "vectors": "synthetic unit vectors"})


def plot(rows: list[dict], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in rows if r["path"] != "write_shards"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), constrained_layout=True)
    names = [r["path"] for r in runs]
    colors = {"block_task": "tab:green", "in_process": "tab:red", "block_task_half": "tab:olive"}
    axes[0].bar(names, [r["peak_rss_mb"] / 1024 for r in runs], color=[colors[n] for n in names], alpha=0.35,
                label="RSS (incl. file-backed pages)")
    axes[0].bar(names, [r["peak_anon_mb"] / 1024 for r in runs], color=[colors[n] for n in names],
                label="anonymous RSS")
    axes[0].axhline(3.0, color="k", ls="--", lw=1, label="3 GB goal (issue #14)")
    axes[0].set(ylabel="peak of the process tree (GB)", title=f"DataMask on {runs[0]['n']:,} x {runs[0]['d']}")
    axes[0].legend(loc="lower left", fontsize=8)
    axes[1].bar(names, [r["seconds"] for r in runs], color=[colors[n] for n in names])
    axes[1].set(ylabel=f"wall time (s), {runs[0]['steps']} steps", title=f"load avg before: {runs[0]['load_before']}")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    main()
