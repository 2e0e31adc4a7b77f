"""DATAMASK Fig. 4 analogue: time for DataMask to reach greedy DiSF's value; step time vs one pass.

For each N: greedy DiSF (b = 1024; the reference implementation extrapolated beyond --reference-max-n) gives
the target -||C||_F; DataMask (disf, lam = 0, one block) runs until its top-S reaches it. Also a DataMask step
against one streaming pass, a dense (G x N) 0/1 mask times the (N x d) embeddings. Synthetic clustered unit
vectors with near-duplicates. Writes benchmarks/results/datamask_time_to_greedy.csv and .png.

    .venv/bin/python benchmarks/selection/bench_datamask_time_to_greedy.py          # short
    # paper sizes, d = 768 (hours)
    .venv/bin/python benchmarks/selection/bench_datamask_time_to_greedy.py --sizes 5000,10000,20000,50000,100000 \
        --d 768 --max-steps 5000
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from curation.selection import select
from curation.selection.objectives import disf
from curation.selection.synthetic import clustered_unit_vectors

from _datamask import bench, parse, timed_select, write_result

DISF = {"diversity": "disf", "lam": 0.0}  # the objective of every run: DiSF alone


def reference_time(emb, quality, ratio, max_n, seed) -> tuple[float, bool]:
    """(seconds, measured): measured when N <= max_n, else the first max_n items (whole batches) scaled by N / max_n."""
    n = len(emb)
    m = n if n <= max_n else max(1024, (max_n // 1024) * 1024)
    _, t = timed_select("greedy", emb[:m], quality[:m], int(round(ratio * m)), seed, **DISF, impl="reference")
    return t * n / m, m == n


def to_target(emb, quality, budget, target, args, batch_ratio) -> dict:
    """DataMask (top-S final, one block) until its top-S reaches ``target``: when (``time_s``, nan if never),
    and where the run ends."""
    sel, _ = timed_select("datamask", emb, quality, budget, args.seed, **DISF, steps=args.max_steps,
                          batch_ratio=batch_ratio, group_size=args.group_size, lr=args.lr,
                          history_every=args.history_every, final="topk", block_size=max(len(emb), 2))
    h = sel.history
    hit = h[h["diversity"] >= target]
    return {"time_s": float(hit["wall_time_s"].iloc[0]) if len(hit) else float("nan"), "measured": len(hit) > 0,
            "value": float(h["diversity"].iloc[-1]), "steps_to_target": int(hit["step"].iloc[0]) if len(hit) else -1,
            "steps_run": int(h["step"].iloc[-1]), "total_time_s": float(h["wall_time_s"].iloc[-1])}


def step_vs_pass(emb, quality, budget, args, batch_ratio) -> dict:
    """Mean DataMask step time and the time of (G x N_b mask) @ (N_b x d) for the same step size."""
    stamps = []
    cfg = {**DISF, "steps": args.timing_steps, "batch_ratio": batch_ratio, "group_size": args.group_size,
           "history_every": 10**9, "block_size": max(len(emb), 2)}
    select("datamask", quality=quality, embeddings=emb, budget=budget, config=cfg, seed=args.seed,
           progress=lambda done, total: stamps.append(time.perf_counter()))
    # the last step also records a history row: leave it out
    step_s = float(np.median(np.diff(stamps[:-1]))) if len(stamps) > 2 else float("nan")
    n_b = len(emb) if batch_ratio >= 1 else max(2, round(batch_ratio * len(emb)))
    s_b = max(1, round(budget * n_b / len(emb)))
    z = torch.as_tensor(emb[:n_b], dtype=torch.float32)
    masks = torch.zeros(args.group_size, n_b)
    masks[:, :s_b] = 1.0
    masks = masks[:, torch.randperm(n_b)]
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        masks @ z
        best = min(best, time.perf_counter() - t0)
    return {"step_time_s": step_s, "pass_time_s": best, "step_over_pass": step_s / best, "batch_items": n_b,
            "batch_budget": s_b}


def main() -> None:
    args = parse(__doc__, sizes=("2000,5000", "comma-separated N"), d=(128, "embedding dimension"),
                 ratio=(0.1, "keep ratio S/N (paper: 10%%)"), batch_ratios=("0.2,1.0", "DataMask batch_ratio values"),
                 max_steps=600, history_every=10, group_size=128, lr=10.0, timing_steps=12, reference_max_n=2048,
                 seed=0)
    batch_ratios = [float(r) for r in args.batch_ratios.split(",")]
    data_label = f"synthetic clustered unit vectors, 50 clusters, 10% near-duplicates, seed {args.seed}"
    rows = []
    for n in map(int, args.sizes.split(",")):
        emb, quality, _ = clustered_unit_vectors(n, args.d, n_clusters=50, duplicate_fraction=0.1, seed=args.seed)
        budget = int(round(args.ratio * n))
        greedy, t_fast = timed_select("greedy", emb, quality, budget, args.seed, **DISF, impl="fast")
        target = disf(emb, quality, greedy.indices)
        t_ref, ref_measured = reference_time(emb, quality, args.ratio, args.reference_max_n, args.seed)
        print(f"N={n}: greedy fast {t_fast:.2f}s, reference {t_ref:.1f}s"
              f"{'' if ref_measured else ' (extrapolated)'}, target DiSF {target:.5f}", flush=True)
        base = {"n": n, "d": args.d, "budget": budget, "threads": args.threads, "data": data_label}
        rows.append({**base, "kind": "greedy_fast", "time_s": t_fast, "value": target, "measured": True})
        rows.append({**base, "kind": "greedy_reference", "time_s": t_ref, "value": target, "measured": ref_measured})
        for r in batch_ratios:
            rows.append({**base, "kind": f"datamask_r{r}", **to_target(emb, quality, budget, target, args, r),
                         "batch_ratio": r, "group_size": args.group_size, "lr": args.lr,
                         **step_vs_pass(emb, quality, budget, args, r)})
            print(" ", rows[-1], flush=True)
    first = ["kind", "n", "d", "budget", "time_s", "measured", "value"]

    def plot(rows: list[dict], png: Path) -> None:
        with bench.figure(png, 1, 2, figsize=(10, 4), dpi=120) as (fig, (ax1, ax2)):
            for kind in dict.fromkeys(r["kind"] for r in rows):
                pts = [(r["n"], r["time_s"]) for r in rows if r["kind"] == kind and np.isfinite(r["time_s"])]
                if pts:
                    ax1.plot(*zip(*pts), marker="o", label=kind)
            ax1.set(xscale="log", yscale="log", xlabel="N (items)", ylabel="time to greedy-DiSF value (s)")
            ax1.set_title(f"Fig. 4 analogue, keep {args.ratio:.0%}, d={args.d} (synthetic)", fontsize=9)
            ax1.legend(fontsize=7)
            for r in batch_ratios:
                pts = [(row["n"], row["step_over_pass"]) for row in rows if row.get("batch_ratio") == r]
                ax2.plot(*zip(*pts), marker="s", label=f"batch_ratio={r}")
            ax2.set(xscale="log", yscale="log", xlabel="N (items)", ylabel="DataMask step / (G x N_b mask @ N_b x d)")
            ax2.set_title(f"Step time vs one streaming pass, G={args.group_size}", fontsize=9)
            ax2.legend(fontsize=7)

    metrics = {f"{r['kind']}_n{r['n']}_{k}": r[k] for r in rows
               for k in ("time_s", "value", "step_over_pass") if k in r and r[k] is not None}
    write_result(args, "datamask_time_to_greedy", rows, metrics=metrics, plot=plot,
                 columns=first + sorted({k for row in rows for k in row} - set(first)),
                 tags={"artefact": "fig4_selection_time", "data": data_label})

if __name__ == "__main__":
    main()
