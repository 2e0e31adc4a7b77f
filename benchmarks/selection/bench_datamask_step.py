"""DataMask step time over the matmul floor, for PWS, facility location and DiSF (issue 13, benchmark b).

The floor is one (G x N_b) @ (N_b x d) float32 matmul timed in the same process; a step is
(time of 3 + K steps - time of 3 steps) / K of whole ``run_block`` calls (set-up and final sample excluded).
Wall and CPU times (the CPU ratio is the steadier on a shared machine). Synthetic clustered unit vectors.
Writes benchmarks/results/datamask_step.csv and .png and logs them to MLflow.

    .venv/bin/python benchmarks/selection/bench_datamask_step.py   # N = 100k, d = 384, G = 128, r = 0.05, 10%
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from _datamask import bench, parse, problem, run, write_result


def floor_ms(g: int, n_b: int, d: int, repeats: int = 20) -> tuple[float, float]:
    """(wall, CPU) milliseconds of one (g x n_b) @ (n_b x d) float32 matmul, mean of `repeats`."""
    a, b = torch.rand(g, n_b), torch.rand(n_b, d)
    a @ b
    t, c = time.perf_counter(), time.process_time()
    for _ in range(repeats):
        a @ b
    return (time.perf_counter() - t) / repeats * 1e3, (time.process_time() - c) / repeats * 1e3


def main() -> None:
    steps = ("pws:20,fl@float32:10,fl@int16:20,fl@int8:20,disf:3,disf_hutchinson:10",
             "diversity:K timed steps (disf_hutchinson = disf with disf_estimator=hutchinson; "
             "fl@<dtype> = fl with fl_sims_dtype=<dtype>)")
    args = parse(__doc__, n=100_000, d=384, group_size=128, batch_ratio=0.05, keep=0.1, steps=steps,
                 probes=(8, "disf_probes of disf_hutchinson"))
    emb, q = problem(args.n, args.d)
    budget = int(args.keep * args.n)
    n_b = round(args.batch_ratio * args.n)
    rows = []
    for spec in args.steps.split(","):
        name, k = spec.split(":")
        k = int(k)
        diversity, _, dtype = name.partition("@")
        extra = {"fl_sims_dtype": dtype} if dtype else {}
        if name == "disf_hutchinson":
            diversity, extra = "disf", {"disf_estimator": "hutchinson", "disf_probes": args.probes}
        load0 = bench.loadavg3()
        cfg = dict(diversity=diversity, group_size=args.group_size, batch_ratio=args.batch_ratio, history_every=10**9)
        (_, wall0, cpu0), (_, wall1, cpu1) = (run(emb, q, budget, steps=s, **cfg, **extra) for s in (3, 3 + k))
        step_ms, step_cpu_ms = (wall1 - wall0) / k * 1e3, (cpu1 - cpu0) / k * 1e3
        fl, fl_cpu = floor_ms(args.group_size, n_b, args.d)
        rows.append({"diversity": name, "n": args.n, "d": args.d, "group_size": args.group_size, "batch_items": n_b,
                     "mask_items": round(budget * n_b / args.n), "timed_steps": k, "step_ms": round(step_ms, 2),
                     "floor_matmul_ms": round(fl, 2), "step_over_floor": round(step_ms / fl, 2),
                     "step_cpu_ms": round(step_cpu_ms, 2), "floor_cpu_ms": round(fl_cpu, 2),
                     "cpu_step_over_floor": round(step_cpu_ms / fl_cpu, 2),
                     "threads": args.threads, "loadavg_before": load0, "loadavg_after": bench.loadavg3()})
        print(rows[-1], flush=True)
    pws = next((r for r in rows if r["diversity"] == "pws"), {})
    for r in rows:
        for ratio, col in (("step_over_pws_step", "step_ms"), ("cpu_step_over_pws_step", "step_cpu_ms")):
            r[ratio] = round(r[col] / pws[col], 2) if pws.get(col) else None
    metrics = {f"{r['diversity'].replace('@', '_')}_{k}": r[k] for r in rows
               for k in ("step_ms", "step_over_floor", "step_over_pws_step", "step_cpu_ms", "cpu_step_over_floor")
               if r[k] is not None}
    write_result(args, "datamask_step", rows, metrics=metrics, log_as="datamask_step_over_floor",
                 plot=lambda rows, png: plot(rows, png, args))


def plot(rows: list[dict], png: Path, args) -> None:
    with bench.figure(png, figsize=(6.5, 3.6), dpi=120) as (fig, ax):
        x = np.arange(len(rows))
        ax.bar(x - 0.2, [r["step_over_floor"] for r in rows], 0.4, color="tab:blue", label="wall time")
        ax.bar(x + 0.2, [r["cpu_step_over_floor"] for r in rows], 0.4, color="tab:cyan", label="CPU time")
        ax.set_xticks(x, [r["diversity"] for r in rows], fontsize=8)
        ax.axhline(2.0, color="tab:red", ls="--", label="goal: 2x floor")
        ax.set_yscale("log")
        ax.set_ylabel("step time / (G x N_b) @ (N_b x d) matmul")
        ax.set_title(f"DataMask step, N={args.n}, d={args.d}, G={args.group_size}, r={args.batch_ratio}, "
                     f"{args.keep:.0%} kept\nload {rows[0]['loadavg_before']}", fontsize=8)
        ax.legend(fontsize=8)

if __name__ == "__main__":
    main()
