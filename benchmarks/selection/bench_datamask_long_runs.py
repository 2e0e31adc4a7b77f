"""DataMask on long runs: does the returned mask keep what the logits learned? (issue #20)

N = 100k clustered unit vectors (the PWS problem of ``bench_datamask_pws_scale.py``), d = 384, 10% kept, PWS
only, the config's default knobs. Per step count, the share of the random -> greedy gap closed by the best
recorded top-S and by the *returned* mask, with ``sampler=exact`` (the project's ``gumbel_top_k``) and
``sampler=capped`` (the sampler before issue #20, capped at e^80: kept here only to measure the bug).
Writes benchmarks/results/datamask_long_runs.csv and .png.

    # the default knobs at 100k (50 clusters; greedy value measured by bench_datamask_pws_scale.py)
    .venv/bin/python benchmarks/selection/bench_datamask_long_runs.py --f-greedy -0.207986518740654
    # a case where the logits spread past 80 nats (the old cap binds): 20k items, 10 clusters, lr 30;
    # no greedy value: the gap is measured against the best top-S of the exact sampler's run
    .venv/bin/python benchmarks/selection/bench_datamask_long_runs.py --n 20000 --clusters 10 --lr 30 --append
"""

from __future__ import annotations

from pathlib import Path

import torch

from curation.selection import datamask

from _datamask import bench, gap, parse, pws_problem, run, write_result

EXACT = datamask.gumbel_top_k


def capped_gumbel_top_k(logits: torch.Tensor, k: int, g: int, generator: torch.Generator) -> torch.Tensor:
    """The pre-#20 sampler's arithmetic: race weights e^{L_max - L} capped at e^80 (the bug)."""
    lg = logits.float()
    inv_w = torch.exp((lg.max() - lg).clamp_max(80.0))
    u = torch.rand((g, lg.shape[0]), dtype=torch.float32, device=lg.device, generator=generator)
    keys = u.clamp_min_(torch.finfo(torch.float32).tiny).log_().mul_(inv_w)
    return torch.topk(keys, k, dim=1, sorted=True).indices


def long_run(emb: torch.Tensor, q: torch.Tensor, budget: int, steps: int, sampler: str, lr: float) -> dict:
    datamask.gumbel_top_k = EXACT if sampler == "exact" else capped_gumbel_top_k
    try:
        res, wall, _ = run(emb, q, budget, diversity="pws", steps=steps, history_every=max(1, steps // 20), lr=lr)
    finally:
        datamask.gumbel_top_k = EXACT
    h = res.history
    topk = h[h["mask"] == "topk"]
    return {"best_topk_pws": float(topk["diversity"].max()), "last_topk_pws": float(topk["diversity"].iloc[-1]),
            "returned_pws": float(h["diversity"].iloc[-1]), "final_entropy": res.info["final_entropy"],
            "logit_min": res.info["logit_min"], "logit_max": res.info["logit_max"], "wall_s": wall,
            "min_entropy": float(topk["entropy"].min())}


def main() -> None:
    f_greedy = {"type": float, "default": None,
                "help": "greedy PWS on the same problem (bench_datamask_pws_scale.py measures it: ~11 min at 100k); "
                        "without it the target is the best top-S of the exact sampler's runs"}
    args = parse(__doc__, n=100_000, d=384, keep=0.1, steps=[1000, 2000, 6000], samplers=["exact", "capped"],
                 clusters=50, lr=10.0, f_greedy=f_greedy, append=(False, "add the rows to an existing CSV"),
                 mlflow=False)
    emb, q, _, budget, f_random = pws_problem(args.n, args.d, args.keep, args.clusters)
    rows = []
    for sampler in args.samplers:
        for steps in args.steps:
            load = bench.loadavg3()
            r = long_run(emb, q, budget, steps, sampler, args.lr)
            rows.append({"sampler": sampler, "steps": steps, "n": args.n, "d": args.d, "clusters": args.clusters,
                         "lr": args.lr, "budget": budget, "f_random": f_random, **r, "loadavg": load,
                         "threads": args.threads})
            print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in rows[-1].items()}, flush=True)
    target = args.f_greedy
    if target is None:
        target = max(r["best_topk_pws"] for r in rows if r["sampler"] == "exact")
    for r in rows:
        r["gap_target"] = "greedy" if args.f_greedy is not None else "best top-S of the exact runs"
        r["f_target"] = target
        r["best_topk_gap"] = gap(r["best_topk_pws"], f_random, target)
        r["returned_gap"] = gap(r["returned_pws"], f_random, target)

    def plot(all_rows: list[dict], png: Path) -> None:
        with bench.figure(png, figsize=(6, 3.8), dpi=120) as (fig, ax):
            for case in dict.fromkeys((r["n"], r["clusters"], r["lr"]) for r in all_rows):
                for sampler, style in (("exact", "-o"), ("capped", "--x")):
                    sub = [r for r in all_rows if (r["n"], r["clusters"], r["lr"], r["sampler"]) == (*case, sampler)]
                    if sub:
                        ax.plot([r["steps"] for r in sub], [r["returned_gap"] for r in sub], style,
                                label=f"N={case[0]}, {case[1]} clusters, lr {case[2]}: returned, {sampler}")
            ax.axhline(0.95, color="tab:red", lw=0.8, ls=":", label="95% of the gap")
            ax.set_xlabel("steps")
            ax.set_ylabel("share of random -> target PWS gap\n(returned mask)")
            ax.set_title(f"DataMask long runs, d={args.d}, {args.keep:.0%} kept, G 128, r 0.05 (target: greedy at "
                         f"100k,\nbest exact top-S at 20k); load {rows[0]['loadavg']}", fontsize=8)
            ax.legend(fontsize=7)

    write_result(args, "datamask_long_runs", rows, plot=plot, append=args.append)
    print("load now", bench.loadavg3())

if __name__ == "__main__":
    main()
