"""Facility location: how many reference points does a selection need? (issue #26)

DATAMASK's Eq. 4 sums over every item of D; the project's ``fl`` term is the max-coverage form over
``fl_reference_size`` random reference points of the block (``Objective.reference``), a departure that keeps a
step at one (N x R) table gather. This measures what the reference-set size R costs the *selection*: DataMask
on the FL term alone (lam 0, 10% kept, the default knobs otherwise) is run with several R, and every selection
is judged by FL over the whole block (or, where that is too large, over a large independent random sample of
the block, named in ``judged_on``). The figure of merit is the share of the FL gain over random

    share(R) = (FL(sel_R) - FL(random)) / (FL(sel_whole) - FL(random))

where sel_whole is the selection optimised on the whole block (R = N: exact Eq. 4 coverage) where that is
affordable, and otherwise the selection with the largest R run (named in ``against``).

Cases: ``corpus``: 6,000 random candidates of the bundled corpus's pruned pool (real static 256-d embeddings),
exact; ``synthetic``: N = 100k clustered unit vectors (d = 384, ``curation.selection.synthetic``), judged over
8,192 random points (an independent sample), against R = 8,192 (the int8 table of 100k x 8,192 is 0.8 GiB). 1M items is not run here
(2 shared cores): one FL step at R = 1,024 reads a 1 GiB int8 table.

    nice -n 10 .venv/bin/python benchmarks/selection/bench_fl_reference.py

Writes benchmarks/results/fl_reference.csv and .png (the committed results: fl_reference_6k.csv and
fl_reference_100k.csv, one --cases each, drawn together in fl_reference.png). One torch thread.
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
from curation.selection.synthetic import clustered_unit_vectors  # noqa: E402

from bench_datamask_paper_vs_default import facility_location, load_pool, loadavg  # noqa: E402

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


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
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default="corpus,synthetic")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--synthetic-steps", type=int, default=1000)
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--out", default=str(RESULTS / "fl_reference.csv"))
    args = ap.parse_args()
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
    out = Path(args.out)
    with out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    fig, ax = plt.subplots(figsize=(6, 4))
    for case in dict.fromkeys(r["case"] for r in rows):
        for seed in dict.fromkeys(r["seed"] for r in rows if r["case"] == case):
            pts = [(r["reference_size"], r["share_of_gain"]) for r in rows if r["case"] == case and r["seed"] == seed]
            ax.plot(*zip(*pts), marker="o", label=f"{case} N={rows[[r['case'] for r in rows].index(case)]['n']:,} seed {seed}")
    ax.axhline(0.95, color="grey", ls="--", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("fl_reference_size R")
    ax.set_ylabel("share of the FL gain over random")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=120)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
