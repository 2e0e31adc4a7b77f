"""DataMask on the default job's pruned pool (case ``corpus``) and on 100k clustered unit vectors, d = 384 (case
``synthetic``), one torch thread (issue #26). Two studies, one sub-command each:

``paper-vs-default``: the paper's FineWeb-Mask recipe against the project's default, side by side. Recipes:
``default`` (``DataMaskConfig()``, 2,000 steps), ``paper`` (``DATAMASK_PAPER``, 10,000 steps; also ``paper@2000``),
``topk`` (highest quality) and ``random``, each scored by mean quality, PWS, facility location (over ``fl_refs``),
DiSF, the DiSF dominance score @10 and its overlap with the others. ``corpus``: budget 10% of the ingested corpus;
``synthetic``: quality mapped by rank onto the corpus's, FL over 8,192 random points. Writes
benchmarks/results/datamask_paper_vs_default.csv and .png.

``fl-reference``: how many reference points a facility-location selection needs. DataMask on the FL term alone
(lam 0, 10% kept) with several reference-set sizes R (``fl_reference_size``), each selection judged by FL over the
whole block (or a large independent sample, ``judged_on``): the share of the FL gain over random,
(FL(sel_R) - FL(random)) / (FL(sel_whole) - FL(random)). ``corpus``: 6,000 candidates of the pool, exact;
``synthetic``: against R = 8,192. Writes benchmarks/results/fl_reference.csv and .png (committed:
fl_reference_6k.csv, fl_reference_100k.csv).

    nice -n 10 .venv/bin/python benchmarks/selection/bench_datamask_pool.py paper-vs-default       # both cases
    nice -n 10 .venv/bin/python benchmarks/selection/bench_datamask_pool.py paper-vs-default --cases corpus
    nice -n 10 .venv/bin/python benchmarks/selection/bench_datamask_pool.py fl-reference
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from curation.selection import DATAMASK_PAPER, DataMaskConfig, dominance_scores
from curation.selection.objectives import disf, pairwise_similarity
from curation.selection.synthetic import clustered_unit_vectors

from _datamask import bench, gap, timed_select


def load_pool(namespace: str = "default") -> tuple[np.ndarray, np.ndarray, int]:
    """(embeddings, merged quality) of the default job's pruned pool, and the ingested corpus size."""
    base = bench.ROOT / "data" / "05_model_input" / namespace
    scores = pd.concat([pd.read_parquet(p, columns=["quality"])
                        for p in sorted((base / "pruned_scores" / "shards").glob("*.parquet"))])
    emb = np.concatenate([np.load(p) for p in sorted((base / "pruned_embeddings" / "shards").glob("*.npy"))])
    docs = bench.ROOT / "data" / "02_intermediate" / namespace / "documents" / "manifest.json"
    n_corpus = int(json.loads(docs.read_text())["rows"])
    if len(scores) != len(emb):
        raise ValueError(f"pruned scores ({len(scores)}) and embeddings ({len(emb)}) are not aligned")
    return emb.astype(np.float32), scores["quality"].to_numpy(np.float64), n_corpus


def facility_location(unit: np.ndarray, idx: np.ndarray, refs: np.ndarray) -> float:
    """Mean over the reference rows of max_{j in U} cos(z_r, z_j) (unit rows), float32, in chunks."""
    sel = torch.from_numpy(unit[idx])
    out = 0.0
    for lo in range(0, len(refs), 4096):
        r = torch.from_numpy(unit[refs[lo : lo + 4096]])
        out += float((r @ sel.T).amax(1).double().sum())
    return out / len(refs)


def measure(emb, unit, q, idx, refs, others: dict[str, np.ndarray]) -> dict[str, float]:
    s = len(idx)
    row = {
        "quality_mean": float(q[idx].mean()),
        # PWS and DiSF are functions of the set alone: evaluated on its rows (no float64 copy of the block)
        "pws": pairwise_similarity(unit[idx], None, np.arange(s)),
        "fl": facility_location(unit, idx, refs),
        "disf": disf(emb[idx], None, np.arange(s)),
        "dominance_top10": dominance_scores(emb[idx], (10,))[10],
    }
    for name, other in others.items():
        row[f"overlap_{name}"] = len(np.intersect1d(idx, other)) / s
    return row


