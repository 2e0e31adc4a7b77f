"""What limits DataMask's PWS convergence at N = 100k, d = 384, 10% kept (issue 13, benchmark c): a settings sweep.

Every row is one DataMask run (lam = 0, PWS, final: sample) with one setting of batch ratio r, learning rate
eta, group size G and steps E, on the problem of ``bench_datamask_pws_scale.py``: the share of the random ->
greedy gap closed by the top-S at 5/10/20/30 s and at the end, and by the returned mask (``--f-greedy``: the
greedy value, measured by bench_datamask_pws_scale.py). Writes benchmarks/results/datamask_pws_sweep.csv.

    .venv/bin/python benchmarks/selection/bench_datamask_pws_sweep.py
"""

from __future__ import annotations

import json

import numpy as np

from _datamask import bench, gap, parse, pws_problem, run, write_result

# greedy PWS (impl=fast, exact) of this data, from benchmarks/results/datamask_pws_100000.csv
F_GREEDY_100K = -0.207986518740654

DEFAULT_SWEEP = [
    # the previous default of the benchmark (paper's r = 0.05 for 1M blocks, eta = 10, G = 128)
    {"batch_ratio": 0.05, "lr": 10.0, "group_size": 128, "steps": 400},
    {"batch_ratio": 0.02, "lr": 10.0, "group_size": 128, "steps": 1500},
    {"batch_ratio": 0.01, "lr": 10.0, "group_size": 128, "steps": 3000},
    {"batch_ratio": 0.005, "lr": 10.0, "group_size": 128, "steps": 12000},
    {"batch_ratio": 0.005, "lr": 20.0, "group_size": 128, "steps": 12000},
    {"batch_ratio": 0.005, "lr": 5.0, "group_size": 128, "steps": 12000},
    {"batch_ratio": 0.005, "lr": 10.0, "group_size": 256, "steps": 7000},
    {"batch_ratio": 0.002, "lr": 10.0, "group_size": 128, "steps": 25000},
]


def main() -> None:
    args = parse(__doc__, n=100_000, d=384, keep=0.1, f_greedy=F_GREEDY_100K,
                 sweep=(None, "JSON list of settings (default: the built-in sweep)"))
    emb, q, _, budget, f_random = pws_problem(args.n, args.d, args.keep)
    rows = []
    for setting in json.loads(args.sweep) if args.sweep else DEFAULT_SWEEP:
        steps = int(setting["steps"])
        load0 = bench.loadavg3()
        res, total, _ = run(emb, q, budget, diversity="pws", **{"history_every": max(1, steps // 60), **setting})
        h = res.history
        topk = h[h["mask"] == "topk"]
        shares = gap(topk["diversity"].to_numpy(), f_random, args.f_greedy)
        wall = topk["wall_time_s"].to_numpy()
        row = {**{k: setting[k] for k in ("batch_ratio", "lr", "group_size", "steps")},
               "batch_items": res.info["batch_items"], "batch_budget": res.info["batch_budget"],
               "step_ms": round(1e3 * total / steps, 2), "total_s": round(total, 2)}
        for s in (5, 10, 20, 30):
            row[f"gap_topk_at_{s}s"] = round(float(shares[wall <= s].max()), 4) if (wall <= s).any() else None
        row["gap_topk_end"] = round(float(shares[-1]), 4)
        row["gap_topk_best"] = round(float(shares.max()), 4)
        row["gap_returned"] = round(float(gap(h["diversity"].iloc[-1], f_random, args.f_greedy)), 4)
        hit = np.nonzero(shares >= 0.99)[0]
        row["time_to_99pct_s"] = round(float(wall[hit[0]]), 2) if len(hit) else None
        row["loadavg_before"], row["loadavg_after"] = load0, bench.loadavg3()
        rows.append(row)
        print(row, flush=True)
    best = max(rows, key=lambda r: r["gap_topk_at_30s"] or 0.0)
    metrics = {"best_gap_topk_at_30s": best["gap_topk_at_30s"] or float("nan")}
    write_result(args, "datamask_pws_sweep", rows, metrics=metrics,
                 comment=f"n={args.n}; d={args.d}; budget={budget}; f_random={f_random}; f_greedy={args.f_greedy}; "
                         f"threads={args.threads}; data=synthetic clustered unit vectors (seed 0)")

if __name__ == "__main__":
    main()
