"""Greedy DiSF (DiSF Algorithm 1, b = 1024): fast (rank-1 + lazy) vs reference, at d = 768.

Both implementations must pick identical items; the reference re-evaluates
-||C||_F from scratch for every candidate set. Writes
benchmarks/results/disf_greedy.csv and .png. Synthetic clustered unit vectors
with near-duplicates (labelled in the CSV).

    .venv/bin/python benchmarks/selection/bench_disf_greedy.py          # short: N = 1024
    .venv/bin/python benchmarks/selection/bench_disf_greedy.py --full   # N = 4096 (4 batches)
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from curation.selection import select  # noqa: E402
from curation.selection.objectives import disf  # noqa: E402
from curation.selection.synthetic import clustered_unit_vectors  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1024, help="items (default 1024 = one DiSF batch)")
    parser.add_argument("--d", type=int, default=768, help="embedding dimension")
    parser.add_argument("--ratio", type=float, default=0.1, help="keep ratio S/N")
    parser.add_argument("--batch-size", type=int, default=1024, help="b of DiSF Algorithm 1")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--full", action="store_true", help="N = 4096")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    n = 4096 if args.full else args.n
    emb, quality, _ = clustered_unit_vectors(n, args.d, n_clusters=50, duplicate_fraction=0.1, seed=args.seed)
    budget = int(round(args.ratio * n))
    data_label = f"synthetic clustered unit vectors, 50 clusters, 10% near-duplicates, seed {args.seed}"

    results = {}
    for impl in ("fast", "reference"):
        cfg = {"diversity": "disf", "lam": 0.0, "impl": impl, "batch_size": args.batch_size}
        t0 = time.perf_counter()
        sel = select("greedy", quality=quality, embeddings=emb, budget=budget, config=cfg, seed=args.seed)
        results[impl] = (time.perf_counter() - t0, sel)
        print(f"{impl:9s} {results[impl][0]:9.3f} s  evaluations {sel.info['evaluations']}", flush=True)
    identical = bool(np.array_equal(results["fast"][1].indices, results["reference"][1].indices))
    ratio = results["reference"][0] / results["fast"][0]
    print(f"identical picks: {identical}; reference / fast = {ratio:.1f}x")

    args.out.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "impl": impl,
            "n": n,
            "d": args.d,
            "budget": budget,
            "batch_size": args.batch_size,
            "wall_time_s": round(t, 4),
            "evaluations": sel.info["evaluations"],
            "disf_value": disf(emb, quality, sel.indices),
            "identical_picks": identical,
            "speed_ratio_reference_over_fast": round(ratio, 2),
            "threads": args.threads,
            "data": data_label,
        }
        for impl, (t, sel) in results.items()
    ]
    with open(args.out / "disf_greedy.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)

    fig, ax = plt.subplots(figsize=(5, 3.5))
    times = [results[i][0] for i in ("fast", "reference")]
    ax.bar(["fast (rank-1, lazy)", "reference"], times, color=["tab:green", "tab:gray"])
    ax.set_yscale("log")
    ax.set_ylabel("wall time (s)")
    ax.set_title(f"Greedy DiSF, N={n}, d={args.d}, S={budget}, b={args.batch_size}\n"
                 f"reference/fast = {ratio:.0f}x, identical picks: {identical} (synthetic)", fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out / "disf_greedy.png", dpi=120)
    print(f"wrote {args.out / 'disf_greedy.csv'} and .png")


if __name__ == "__main__":
    main()