def recipes_case(case: str, emb: np.ndarray, q: np.ndarray, budget: int, refs: np.ndarray, seed: int,
                 paper_steps: int, recipes_run: tuple[str, ...] = ("default", "paper@2000", "paper")) -> list[dict]:
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    topk = np.sort(np.argsort(-q, kind="stable")[:budget])
    rand = np.sort(np.random.default_rng([seed, 7]).choice(len(q), size=budget, replace=False))
    recipes = {
        "default": {**{k: getattr(DataMaskConfig(), k) for k in DATAMASK_PAPER}, "steps": 2000},
        "paper@2000": {**DATAMASK_PAPER, "steps": min(2000, paper_steps)},
        "paper": {**DATAMASK_PAPER, "steps": paper_steps},
    }
    recipes = {k: v for k, v in recipes.items() if k in recipes_run}
    picks: dict[str, np.ndarray] = {}
    meta: dict[str, dict] = {}
    for name, cfg in recipes.items():
        sel, wall = timed_select("datamask", emb, q, budget, seed, **cfg, history_every=100)
        picks[name] = np.sort(sel.indices)
        meta[name] = {"wall_s": wall, "steps": cfg["steps"], "lam": cfg["lam"], "standardize": cfg["standardize"],
                      "init": cfg["init"], "final_entropy": sel.info["final_entropy_min"],
                      "logit_range": sel.info["logit_range_max"],
                      "returned_shortfall": sel.info["returned_shortfall_max"]}
        print(f"[{case}] {name}: {cfg['steps']} steps in {wall:.1f} s (load {bench.loadavg3()})", flush=True)
    picks["topk"], picks["random"] = topk, rand
    rows = []
    for name, idx in picks.items():
        others = {"topk": topk, "default": picks["default"], "paper": picks["paper"], "random": rand}
        m = measure(emb, unit, q, idx, refs, others)
        rows.append({"case": case, "n": len(q), "d": emb.shape[1], "budget": budget, "subset": name,
                     **meta.get(name, {"wall_s": float("nan"), "steps": 0, "lam": float("nan"), "standardize": "",
                                       "init": "", "final_entropy": float("nan"), "logit_range": float("nan"),
                                       "returned_shortfall": float("nan")}),
                     **m, "fl_refs": "all" if len(refs) == len(q) else f"{len(refs)} random", "load": bench.loadavg3()})
        print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in rows[-1].items()}, flush=True)
    return rows


def plot_recipes(rows: list[dict], path: Path) -> None:
    df = pd.DataFrame(rows)
    cases = list(dict.fromkeys(df["case"]))
    metrics = ["quality_mean", "pws", "fl", "disf", "overlap_topk"]
    with bench.figure(path, len(cases), len(metrics), figsize=(3.2 * len(metrics), 2.8 * len(cases)), squeeze=False,
                      dpi=120) as (fig, axes):
        for r, case in enumerate(cases):
            sub = df[df["case"] == case]
            for c, m in enumerate(metrics):
                ax = axes[r][c]
                ax.bar(sub["subset"], sub[m], color=["C0", "C1", "C1", "C2", "C7"][: len(sub)])
                lo, hi = sub[m].min(), sub[m].max()
                pad = 0.15 * (hi - lo if hi > lo else abs(hi) + 1e-9)
                ax.set_ylim(lo - pad, hi + pad)
                ax.set_title(f"{case} (N={int(sub['n'].iloc[0]):,}): {m}", fontsize=8)
                ax.tick_params(axis="x", labelrotation=45, labelsize=7)


def paper_vs_default(args) -> list[dict]:
    rows: list[dict] = []
    emb, q, n_corpus = load_pool(args.namespace)
    if "corpus" in args.cases:
        budget = round(0.1 * n_corpus)  # the default job's budget: 10% of the ingested corpus
        rows += recipes_case("corpus", emb, q, budget, np.arange(len(q)), args.seed, args.paper_steps)
    if "synthetic" in args.cases:
        x, q_syn, _ = clustered_unit_vectors(args.n, 384, n_clusters=50, seed=args.seed)
        # the synthetic quality's ranks onto the real merged-quality distribution (same marginal as the corpus)
        real = np.sort(np.random.default_rng([args.seed, 3]).choice(q, size=args.n, replace=True))
        q_map = np.empty(args.n)
        q_map[np.argsort(q_syn, kind="stable")] = real
        refs = np.sort(np.random.default_rng([args.seed, 5]).choice(args.n, size=8192, replace=False))
        rows += recipes_case("synthetic", x, q_map, args.n // 10, refs, args.seed, args.synthetic_paper_steps,
                             tuple(args.synthetic_recipes.split(",")))
    if args.append_csv:
        rows = pd.read_csv(args.append_csv).to_dict("records") + rows
    return rows


