"""Facility location: how many reference points does a selection need? (issue #26)

DataMask on the FL term alone (lam 0, 10% kept) with several reference-set sizes R (``fl_reference_size``),
each selection judged by FL over the whole block (or a large independent sample, ``judged_on``): the share of
the FL gain over random, (FL(sel_R) - FL(random)) / (FL(sel_whole) - FL(random)). Cases: ``corpus`` (6,000
candidates of the pruned pool, exact) and ``synthetic`` (100k clustered unit vectors, against R = 8,192).

    nice -n 10 .venv/bin/python benchmarks/selection/bench_fl_reference.py

Writes benchmarks/results/fl_reference.csv and .png (committed: fl_reference_6k.csv, fl_reference_100k.csv).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from curation.selection import select
from curation.selection.synthetic import clustered_unit_vectors

from bench_datamask_paper_vs_default import bench, facility_location, load_pool, loadavg


def run_case(case, emb, judge_refs, sizes, whole, steps, seeds, budget, rows):
    unit = (emb / np.linalg.norm(emb, axis=1, keepdims=True)).astype(np.float32)
    n = len(emb)
    rand_fl = np.mean([facility_location(unit, np.random.default_rng([s, 11]).choice(n, budget, replace=False),
                                         judge_refs) for s in range(3)])
    judged = "all" if len(judge_refs) == n else f"{len(judge_refs)} random"
    for seed in seeds:
        fl = {}
        walls = {}
        for r in sizes:
            cfg = {"diversity": "fl", "lam": 0.0, "steps": steps, "fl_reference_size": int(r),
                   "fl_sims_dtype": "auto", "history_every": 100}
            t0 = time.perf_counter()
            sel = select("datamask", quality=np.zeros(n), embeddings=emb, budget=budget, config=cfg, seed=seed)
            walls[r] = time.perf_counter() - t0
            fl[r] = facility_location(unit, np.sort(sel.indices), judge_refs)
            print(f"[{case}] seed {seed} R={r}: FL {fl[r]:.5f} (random {rand_fl:.5f}) in {walls[r]:.1f} s, "
                  f"load {loadavg()}", flush=True)
        for r in sizes:
            share = (fl[r] - rand_fl) / (fl[whole] - rand_fl)
            rows.append({"case": case, "n": n, "d": emb.shape[1], "budget": budget, "steps": steps, "seed": seed,
                         "reference_size": r, "fl_judged": fl[r], "fl_random": rand_fl, "share_of_gain": share,
                         "judged_on": judged, "against": "whole block (R = N)" if whole >= n else f"R = {whole}",
                         "wall_s": walls[r], "load": loadavg()})
            print(rows[-1], flush=True)


def main() -> None:
    args = bench.parser(__doc__, cases="corpus,synthetic", steps=2000, synthetic_steps=1000, seeds="0,1",
                        out=bench.RESULTS / "fl_reference.csv").parse_args()
    torch.set_num_threads(1)
    seeds = [int(s) for s in args.seeds.split(",")]
    rows: list[dict] = []
    if "corpus" in args.cases:
        emb, _, _ = load_pool()
        pick = np.sort(np.random.default_rng(6000).choice(len(emb), 6000, replace=False))
        emb = emb[pick]
        run_case("corpus", emb, np.arange(len(emb)), [256, 1024, 2048, 4096, 6000], 6000, args.steps, seeds,
                 600, rows)
    if "synthetic" in args.cases:
        x, _, _ = clustered_unit_vectors(100_000, 384, n_clusters=50, seed=0)
        judge = np.sort(np.random.default_rng(99).choice(len(x), 8192, replace=False))
        run_case("synthetic", x, judge, [1024, 4096, 8192], 8192, args.synthetic_steps, seeds[:1], 10_000, rows)
    bench.write_result(rows, args.out, plot=plot, columns=list(rows[0]))


def plot(rows: list[dict], png: Path) -> None:
    with bench.figure(png, figsize=(6, 4), dpi=120) as (fig, ax):
        for case in dict.fromkeys(r["case"] for r in rows):
            n = rows[[r["case"] for r in rows].index(case)]["n"]
            for seed in dict.fromkeys(r["seed"] for r in rows if r["case"] == case):
                pts = [(r["reference_size"], r["share_of_gain"]) for r in rows if r["case"] == case and r["seed"] == seed]
                ax.plot(*zip(*pts), marker="o", label=f"{case} N={n:,} seed {seed}")
        ax.axhline(0.95, color="grey", ls="--", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("fl_reference_size R")
        ax.set_ylabel("share of the FL gain over random")
        ax.legend(fontsize=7)

if __name__ == "__main__":
    main()
