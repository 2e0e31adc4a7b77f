"""Greedy DiSF (DiSF Algorithm 1, b = 1024, 16 picks per batch): official vs fast, real embeddings.

``official`` is the DiSF code's algorithm (hunger_select / cal_corre: every
candidate set re-standardised, a d x d correlation matrix per candidate);
``fast`` scores all candidates of a pick with one closed-form batched product.
Both start from the same random first pick and must pick identical items; the
CSV gives the time ratio at d = 384 (MiniLM of the bundled corpus) and d = 768
(two real MiniLM views of each document concatenated: no 768-d model is
offline), the DiSF value and the DiSF dominance score (top-10 eigenvalue share,
Sec. 2.3) of the official, fast and a uniformly random selection of the same
size. Writes benchmarks/results/disf_greedy.csv and .png and logs them to MLflow.

    .venv/bin/python benchmarks/selection/bench_disf_greedy.py            # 3 batches of 1,024, d = 384 and 768
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_embeddings import real_embeddings  # noqa: E402

from curation.selection import select  # noqa: E402
from curation.selection.diagnostics import dominance_scores  # noqa: E402
from curation.selection.objectives import disf  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "results"


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=3, help="DiSF batches of b items")
    parser.add_argument("--batch-size", type=int, default=1024, help="b of DiSF Algorithm 1")
    parser.add_argument("--picks", type=int, default=16, help="picks per batch (official default 16 of 1024)")
    parser.add_argument("--dims", default="384,768")
    parser.add_argument("--batches-768", type=int, default=1,
                        help="batches at d=768 (the official run takes ~4x longer per batch than at 384)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1: on a shared, loaded 2-core machine 2 threads ran 10x slower)")
    parser.add_argument("--fast-repeats", type=int, default=9, help="timed runs of fast (median reported)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--no-mlflow", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for dim in map(int, args.dims.split(",")):
        batches = args.batches_768 if dim == 768 else args.batches
        n, budget = batches * args.batch_size, batches * args.picks
        emb = real_embeddings(n, dim)
        q = np.zeros(n)
        data = "MiniLM (all-MiniLM-L6-v2) of the bundled corpus, first 1,500 chars" + (
            "" if dim == 384 else " + last 1,500 chars, concatenated (two real views; no 768-d model offline)")
        res = {}
        for impl in ("fast", "official"):
            cfg = {"diversity": "disf", "lam": 0.0, "impl": impl, "batch_size": args.batch_size}
            # warm-up on a small problem: the process's first call pays one-time library set-up
            select("greedy", quality=q[:64], embeddings=emb[:64], budget=3, config={**cfg, "batch_size": 64}, seed=1)
            load0 = loadavg()
            times, cpu = [], []
            for _ in range(args.fast_repeats if impl == "fast" else 1):
                t0, c0 = time.perf_counter(), time.process_time()
                sel = select("greedy", quality=q, embeddings=emb, budget=budget, config=cfg, seed=args.seed)
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
            # fast: median of repeats (it runs in well under a second, so one run is at the mercy of
            # the other helpers' load); official: one run (seconds to minutes). CPU time (process_time)
            # is reported too: on the shared machine it is less sensitive to the other jobs than wall time.
            res[impl] = (float(np.median(times)), sel, load0, loadavg(), float(np.median(cpu)))
            print(f"d={dim} {impl:9s} {res[impl][0]:9.4f} s wall, {res[impl][4]:9.4f} s cpu "
                  f"(runs: {', '.join(f'{t:.3f}' for t in times)})  load {load0} -> {res[impl][3]}", flush=True)
        identical = bool(np.array_equal(res["fast"][1].indices, res["official"][1].indices))
        ratio = res["official"][0] / res["fast"][0]
        cpu_ratio = res["official"][4] / res["fast"][4]
        print(f"d={dim}: identical picks {identical}; official / fast = {ratio:.0f}x wall, {cpu_ratio:.0f}x cpu",
              flush=True)
        rng = np.random.default_rng(args.seed)
        rand = [np.sort(np.concatenate([b * args.batch_size + rng.choice(args.batch_size, args.picks, replace=False)
                                        for b in range(batches)])) for _ in range(20)]
        sets = {"fast": res["fast"][1].indices, "official": res["official"][1].indices}
        for name, idx in sets.items():
            t, sel, l0, l1, c = res[name]
            rows.append({"d": dim, "selection": name, "n": n, "budget": budget, "batch_size": args.batch_size,
                         "wall_time_s": round(t, 4), "cpu_time_s": round(c, 4), "identical_picks": identical,
                         "speed_ratio_official_over_fast": round(ratio, 1),
                         "cpu_ratio_official_over_fast": round(cpu_ratio, 1),
                         "disf_value": disf(emb, q, idx), "dominance_top10": dominance_scores(emb[idx], (10,))[10],
                         "threads": args.threads, "loadavg_before": l0, "loadavg_after": l1, "data": data})
        rows.append({"d": dim, "selection": "random (mean of 20)", "n": n, "budget": budget,
                     "batch_size": args.batch_size, "wall_time_s": None, "cpu_time_s": None,
                     "identical_picks": None, "speed_ratio_official_over_fast": None,
                     "cpu_ratio_official_over_fast": None,
                     "disf_value": float(np.mean([disf(emb, q, r) for r in rand])),
                     "dominance_top10": float(np.mean([dominance_scores(emb[r], (10,))[10] for r in rand])),
                     "threads": args.threads, "loadavg_before": None, "loadavg_after": None, "data": data})
    args.out.mkdir(parents=True, exist_ok=True)
    csv_path, png_path = args.out / "disf_greedy.csv", args.out / "disf_greedy.png"
    with open(csv_path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    for r in rows:
        print(r)

    dims = sorted({r["d"] for r in rows})
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    x = np.arange(len(dims))
    for k, impl in enumerate(("fast", "official")):
        t = [next(r["wall_time_s"] for r in rows if r["d"] == d and r["selection"] == impl) for d in dims]
        axes[0].bar(x + 0.4 * k, t, 0.4, label=impl)
    axes[0].set_xticks(x + 0.2, [f"d={d}" for d in dims])
    axes[0].set_yscale("log")
    axes[0].set_ylabel("wall time (s)")
    ratios = [next(r["speed_ratio_official_over_fast"] for r in rows if r["d"] == d and r["selection"] == "fast") for d in dims]
    cpu_ratios = [next(r["cpu_ratio_official_over_fast"] for r in rows if r["d"] == d and r["selection"] == "fast")
                  for d in dims]
    axes[0].set_title(f"{args.picks} of each {args.batch_size}: official/fast = "
                      + ", ".join(f"{r:.0f}x" for r in ratios) + " wall, "
                      + ", ".join(f"{r:.0f}x" for r in cpu_ratios) + " cpu", fontsize=9)
    axes[0].legend(fontsize=8)
    for k, name in enumerate(("official", "fast", "random (mean of 20)")):
        v = [next(r["dominance_top10"] for r in rows if r["d"] == d and r["selection"] == name) for d in dims]
        axes[1].bar(x + 0.27 * k, v, 0.27, label=name)
    axes[1].set_xticks(x + 0.27, [f"d={d}" for d in dims])
    axes[1].set_ylabel("dominance score, top-10 eigenvalue share")
    axes[1].set_title("DiSF Sec. 2.3 (lower = less collapse)", fontsize=9)
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
    print(f"wrote {csv_path} and .png")
    if not args.no_mlflow:
        from curation.tracking.benchmarks import log_benchmark

        metrics = {f"d{r['d']}_{r['selection'].split(' ')[0]}_{k}": r[k] for r in rows
                   for k in ("wall_time_s", "cpu_time_s", "disf_value", "dominance_top10",
                             "speed_ratio_official_over_fast", "cpu_ratio_official_over_fast")
                   if r[k] is not None}
        log_benchmark("disf_greedy_official_vs_fast", files=[csv_path, png_path],
                      params={**vars(args), "out": str(args.out)}, metrics=metrics,
                      tags={"paper": "DiSF", "artefact": "fig4_selection_time", "data": "MiniLM, bundled corpus"})


if __name__ == "__main__":
    main()