def references_case(case, emb, judge_refs, sizes, whole, steps, seeds, budget, rows):
    unit = (emb / np.linalg.norm(emb, axis=1, keepdims=True)).astype(np.float32)
    n = len(emb)
    rand_fl = np.mean([facility_location(unit, np.random.default_rng([s, 11]).choice(n, budget, replace=False),
                                         judge_refs) for s in range(3)])
    judged = "all" if len(judge_refs) == n else f"{len(judge_refs)} random"
    for seed in seeds:
        fl, walls = {}, {}
        for r in sizes:
            sel, walls[r] = timed_select("datamask", emb, np.zeros(n), budget, seed, diversity="fl", lam=0.0,
                                         steps=steps, fl_reference_size=int(r), fl_sims_dtype="auto", history_every=100)
            fl[r] = facility_location(unit, np.sort(sel.indices), judge_refs)
            print(f"[{case}] seed {seed} R={r}: FL {fl[r]:.5f} (random {rand_fl:.5f}) in {walls[r]:.1f} s, "
                  f"load {bench.loadavg3()}", flush=True)
        for r in sizes:
            rows.append({"case": case, "n": n, "d": emb.shape[1], "budget": budget, "steps": steps, "seed": seed,
                         "reference_size": r, "fl_judged": fl[r], "fl_random": rand_fl,
                         "share_of_gain": gap(fl[r], rand_fl, fl[whole]),
                         "judged_on": judged, "against": "whole block (R = N)" if whole >= n else f"R = {whole}",
                         "wall_s": walls[r], "load": bench.loadavg3()})
            print(rows[-1], flush=True)


def plot_references(rows: list[dict], png: Path) -> None:
    with bench.figure(png, figsize=(6, 4), dpi=120) as (fig, ax):
        for case, n, seed in dict.fromkeys((r["case"], r["n"], r["seed"]) for r in rows):
            pts = [(r["reference_size"], r["share_of_gain"]) for r in rows if (r["case"], r["seed"]) == (case, seed)]
            ax.plot(*zip(*pts), marker="o", label=f"{case} N={n:,} seed {seed}")
        ax.axhline(0.95, color="grey", ls="--", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("fl_reference_size R")
        ax.set_ylabel("share of the FL gain over random")
        ax.legend(fontsize=7)


def fl_reference(args) -> list[dict]:
    seeds = [int(s) for s in args.seeds.split(",")]
    rows: list[dict] = []
    if "corpus" in args.cases:
        emb, _, _ = load_pool()
        emb = emb[np.sort(np.random.default_rng(6000).choice(len(emb), 6000, replace=False))]
        references_case("corpus", emb, np.arange(len(emb)), [256, 1024, 2048, 4096, 6000], 6000, args.steps, seeds,
                        600, rows)
    if "synthetic" in args.cases:
        x, _, _ = clustered_unit_vectors(100_000, 384, n_clusters=50, seed=0)
        judge = np.sort(np.random.default_rng(99).choice(len(x), 8192, replace=False))
        references_case("synthetic", x, judge, [1024, 4096, 8192], 8192, args.synthetic_steps, seeds[:1], 10_000,
                        rows)
    return rows


def main() -> None:
    recipes = ("default,paper@2000,paper", "DataMask recipes of the synthetic case (paper@2000 is a second, shorter "
               "paper run)")
    args = bench.commands(__doc__, **{
        "paper-vs-default": dict(
            cases="corpus,synthetic", namespace="default", n=100_000, paper_steps=10_000, synthetic_paper_steps=10_000,
            synthetic_recipes=recipes, seed=0, out=bench.RESULTS / "datamask_paper_vs_default.csv",
            append_csv=(None, "rows of an earlier run (CSV) to write first (e.g. the corpus case)")),
        "fl-reference": dict(cases="corpus,synthetic", steps=2000, synthetic_steps=1000, seeds="0,1",
                             out=bench.RESULTS / "fl_reference.csv"),
    }).parse_args()
    torch.set_num_threads(1)
    study, plot = {"paper-vs-default": (paper_vs_default, plot_recipes),
                   "fl-reference": (fl_reference, plot_references)}[args.command]
    rows = study(args)
    bench.write_result(rows, args.out, plot=plot, columns=list(rows[0]))

if __name__ == "__main__":
    main()
