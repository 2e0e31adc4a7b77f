"""DataMask's final mask (issue #53 item 6): ``final=sample`` (Algorithm 1), ``topk`` or ``best``, on the objective.

On the default job's pruned pool of the bundled corpus (static embeddings, the merged 0-15 quality, as
``bench_datamask.py paper-vs-default`` reads it; budget 10% of the ingested corpus's documents), for each recipe
(``default``: conf/selection/datamask.yaml at each ``--lams``; ``paper``: DATAMASK_PAPER, FineWeb-Mask's recipe)
and seed: the joint objective DataMask optimises (Eq. 12 over the whole block, standardised terms for the default
recipe, raw for the paper's), its quality term (mean merged quality) and its diversity term (PWS) of the mask each
``final`` setting returns.

The three settings share the training run: ``final`` acts only after the last step (``sample`` draws from softmax(L)
with the run's generator, ``topk`` takes the S largest logits, ``best`` the best recorded top-S mask). So one run
with ``final=sample`` gives all three: its ``returned`` history row is the sampled mask, its last ``topk`` row the
top-S, its best ``topk`` row the best mask. For the first seed of each recipe the ``topk`` and ``best`` runs are made
as well (side by side, timed) and their returned objective is checked against the values read from the shared run
(``check`` column: equal to 1e-9, else the script fails).

    nice -n 10 .venv/bin/python benchmarks/selection/bench_datamask_final.py --namespace datamask_final
    # fewer cells: --lams 0.3 --seeds 0,1 --recipes default

Writes ``<--out>`` (default benchmarks/results/datamask_final.csv: one row per recipe, lam, seed and final) and
``.png``; prints the mean and SE over seeds of each setting and the paired differences, with the load average.

``--token-ratio 0.05`` (``experiment=decide``'s budget: 5% of the ingested corpus's reference tokens; writes
datamask_final_tokens.csv): under a token budget the setting also changes the pilot that sets the mask size, so each
``final`` is its own run (``curation.selection.tokens.select_tokens``, as decide's picks call it), and the returned
set is the final ordering stopped at the budget, so the three sets differ in size. Each is scored by its raw terms
and by the block's objective (the same construction and seed as the run's), standardised with the random-subset
statistics of one size, the mean of the three sets' sizes (``scored_at_size``); ``best`` in the shortfall columns is
the best of the three.

    nice -n 10 .venv/bin/python benchmarks/selection/bench_datamask_final.py --namespace datamask_final \
        --token-ratio 0.05 --lams 0.3 --paper-seeds 0,1,2
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _driver as bench  # noqa: E402
from bench_datamask import load_pool  # noqa: E402

from curation.selection import DATAMASK_PAPER, select  # noqa: E402

FINALS = ("sample", "topk", "best")


def recipe_config(recipe: str, lam: float, steps: int | None) -> dict:
    if recipe == "default":
        cfg = {"lam": lam}  # every other key: conf/selection/datamask.yaml (= DataMaskConfig)
    else:
        cfg = dict(DATAMASK_PAPER)  # FineWeb-Mask: raw Eq. 12, lam 0.5, quality init, 10,000 steps
    if steps is not None:
        cfg["steps"] = steps
    return cfg


def read_finals(history: pd.DataFrame) -> dict[str, dict]:
    """The objective of each ``final``'s mask, from one run's history (see the module's doc)."""
    topk = history[history["mask"] == "topk"]
    returned = history[history["mask"] == "returned"].iloc[-1]
    last = topk[topk["step"] == topk["step"].max()].iloc[-1]
    best = topk.loc[topk["joint"].idxmax()]  # the first of equal rows, as run_block keeps it
    return {name: {"joint": float(r["joint"]), "quality": float(r["quality"]), "diversity": float(r["diversity"]),
                   "at_step": int(r["step"])} for name, r in (("sample", returned), ("topk", last), ("best", best))}


def block_objective(emb, q, cfg: dict, seed: int):
    """The objective a one-block run with ``cfg`` and ``seed`` optimises (same construction and seed as run_block)."""
    from curation.selection.config import parse_selection_config
    from curation.selection.objectives import Objective, derive_seed

    c = parse_selection_config("datamask", {**cfg, "final": "sample"})
    objective = Objective(torch.as_tensor(emb, dtype=torch.float32), torch.as_tensor(q, dtype=torch.float32),
                          diversity=c.diversity, lam=c.lam, standardize=c.standardize, scale_samples=c.scale_samples,
                          fl_reference_size=c.fl_reference_size, seed=derive_seed(seed, 10, 0),
                          fl_sims_dtype=c.fl_sims_dtype, disf_scale=c.disf_scale)
    return objective, c


def random_joint(objective, c, size: int) -> float:
    """The mean joint objective of random subsets of ``size`` (the objective's own 64 random subsets: 0 when the
    terms are standardised), the floor the gain is measured from."""
    stats = objective.term_stats(size)
    terms = {"quality": torch.tensor([stats["quality"][0]]), c.diversity: torch.tensor([stats[c.diversity][0]])}
    return float(objective.combine(terms, size)[0])


def one_cell(emb, q, budget, recipe, lam, seed, cfg, check: bool) -> list[dict]:
    t0 = time.perf_counter()
    sel = select("datamask", quality=q, embeddings=emb, budget=budget, config={**cfg, "final": "sample"}, seed=seed)
    wall = {"sample": time.perf_counter() - t0}
    finals = read_finals(sel.history)
    checked = {"sample": ""}
    if check:  # the other two settings run on their own: their returned mask must be the one read above
        for name in ("topk", "best"):
            t0 = time.perf_counter()
            own = select("datamask", quality=q, embeddings=emb, budget=budget, config={**cfg, "final": name},
                         seed=seed)
            wall[name] = time.perf_counter() - t0
            got = float(own.history[own.history["mask"] == "returned"]["joint"].iloc[-1])
            if abs(got - finals[name]["joint"]) > 1e-9 * max(1.0, abs(got)):
                raise AssertionError(f"{recipe} lam {lam} seed {seed}: final={name} returned joint {got!r}, the "
                                     f"shared run's history says {finals[name]['joint']!r}")
            checked[name] = "own run, equal"
    best = finals["best"]["joint"]
    f_random = random_joint(*block_objective(emb, q, cfg, seed), budget)
    rows = []
    for name in FINALS:
        f = finals[name]
        rows.append({"recipe": recipe, "lam": cfg.get("lam", lam), "standardize": cfg.get("standardize", True),
                     "init": cfg.get("init", "zeros"), "steps": cfg.get("steps", 2000), "seed": seed, "final": name,
                     "n": len(q), "budget": budget, **f, "random_joint": f_random,
                     "shortfall_vs_best": (best - f["joint"]) / max(abs(best), 1e-12),
                     "gain_lost_vs_best": (best - f["joint"]) / max(best - f_random, 1e-12),
                     "wall_s": wall.get(name, wall["sample"]), "timed": "own run" if name in wall else "shared run",
                     "check": checked.get(name, ""), "final_entropy": sel.info["final_entropy_min"],
                     "load": bench.loadavg3()})
    print(f"[{recipe} lam {rows[0]['lam']} seed {seed}] {wall['sample']:.1f} s, load {bench.loadavg3()}: "
          + ", ".join(f"{r['final']} {r['joint']:.4f} (q {r['quality']:.3f}, div {r['diversity']:.4f}, "
                      f"step {r['at_step']})" for r in rows), flush=True)
    return rows


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    """Mean and SE over seeds per (recipe, lam, final), and the paired differences against ``sample``."""
    out = []
    for (recipe, lam), g in df.groupby(["recipe", "lam"], sort=False):
        wide = {m: g.pivot(index="seed", columns="final", values=m) for m in ("joint", "quality", "diversity")}
        k = len(wide["joint"])
        for name in FINALS:
            row = {"recipe": recipe, "lam": lam, "final": name, "seeds": k}
            for m, w in wide.items():
                row[f"{m}_mean"], row[f"{m}_se"] = w[name].mean(), w[name].std(ddof=1) / np.sqrt(k)
                d = w[name] - w["sample"]
                row[f"{m}_minus_sample"], row[f"{m}_minus_sample_se"] = d.mean(), d.std(ddof=1) / np.sqrt(k)
            sf = g[g["final"] == name]["shortfall_vs_best"]
            row["shortfall_vs_best_mean"], row["shortfall_vs_best_max"] = sf.mean(), sf.max()
            gl = g[g["final"] == name]["gain_lost_vs_best"]
            row["gain_lost_vs_best_mean"], row["gain_lost_vs_best_se"] = gl.mean(), gl.std(ddof=1) / np.sqrt(len(gl))
            out.append(row)
    return pd.DataFrame(out)


def plot(rows, png: Path) -> None:
    df = pd.DataFrame(rows)
    cells = list(dict.fromkeys(zip(df["recipe"], df["lam"])))
    colors = {"sample": "C3", "topk": "C0", "best": "C2"}
    with bench.figure(png, 2, len(cells), figsize=(3.3 * len(cells), 6.0), squeeze=False, dpi=120) as (fig, axes):
        for c, (recipe, lam) in enumerate(cells):
            g = df[(df["recipe"] == recipe) & (df["lam"] == lam)]
            ax = axes[0][c]
            for i, name in enumerate(FINALS):
                v = 100 * g[g["final"] == name]["gain_lost_vs_best"].to_numpy()
                ax.scatter(np.full(len(v), i) + np.linspace(-0.15, 0.15, len(v)), v, color=colors[name], s=14)
                ax.errorbar(i + 0.3, v.mean(), yerr=v.std(ddof=1) / np.sqrt(len(v)) if len(v) > 1 else 0,
                            fmt="o", color="k", ms=4, capsize=3)
            ax.set_xticks(range(len(FINALS)), FINALS)
            ax.set_title(f"{recipe}, lam {lam:g}: % of best's gain over random lost", fontsize=8)
            ax.axhline(0, color="grey", lw=0.6)
            ax = axes[1][c]
            for name in FINALS:
                s = g[g["final"] == name]
                ax.scatter(s["diversity"], s["quality"], color=colors[name], s=14, label=name)
            ax.set_xlabel("diversity (PWS, higher = more diverse)", fontsize=7)
            ax.set_ylabel("mean quality (0-15)", fontsize=7)
            ax.tick_params(labelsize=6)
            if c == 0:
                ax.legend(fontsize=7)
        fig.suptitle("DataMask final mask on the bundled corpus's pruned pool (one dot per seed; black: mean ± SE)",
                     fontsize=9)


def token_cells(emb, q, n_tokens, budget_tokens, recipe, lam, seed, cfg) -> list[dict]:
    """Each ``final`` as its own token-budget run, every returned set scored by the block's objective."""
    from curation.selection.tokens import select_tokens

    finals, wall = {}, {}
    for name in FINALS:
        t0 = time.perf_counter()
        finals[name] = select_tokens("datamask", quality=q, embeddings=emb, n_tokens=n_tokens,
                                     budget_tokens=budget_tokens, config={**cfg, "final": name}, seed=seed)
        wall[name] = time.perf_counter() - t0
    objective, c = block_objective(emb, q, cfg, seed)
    # the sets differ in size (each final's order stopped at the tokens): standardised terms would be divided by
    # each size's own random-subset spread, which shrinks as the size grows, so all three are scored with the
    # statistics of one size, the mean of theirs (raw terms: the same function at any size)
    common = round(np.mean([len(sel.indices) for sel in finals.values()]))
    scored = {}
    for name, sel in finals.items():
        idx = torch.as_tensor(np.sort(sel.indices), dtype=torch.int64).unsqueeze(0)
        terms = objective.terms(idx)
        scored[name] = {"joint": float(objective.combine(terms, common)[0]), "scored_at_size": common,
                        "random_joint": random_joint(objective, c, common),
                        "quality": float(terms["quality"][0]), "diversity": float(terms[c.diversity][0]),
                        "docs": idx.shape[1], "tokens": float(n_tokens[idx[0].numpy()].sum()),
                        "trained_size": sel.info.get("token_solved_size", float("nan"))}
    best = max(v["joint"] for v in scored.values())
    rows = [{"recipe": recipe, "lam": c.lam, "standardize": c.standardize, "init": c.init, "steps": c.steps,
             "seed": seed, "final": name, "n": len(q), "budget_tokens": budget_tokens, **scored[name],
             "shortfall_vs_best": (best - scored[name]["joint"]) / max(abs(best), 1e-12),
             "gain_lost_vs_best": (best - scored[name]["joint"]) / max(best - scored[name]["random_joint"], 1e-12),
             "wall_s": wall[name], "timed": "own run", "load": bench.loadavg3()} for name in FINALS]
    print(f"[tokens {recipe} lam {c.lam} seed {seed}] load {bench.loadavg3()}: "
          + ", ".join(f"{r['final']} {r['joint']:.4f} (q {r['quality']:.3f}, div {r['diversity']:.4f}, "
                      f"{r['docs']} docs, {r['wall_s']:.1f} s)" for r in rows), flush=True)
    return rows


def pool_tokens(namespace: str) -> tuple[np.ndarray, float]:
    """Reference-tokenizer counts of the pruned pool's documents, and the ingested corpus's tokens."""
    from curation.data.tokens import count_tokens

    base = bench.ROOT / "data"
    ids = pd.concat([pd.read_parquet(p, columns=["id"]) for p in
                     sorted((base / "05_model_input" / namespace / "pruned_scores" / "shards").glob("*.parquet"))])
    docs = pd.concat([pd.read_parquet(p, columns=["id", "text"]) for p in
                      sorted((base / "02_intermediate" / namespace / "documents" / "shards").glob("*.parquet"))])
    counts = pd.Series(count_tokens(docs["text"].tolist()), index=docs["id"].to_numpy())
    return counts.loc[ids["id"].to_numpy()].to_numpy(np.float64), float(counts.sum())


def main() -> None:
    args = bench.parser(__doc__, namespace=("default", "run.namespace of the default job whose pruned pool is read"),
                        lams=("0.1,0.3,0.5,0.9", "lam of the default recipe (comma-separated)"),
                        seeds=("0,1,2,3,4", "seeds (comma-separated)"), recipes=("default,paper", "recipes"),
                        steps=(None, "override the recipes' steps (a smoke run)"), keep=0.1,
                        paper_seeds=(None, "seeds of the paper recipe (default: --seeds)"),
                        token_ratio=(None, "a token budget: this share of the ingested corpus's reference tokens"),
                        out=bench.RESULTS / "datamask_final.csv", threads=1).parse_args()
    args.steps = int(args.steps) if args.steps is not None else None
    torch.set_num_threads(args.threads)
    # the health warning of every sampled run (its shortfall is the CSV's shortfall_vs_best column)
    logging.getLogger("curation.selection.datamask").setLevel(logging.ERROR)
    emb, q, n_corpus = load_pool(args.namespace)
    budget = round(args.keep * n_corpus)
    seeds = [int(s) for s in args.seeds.split(",")]
    paper_seeds = [int(s) for s in args.paper_seeds.split(",")] if args.paper_seeds else seeds
    print(f"pool {len(q):,} candidates (d {emb.shape[1]}) of {n_corpus:,} documents; budget {budget:,}; "
          f"load {bench.loadavg3()}", flush=True)
    started, rows = time.perf_counter(), []
    if args.token_ratio is not None:
        n_tokens, corpus_tokens = pool_tokens(args.namespace)
        budget_tokens = float(args.token_ratio) * corpus_tokens
        print(f"token budget {budget_tokens:,.0f} of {corpus_tokens:,.0f} reference tokens", flush=True)
        for recipe in args.recipes.split(","):
            lams = [float(x) for x in args.lams.split(",")] if recipe == "default" else [DATAMASK_PAPER["lam"]]
            for lam in lams:
                for seed in seeds if recipe == "default" else paper_seeds:
                    rows += token_cells(emb, q, n_tokens, budget_tokens, recipe, lam, seed,
                                        recipe_config(recipe, lam, args.steps))
        args.out = args.out.with_name(args.out.stem + "_tokens.csv")
        report(rows, args.out, f"issue #53 item 6, token budget {args.token_ratio} of {corpus_tokens:.0f}; pool "
                               f"{len(q)}; one torch thread", started)
        return
    for recipe in args.recipes.split(","):
        lams = [float(x) for x in args.lams.split(",")] if recipe == "default" else [DATAMASK_PAPER["lam"]]
        for lam in lams:
            for i, seed in enumerate(seeds if recipe == "default" else paper_seeds):
                rows += one_cell(emb, q, budget, recipe, lam, seed, recipe_config(recipe, lam, args.steps),
                                 check=i == 0)
    report(rows, args.out, f"issue #53 item 6; pool {len(q)} of {n_corpus}, budget {budget}; one torch thread",
           started)


def report(rows: list[dict], out: Path, what: str, started: float) -> None:
    total = time.perf_counter() - started
    summary = summarise(pd.DataFrame(rows))
    comment = (f"{what}; whole run {total:.0f} s; load at the end {bench.loadavg3()}; timed = own run: the setting "
               "timed in a run of its own, NOT alone on the machine (other jobs beside it: the load column)")
    bench.write_result(rows, out, plot=plot, comment=comment, columns=list(rows[0]))
    bench.write_result(summary.to_dict("records"), out.with_name(out.stem + "_summary.csv"),
                       comment=comment, columns=list(summary.columns))
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.precision", 4):
        print(summary[["recipe", "lam", "final", "joint_mean", "joint_se", "joint_minus_sample",
                       "joint_minus_sample_se", "quality_mean", "quality_minus_sample", "diversity_mean",
                       "diversity_minus_sample", "shortfall_vs_best_mean", "gain_lost_vs_best_mean",
                       "gain_lost_vs_best_se"]])
    print(f"whole run {total:.0f} s, load {bench.loadavg3()}")


if __name__ == "__main__":
    main()
