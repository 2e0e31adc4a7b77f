"""DATAMASK ablations on the bundled corpus's real embeddings and quality scores.

One script, five studies (each writes benchmarks/results/datamask_ablation_<study>.csv
and .png and one MLflow run in the ``benchmarks`` experiment):

``g``       Fig. 7: facility-location value against wall time for G in {2, 8, 32, 128, 256}.
``batch``   Fig. 9: converged joint objective and time for batch ratio r in {0.01, ..., 1.0}.
``lr``      Fig. 14 / App. A.6.1: DiSF value trajectory for eta in {0.001, ..., 1000}.
``table1``  Table 1: no pruning vs quality-aware pruning (quality >= 4) vs pruning + quality
            initialisation (Eq. 13): time to converge and the selection's quality and PWS.
``dvrl``    Table 8: PWS before optimisation (random sets), after DVRL on its seen and unseen
            halves, after DataMask; time to converge.

Data: the default job's MiniLM `embeddings` and `scores`, a seeded subsample of --n documents. "Converged" =
the first history row reaching 98% of the run's improvement of the tracked value (first row -> best row).

    .venv/bin/python benchmarks/selection/bench_datamask_ablations.py                # all studies
    .venv/bin/python benchmarks/selection/bench_datamask_ablations.py --only g,lr --n 5000
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from curation.selection import select
from curation.selection.objectives import pairwise_similarity, quality_mean

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402
from _driver import ROOT  # noqa: E402

SCORES = ROOT / "data" / "04_feature" / "default" / "scores.parquet"
EMBEDDINGS = ROOT / "data" / "04_feature" / "default" / "embeddings.npy"
STUDIES = ("g", "batch", "lr", "table1", "dvrl")


def load_corpus(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, str]:
    if not SCORES.exists() or not EMBEDDINGS.exists():
        raise SystemExit(f"missing {SCORES} / {EMBEDDINGS}: run `curate pipeline=ingest+scoring` first")
    quality = pd.read_parquet(SCORES, columns=["quality"])["quality"].to_numpy(np.float32)
    emb = np.load(EMBEDDINGS)
    if len(emb) != len(quality):
        raise SystemExit(f"{EMBEDDINGS} has {len(emb)} rows but {SCORES} has {len(quality)}")
    idx = np.sort(np.random.default_rng(seed).permutation(len(emb))[: min(n, len(emb))])
    label = f"bundled corpus, MiniLM {emb.shape[1]}-d, {len(idx)} of {len(emb)} documents (seed {seed})"
    return np.ascontiguousarray(emb[idx], dtype=np.float32), quality[idx], label


def converged(history: pd.DataFrame, column: str, frac: float = 0.98) -> tuple[float, int, float]:
    """(time, step, value) of the first row reaching `frac` of the improvement first row -> best row."""
    values = history[column].to_numpy()
    start, best = values[0], np.nanmax(values)
    target = start + frac * (best - start)
    row = history.iloc[int(np.argmax(values >= target))]
    return float(row["wall_time_s"]), int(row["step"]), float(row[column])


def run_datamask(emb, quality, budget, seed, **config) -> tuple[pd.DataFrame, np.ndarray, float]:
    cfg = {"block_size": len(emb) + 1, "final": "topk", **config}
    t0 = time.perf_counter()
    sel = select("datamask", quality=quality, embeddings=emb, budget=budget, config=cfg, seed=seed)
    return sel.history, sel.indices, time.perf_counter() - t0


def study_g(emb, quality, args):
    rows, curves = [], {}
    budget = int(round(args.ratio * len(emb)))
    for g in (2, 8, 32, 128, 256):
        h, _, total = run_datamask(emb, quality, budget, args.seed, diversity="fl", lam=0.0, group_size=g,
                                   steps=args.steps, batch_ratio=args.batch_ratio, history_every=args.history_every)
        t, step, value = converged(h, "diversity")
        curves[f"G={g}"] = h
        rows.append({"group_size": g, "final_fl": float(h["diversity"].iloc[-1]), "best_fl": float(h["diversity"].max()),
                     "time_to_converge_s": t, "steps_to_converge": step, "total_time_s": total})
        print(f"  G={g}: FL {rows[-1]['final_fl']:.4f}, converged at step {step} ({t:.1f}s), total {total:.1f}s", flush=True)
    return rows, curves, ("diversity", "facility location (higher = better coverage)", "wall_time_s")


def study_batch(emb, quality, args):
    rows, curves = [], {}
    budget = int(round(args.ratio * len(emb)))
    for r in (0.01, 0.05, 0.1, 0.2, 0.5, 1.0):
        h, idx, total = run_datamask(emb, quality, budget, args.seed, diversity="pws", lam=0.3, batch_ratio=r,
                                     steps=args.steps, history_every=args.history_every)
        t, step, _ = converged(h, "joint")
        curves[f"r={r}"] = h
        rows.append({"batch_ratio": r, "final_joint": float(h["joint"].iloc[-1]), "time_to_converge_s": t,
                     "steps_to_converge": step, "total_time_s": total,
                     "selection_quality": quality_mean(emb, quality, idx),
                     "selection_pws": pairwise_similarity(emb, quality, idx)})
        print(f"  r={r}: joint {rows[-1]['final_joint']:.3f}, converged {t:.1f}s, total {total:.1f}s", flush=True)
    return rows, curves, ("joint", "joint objective, Eq. 12 (standardised terms, lam 0.3, PWS)", "wall_time_s")


def study_lr(emb, quality, args):
    rows, curves = [], {}
    budget = int(round(args.ratio * len(emb)))
    for lr in (0.001, 0.01, 0.1, 1.0, 10.0, 100.0, 1000.0):
        h, _, total = run_datamask(emb, quality, budget, args.seed, diversity="disf", lam=0.0, lr=lr,
                                   steps=args.steps, batch_ratio=args.batch_ratio, history_every=args.history_every)
        curves[f"lr={lr:g}"] = h
        rows.append({"lr": lr, "final_disf": float(h["diversity"].iloc[-1]), "best_disf": float(h["diversity"].max()),
                     "final_entropy": float(h["entropy"].iloc[-1]), "total_time_s": total})
        print(f"  lr={lr:g}: DiSF {rows[-1]['final_disf']:.4f} (best {rows[-1]['best_disf']:.4f}), "
              f"entropy {rows[-1]['final_entropy']:.2f}", flush=True)
    return rows, curves, ("diversity", "DiSF value -||C||_F (higher = more diverse)", "step")


def study_table1(emb, quality, args):
    rows, curves = [], {}
    budget = int(round(args.ratio * len(emb)))  # same budget for every variant: a share of the unpruned set
    variants = (("no pruning", None, "zeros"), ("+ pruning (q >= 4)", 4.0, "zeros"),
                ("+ quality initialisation", 4.0, "quality"))
    for name, min_q, init in variants:
        h, idx, total = run_datamask(emb, quality, budget, args.seed, diversity="pws", lam=0.3, min_quality=min_q,
                                     init=init, steps=args.steps, batch_ratio=args.batch_ratio,
                                     history_every=args.history_every)
        t, step, _ = converged(h, "joint")
        curves[name] = h
        rows.append({"variant": name, "min_quality": min_q, "init": init, "candidates": int((quality >= (min_q or -1)).sum()),
                     "time_to_converge_s": t, "steps_to_converge": step, "total_time_s": total,
                     "selection_quality": quality_mean(emb, quality, idx),
                     "selection_pws": pairwise_similarity(emb, quality, idx),
                     "share_below_4": float((quality[idx] < 4).mean())})
        print(f"  {name}: quality {rows[-1]['selection_quality']:.2f}, PWS {rows[-1]['selection_pws']:.4f}, "
              f"below-4 share {rows[-1]['share_below_4']:.1%}, converged {t:.1f}s (step {step})", flush=True)
    return rows, curves, ("joint", "joint objective (standardised per variant)", "wall_time_s")


def study_dvrl(emb, quality, args):
    """DVRL trains on one half (seen) and predicts the other (unseen); DataMask runs on the seen half."""
    rows, curves = [], {}
    n = len(emb)
    perm = np.random.default_rng(args.seed + 1).permutation(n)
    seen = np.sort(perm[: n // 2])
    k_seen = int(round(args.ratio * len(seen)))
    budget = int(round(args.ratio * n))
    rng = np.random.default_rng(args.seed + 2)
    before = float(np.mean([pairwise_similarity(emb[seen], quality[seen], rng.choice(len(seen), k_seen, replace=False))
                            for _ in range(16)]))
    t0 = time.perf_counter()
    sel = select("dvrl", quality=quality, embeddings=emb, budget=budget, seed=args.seed,
                 config={"diversity": "pws", "lam": 0.0, "unseen_fraction": 0.5, "iterations": args.dvrl_iterations,
                         "standardize": False})
    t_dvrl = time.perf_counter() - t0
    info = sel.info
    t_conv = converged(sel.history, "reward")[0]
    rows.append({"method": "DVRL", "before": info.get("seen_before"), "unseen_before": info.get("unseen_before"), "seen_after": info.get("seen_after"),
                 "unseen_after": info.get("unseen_after"), "total_time_s": t_dvrl, "time_to_converge_s": t_conv,
                 "items": n, "note": "trained on a random half, unseen = the other half"})
    h, idx, total = run_datamask(emb[seen], quality[seen], k_seen, args.seed, diversity="pws", lam=0.0,
                                 standardize=False, steps=args.steps, batch_ratio=args.batch_ratio,
                                 history_every=args.history_every)
    t, _, _ = converged(h, "diversity")
    curves["DataMask"] = h
    rows.append({"method": "DataMask", "before": before,
                 "seen_after": pairwise_similarity(emb[seen], quality[seen], idx), "unseen_after": None,
                 "total_time_s": total, "time_to_converge_s": t, "items": len(seen), "note": "seen half only"})
    for r in rows:
        print(f"  {r['method']}: before {r['before']}, seen after {r['seen_after']}, unseen after {r['unseen_after']}, "
              f"{r['total_time_s']:.1f}s", flush=True)
    return rows, curves, ("diversity", "PWS of top-S (higher = more diverse)", "wall_time_s")


def write(study: str, rows: list[dict], curves: dict, plot_spec, meta: dict, out: Path, log) -> None:
    column, ylabel, xcol = plot_spec

    def plot(_, png: Path) -> None:
        with bench.figure(png, figsize=(6.5, 4), dpi=120) as (fig, ax):
            for name, h in curves.items():
                if column in h:
                    ax.plot(h[xcol], h[column], label=name, lw=1.2)
            ax.set_xlabel("wall time (s)" if xcol == "wall_time_s" else "step")
            ax.set_ylabel(ylabel)
            if study == "lr":
                ax.set_ylim(bottom=max(min(h[column].min() for h in curves.values()), -10))
            ax.set_title(f"DataMask ablation '{study}': {meta['data']}", fontsize=8)
            ax.legend(fontsize=7)

    bench.write_result([{**r, **meta} for r in rows], out / f"datamask_ablation_{study}.csv", plot=plot, log=log,
                       columns=list(dict.fromkeys(k for r in rows for k in r)) + list(meta))


def main() -> None:
    args = bench.parser(__doc__, only=(",".join(STUDIES), f"comma-separated subset of {STUDIES}"),
                        n=(5000, "documents subsampled from the scored corpus"), ratio=(0.1, "keep ratio S/N"),
                        steps=1500, batch_ratio=(0.2, "r for the studies that do not vary it"), history_every=10,
                        dvrl_iterations=600, threads=1, seed=0, out=bench.RESULTS, mlflow=True).parse_args()
    torch.set_num_threads(args.threads)
    emb, quality, label = load_corpus(args.n, args.seed)
    funcs = {"g": study_g, "batch": study_batch, "lr": study_lr, "table1": study_table1, "dvrl": study_dvrl}
    for study in args.only.split(","):
        print(f"[{study}] {label}", flush=True)
        t0 = time.perf_counter()
        rows, curves, spec = funcs[study](emb, quality, args)
        meta = {"data": label, "steps": args.steps, "threads": args.threads, "seed": args.seed}
        metrics = {f"{study}_{i}_{k}": v for i, r in enumerate(rows) for k, v in r.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        log = None if args.no_mlflow else dict(name=f"datamask_ablation_{study}", metrics=metrics, params={
            **vars(args), "out": str(args.out)}, tags={"study": study, "paper": "DATAMASK"})
        write(study, rows, curves, spec, meta, args.out, log)
        print(f"[{study}] {time.perf_counter() - t0:.0f}s", flush=True)

if __name__ == "__main__":
    main()
