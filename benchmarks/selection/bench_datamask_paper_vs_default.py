"""DataMask: the paper's FineWeb-Mask recipe against the project's default, side by side (issue #26).

Recipes: ``default`` (``DataMaskConfig()``, 2,000 steps), ``paper`` (``DATAMASK_PAPER``, 10,000 steps; also
``paper@2000``), ``topk`` (highest quality) and ``random``. Every subset is scored by mean quality, PWS, facility
location (over ``fl_refs``), DiSF, the DiSF dominance score @10 and its overlap with the others. Cases: ``corpus``
(the default job's pruned pool, budget 10% of the ingested corpus) and ``synthetic`` (100k clustered unit vectors,
quality mapped by rank onto the corpus's; FL over 8,192 random points).

    nice -n 10 .venv/bin/python benchmarks/selection/bench_datamask_paper_vs_default.py            # both cases
    nice -n 10 .venv/bin/python benchmarks/selection/bench_datamask_paper_vs_default.py --cases corpus

Writes benchmarks/results/datamask_paper_vs_default.csv and .png. One torch thread.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from curation.selection import DATAMASK_PAPER, DataMaskConfig, dominance_scores, select
from curation.selection.objectives import disf, pairwise_similarity
from curation.selection.synthetic import clustered_unit_vectors

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402
from _driver import ROOT, loadavg3 as loadavg  # noqa: E402

NAME = "datamask_paper_vs_default"


def load_pool(namespace: str = "default") -> tuple[np.ndarray, np.ndarray, int]:
    """(embeddings, merged quality) of the default job's pruned pool, and the ingested corpus size."""
    base = ROOT / "data" / "05_model_input" / namespace
    scores = pd.concat([pd.read_parquet(p, columns=["quality"]) for p in sorted((base / "pruned_scores" / "shards").glob("*.parquet"))])
    emb = np.concatenate([np.load(p) for p in sorted((base / "pruned_embeddings" / "shards").glob("*.npy"))])
    docs = ROOT / "data" / "02_intermediate" / namespace / "documents" / "manifest.json"
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


def run_case(case: str, emb: np.ndarray, q: np.ndarray, budget: int, refs: np.ndarray, seed: int, paper_steps: int,
             default_steps: int, recipes_run: tuple[str, ...] = ("default", "paper@2000", "paper")) -> list[dict]:
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    topk = np.sort(np.argsort(-q, kind="stable")[:budget])
    rand = np.sort(np.random.default_rng([seed, 7]).choice(len(q), size=budget, replace=False))
    recipes = {
        "default": {**{k: getattr(DataMaskConfig(), k) for k in DATAMASK_PAPER}, "steps": default_steps},
        "paper@2000": {**DATAMASK_PAPER, "steps": min(2000, paper_steps)},
        "paper": {**DATAMASK_PAPER, "steps": paper_steps},
    }
    recipes = {k: v for k, v in recipes.items() if k in recipes_run}
    picks: dict[str, np.ndarray] = {}
    meta: dict[str, dict] = {}
    for name, cfg in recipes.items():
        t0 = time.perf_counter()
        sel = select("datamask", quality=q, embeddings=emb, budget=budget, config={**cfg, "history_every": 100}, seed=seed)
        wall = time.perf_counter() - t0
        picks[name] = np.sort(sel.indices)
        meta[name] = {"wall_s": wall, "steps": cfg["steps"], "lam": cfg["lam"], "standardize": cfg["standardize"],
                      "init": cfg["init"], "final_entropy": sel.info["final_entropy_min"],
                      "logit_range": sel.info["logit_range_max"], "returned_shortfall": sel.info["returned_shortfall_max"]}
        print(f"[{case}] {name}: {cfg['steps']} steps in {wall:.1f} s (load {loadavg()})", flush=True)
    picks["topk"], picks["random"] = topk, rand
    rows = []
    for name, idx in picks.items():
        others = {"topk": topk, "default": picks["default"], "paper": picks["paper"], "random": rand}
        m = measure(emb, unit, q, idx, refs, others)
        rows.append({"case": case, "n": len(q), "d": emb.shape[1], "budget": budget, "subset": name,
                     **meta.get(name, {"wall_s": float("nan"), "steps": 0, "lam": float("nan"), "standardize": "",
                                       "init": "", "final_entropy": float("nan"), "logit_range": float("nan"),
                                       "returned_shortfall": float("nan")}),
                     **m, "fl_refs": "all" if len(refs) == len(q) else f"{len(refs)} random", "load": loadavg()})
        print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in rows[-1].items()}, flush=True)
    return rows


def plot(rows: list[dict], path: Path) -> None:
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


def main() -> None:
    args = bench.parser(__doc__, cases="corpus,synthetic", namespace="default", n=100_000, paper_steps=10_000,
                        synthetic_paper_steps=10_000,
                        synthetic_recipes=("default,paper@2000,paper", "DataMask recipes of the synthetic case "
                                           "(paper@2000 is a second, shorter paper run)"),
                        append_csv=(None, "rows of an earlier run (CSV) to write first (e.g. the corpus case)"),
                        seed=0, out=bench.RESULTS / f"{NAME}.csv").parse_args()
    torch.set_num_threads(1)
    rows: list[dict] = []
    emb, q, n_corpus = load_pool(args.namespace)
    cases = args.cases.split(",")
    if "corpus" in cases:
        budget = round(0.1 * n_corpus)  # the default job's budget: 10% of the ingested corpus
        rows += run_case("corpus", emb, q, budget, np.arange(len(q)), args.seed, args.paper_steps, 2000)
    if "synthetic" in cases:
        x, q_syn, _ = clustered_unit_vectors(args.n, 384, n_clusters=50, seed=args.seed)
        # the synthetic quality's ranks onto the real merged-quality distribution (same marginal as the corpus)
        real = np.sort(np.random.default_rng([args.seed, 3]).choice(q, size=args.n, replace=True))
        q_map = np.empty(args.n)
        q_map[np.argsort(q_syn, kind="stable")] = real
        refs = np.sort(np.random.default_rng([args.seed, 5]).choice(args.n, size=8192, replace=False))
        rows += run_case("synthetic", x, q_map, args.n // 10, refs, args.seed, args.synthetic_paper_steps, 2000,
                         tuple(args.synthetic_recipes.split(",")))
    if args.append_csv:
        rows = pd.read_csv(args.append_csv).to_dict("records") + rows
    bench.write_result(rows, args.out, plot=plot, columns=list(rows[0]))
    print(f"pid {os.getpid()}, argv {' '.join(sys.argv[1:])}")

if __name__ == "__main__":
    main()
