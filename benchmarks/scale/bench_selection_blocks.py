"""DataMask on a sharded pruned set: one 1M-item block as an independent task vs today's in-process call.

Issue #14 (goal: 3 GB for the chain): N synthetic unit vectors (d=384, timing and memory only) with a quality
column written as sharded ``pruned_scores`` / ``pruned_embeddings``, then, each in a fresh child process whose
tree is polled: ``block_task`` (:func:`curation.selection.sharded.run_datamask_blocks`, one block),
``in_process`` (``--baseline``: the whole matrix and ``select('datamask', ...)``) and ``block_task_half``
(``--half-blocks``: two blocks of N / 2). Same seed and config: the selections' digests must agree.

    flock /tmp/bench.lock python benchmarks/scale/bench_selection_blocks.py --n 1000000 --steps 5 \
        --baseline --half-blocks
"""

from __future__ import annotations

import json
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402
from _driver import loadavg3  # noqa: E402
from process_tree import run_json  # noqa: E402

WRITE_CHILD = textwrap.dedent("""
    import json, sys, numpy as np, pandas as pd
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
    print(json.dumps({"steps": 0, "blocks": 0, "digest": ""}))
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


def main() -> None:
    args = bench.parser(__doc__, n=1_000_000, d=384, shards=10, steps=5, keep=0.1,
                        baseline=(False, "also run today's in-process select()"),
                        half_blocks=(False, "also run the block tasks with block_size = n / 2 (two blocks, one "
                                            "process at a time)"), work=Path(tempfile.gettempdir()),
                        out=bench.RESULTS / "scale" / "selection_blocks.csv", mlflow=True).parse_args()

    config = {"steps": args.steps, "history_every": max(1, args.steps), "checkpoint_every": 0,
              "block_size": max(args.n, 2)}
    budget = int(args.keep * args.n)
    rows = []
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        paths = [("block_task", BLOCK_CHILD, config)]
        paths += [("in_process", INPROCESS_CHILD, config)] if args.baseline else []
        if args.half_blocks:
            paths.append(("block_task_half", BLOCK_CHILD, {**config, "block_size": -(-args.n // 2)}))
        runs = [("write_shards", WRITE_CHILD, [args.n, args.d, args.shards])]
        runs += [(name, child, [Path(tmp) / f"work-{name}", budget, json.dumps(cfg)]) for name, child, cfg in paths]
        for name, child, argv in runs:
            result = {"steps": args.steps, **run_json(child, tmp, *argv, load=loadavg3)}
            rows.append({"path": name, "n": args.n, "d": args.d, "steps": result["steps"], "blocks": result["blocks"],
                         # write_shards: the wall time of its process
                         "seconds": round(result.get("seconds", result["wall_seconds"]), 2),
                         "peak_rss_mb": round(result["peak_rss_mb"], 1),
                         "peak_anon_mb": round(result["peak_anon_mb"], 1), "digest": result["digest"],
                         "load_before": result["load_before"], "load_after": result["load_after"]})
            print(rows[-1], flush=True)
    metrics = {f"{r['path']}_{k}": r[k] for r in rows for k in ("seconds", "peak_rss_mb", "peak_anon_mb")}
    bench.write_result(rows, args.out, plot=plot, log=None if args.no_mlflow else dict(
        name="selection_blocks", metrics=metrics, params={"n": args.n, "d": args.d, "steps": args.steps,
                                                          "shards": args.shards, "budget": budget,
                                                          "vectors": "synthetic unit vectors"}))


def plot(rows: list[dict], path: Path) -> None:
    runs = [r for r in rows if r["path"] != "write_shards"]
    with bench.figure(path, 1, 2, figsize=(9, 3.6), constrained_layout=True, tight=False) as (fig, axes):
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
        axes[1].set(ylabel=f"wall time (s), {runs[0]['steps']} steps",
                    title=f"load avg before: {runs[0]['load_before']}")


if __name__ == "__main__":
    main()
