"""The DiSF benchmarks, one sub-command each.

``greedy``: DiSF Algorithm 1 (b = 1024) as the DiSF code runs it (``official``) against ``fast``, on real
embeddings in docs/selection.md's two cases ("16 picks", d = 384 and 768; "10% kept", d = 256, also ``fast`` on
pair rows only): time ratios, identical picks, DiSF value and top-10 dominance of official, fast and random
selections -> disf_greedy.csv and .png, MLflow; rows of a case not run (``--cases``) are kept from the CSV.
``fig3``: the top-10 eigenvalue share of the selections a `curate -m experiment=disf_fig3_dominance` sweep wrote,
as ``covariance`` (the score before issue #26) and ``official`` (DiSF's dominance_score.py: correlation
eigenvalues) -> disf_fig3_dominance_before_after.csv.

    .venv/bin/python benchmarks/selection/bench_disf_greedy.py greedy                    # both cases
    .venv/bin/python benchmarks/selection/bench_disf_greedy.py greedy --cases kept       # 10% kept only
    .venv/bin/python benchmarks/selection/bench_disf_greedy.py fig3 --sweeps \
        "before=data/07_model_output/default/multirun/<sweep of the old setting>" \
        "after=data/07_model_output/default/multirun/<sweep of the new setting>"
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from curation.selection import greedy, select
from curation.selection.diagnostics import dominance_scores
from curation.selection.objectives import disf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402
from _driver import ROOT, loadavg3 as loadavg  # noqa: E402

MINILM_CACHE = ROOT / "data" / "04_feature" / "bench_selection_minilm_views.npz"
STATIC_CACHE = ROOT / "data" / "04_feature" / "bench_selection_static256.npy"
CASES = {"16": "16 picks", "kept": "10% kept"}


def minilm_views(n: int) -> tuple[np.ndarray, np.ndarray]:
    """MiniLM of the first n corpus documents' first and of their last 1,500 characters (two real views: no 768-d
    model is offline), float32, cached on disk."""
    if MINILM_CACHE.exists():
        z = np.load(MINILM_CACHE)
        if len(z["head"]) >= n:
            return z["head"][:n], z["tail"][:n]
    from curation.embedding import EmbedderConfig, SentenceEmbedder

    texts = bench.bundled(["text"])["text"].head(n).tolist()
    emb = SentenceEmbedder(EmbedderConfig(num_threads=1, max_seq_length=128, show_progress=False, max_chars=0))
    head, tail = emb([t[:1500] for t in texts]), emb([t[-1500:] for t in texts])
    MINILM_CACHE.parent.mkdir(parents=True, exist_ok=True)
    np.savez(MINILM_CACHE, head=head, tail=tail)
    return head, tail


def static_embeddings(n: int) -> np.ndarray:
    """(n, 256) float32 static (model2vec) embeddings of the first n corpus documents, cached on disk."""
    if STATIC_CACHE.exists():
        x = np.load(STATIC_CACHE)
        if len(x) >= n:
            return x[:n]
    from curation.embedding import EmbedderConfig, make_embedder

    emb = make_embedder(EmbedderConfig(backend="static", dim=256, pca_dims=256, max_seq_length=256,
                                       show_progress=False, device="cpu"))
    texts = bench.bundled(["text"])["text"].head(n).tolist()
    x = np.asarray(emb.encode(texts).embeddings, dtype=np.float32)
    STATIC_CACHE.parent.mkdir(parents=True, exist_ok=True)
    np.save(STATIC_CACHE, x)
    return x


def timed(cfg: dict, q: np.ndarray, emb: np.ndarray, budget: int, repeats: int, seed: int):
    """(median wall s, selection, load before, load after, median cpu s) of `repeats` runs."""
    # warm-up on a small problem: the process's first call pays one-time library set-up
    select("greedy", quality=q[:64], embeddings=emb[:64], budget=3, config={**cfg, "batch_size": 64}, seed=1)
    load0 = loadavg()
    times, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        sel = select("greedy", quality=q, embeddings=emb, budget=budget, config=cfg, seed=seed)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    # fast: median of repeats (one run is at the mercy of the other jobs' load); official: one run.
    # CPU time (process_time) is reported too: on the shared machine it is less sensitive to the
    # other jobs than wall time.
    return float(np.median(times)), sel, load0, loadavg(), float(np.median(cpu)), times


def run_case(case: str, dim: int, batches: int, picks: int, args) -> list[dict]:
    n, budget = batches * args.batch_size, batches * picks
    if case == "16":
        head, tail = minilm_views(n)
        emb = {384: head, 768: np.concatenate([head, tail], 1)}[dim]
        data = "MiniLM (all-MiniLM-L6-v2) of the bundled corpus, first 1,500 chars" + (
            "" if dim == 384 else " + last 1,500 chars, concatenated (two real views; no 768-d model offline)")
    else:
        emb = static_embeddings(n)
        data = "static 256-d (model2vec distilled from the packaged MiniLM) of the bundled corpus"
    q = np.zeros(n)
    impls = {"fast": ("fast", args.fast_repeats, None)}
    if case == "kept":  # the fast path as it was before the moment form: pair rows at every |U|
        impls["fast (pair rows only)"] = ("fast", args.pairs_repeats, 1e12)
    impls["official"] = ("official", 1, None)
    res = {}
    default = greedy._PAIRS_PER_DIM
    for name, (impl, repeats, pairs_per_dim) in impls.items():
        greedy._PAIRS_PER_DIM = pairs_per_dim or default
        try:
            cfg = {"diversity": "disf", "lam": 0.0, "batch_size": args.batch_size, "impl": impl}
            res[name] = timed(cfg, q, emb, budget, repeats, args.seed)
        finally:
            greedy._PAIRS_PER_DIM = default
        t, _, l0, l1, cp, times = res[name]
        print(f"[{CASES[case]}] d={dim} {name:22s} {t:9.4f} s wall, {cp:9.4f} s cpu "
              f"(runs: {', '.join(f'{x:.3f}' for x in times)})  load {l0} -> {l1}", flush=True)
    official = res["official"]
    rng = np.random.default_rng(args.seed)
    rand = [np.sort(np.concatenate([b * args.batch_size + rng.choice(args.batch_size, picks, replace=False)
                                    for b in range(batches)])) for _ in range(20)]
    rows = []
    shape = {"n": n, "budget": budget, "picks_per_batch": picks, "batch_size": args.batch_size}
    for name, (t, sel, l0, l1, c, _) in res.items():
        rows.append({"case": CASES[case], "d": dim, "selection": name, **shape,
                     "wall_time_s": round(t, 4), "cpu_time_s": round(c, 4),
                     "identical_picks_to_official": bool(np.array_equal(sel.indices, official[1].indices)),
                     "speed_ratio_official_over_this": round(official[0] / t, 1),
                     "cpu_ratio_official_over_this": round(official[4] / c, 1),
                     "disf_value": disf(emb, q, sel.indices),
                     "dominance_top10": dominance_scores(emb[sel.indices], (10,))[10],
                     "threads": args.threads, "loadavg_before": l0, "loadavg_after": l1, "data": data})
    rows.append({"case": CASES[case], "d": dim, "selection": "random (mean of 20)", **shape,  # no times: empty
                 "disf_value": float(np.mean([disf(emb, q, r) for r in rand])),
                 "dominance_top10": float(np.mean([dominance_scores(emb[r], (10,))[10] for r in rand])),
                 "threads": args.threads, "data": data})
    return rows


def official_vs_fast(args) -> None:
    torch.set_num_threads(args.threads)
    cases = args.cases.split(",")
    if not set(cases) <= set(CASES):
        raise SystemExit(f"--cases: expected a subset of {sorted(CASES)}, got {args.cases!r}")
    rows = []
    if "16" in cases:
        for dim in map(int, args.dims.split(",")):
            rows += run_case("16", dim, args.batches_768 if dim == 768 else args.batches, args.picks, args)
    if "kept" in cases:
        rows += run_case("kept", 256, args.kept_batches, round(args.kept_fraction * args.batch_size), args)
    csv_path = args.out / "disf_greedy.csv"
    run_cases = {CASES[c] for c in cases}
    if csv_path.exists():  # keep the rows of the cases not run now
        rows = [{k: r.get(k) for k in rows[0]} for r in bench.read_rows(csv_path) if r["case"] not in run_cases] + rows
    for r in rows:
        print(r)
    slug = {"16 picks": "p16", "10% kept": "kept10"}
    metrics = {f"{slug[r['case']]}_d{r['d']}_{r['selection'].split(' ')[0]}"
               f"{'_pairs' if 'pair' in r['selection'] else ''}_{k}": float(r[k])
               for r in rows if r["case"] in run_cases
               for k in ("wall_time_s", "cpu_time_s", "disf_value", "dominance_top10",
                         "speed_ratio_official_over_this", "cpu_ratio_official_over_this")
               if r.get(k) not in (None, "")}
    log = None if args.no_mlflow else dict(
        name="disf_greedy_official_vs_fast", metrics=metrics,
        params={**{k: v for k, v in vars(args).items() if k != "command"}, "out": str(args.out)},
        tags={"paper": "DiSF", "artefact": "fig4_selection_time", "data": "MiniLM / static, bundled corpus"})
    bench.write_result(rows, csv_path, plot=plot, log=log, columns=list(rows[0]))


def plot(rows: list[dict], png_path: Path) -> None:
    keys = list(dict.fromkeys((r["case"], r["d"]) for r in rows))
    row = {(r["case"], r["d"], r["selection"]): r for r in rows}
    x = np.arange(len(keys))
    with bench.figure(png_path, 1, 2, figsize=(11, 4), dpi=120) as (fig, axes):
        for k, name in enumerate(("fast", "fast (pair rows only)", "official")):
            t = [float(row[(*key, name)]["wall_time_s"]) if (*key, name) in row else np.nan for key in keys]
            axes[0].bar(x + 0.27 * k, t, 0.27, label=name)
            for xi, key, ti in zip(x, keys, t):
                ratio = row.get((*key, name), {}).get("speed_ratio_official_over_this")
                if name != "official" and ratio not in (None, ""):
                    axes[0].annotate(f"{float(ratio):.0f}x", (xi + 0.27 * k, ti), xytext=(0, 2),
                                     textcoords="offset points", ha="center", fontsize=7)
        axes[0].set_yscale("log")
        axes[0].set_ylabel("wall time (s)")
        axes[0].set_title("b = 1024; label: official / this (wall), 1 thread, shared machine", fontsize=9)
        for k, name in enumerate(("official", "fast", "random (mean of 20)")):
            axes[1].bar(x + 0.27 * k, [float(row[(*key, name)]["dominance_top10"]) for key in keys], 0.27, label=name)
        axes[1].set_ylabel("dominance score, top-10 eigenvalue share")
        axes[1].set_title("DiSF Sec. 2.3 (lower = less collapse)", fontsize=9)
        for ax in axes:
            ax.set_xticks(x + 0.27, [f"{c}\nd={d}" for c, d in keys], fontsize=8)
            ax.legend(fontsize=8)


# --- fig3: the dominance of a sweep's selections, before and after issue #26 -----------------------------------

ORDER = ["random", "topk_quality", "semdedup", "greedy_disf", "datamask_disf"]


def covariance_dominance(x: np.ndarray, k: int = 10) -> float:
    x = np.asarray(x, np.float64)
    x = x - x.mean(0)
    eig = np.sort(np.clip(np.linalg.eigvalsh(x.T @ x / (len(x) - 1)), 0.0, None))[::-1]
    return float(eig[:k].sum() / eig.sum())


def fig3(args) -> None:
    feats = ROOT / "data" / "04_feature" / "default"
    ids = pd.concat([pd.read_parquet(p, columns=["id"])
                     for p in sorted((feats / "scores" / "shards").glob("*.parquet"))])
    emb = np.concatenate([np.load(p) for p in sorted((feats / "embeddings" / "shards").glob("*.npy"))])
    row_of = pd.Series(np.arange(len(ids)), index=ids["id"].to_numpy())
    rows = []
    for arg in args.sweeps:
        setting, sweep = arg.split("=", 1)
        for job in sorted(Path(sweep).iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 99):
            f = job / "selected_ids.parquet"
            if not f.exists():
                continue
            sel = pd.read_parquet(f)["id"].to_numpy()
            method = ORDER[int(job.name)] if job.name.isdigit() and int(job.name) < len(ORDER) else job.name
            x = emb[row_of.loc[sel].to_numpy()]
            rows.append({"setting": setting, "method": method, "size": len(sel),
                         "dominance_top10_covariance": covariance_dominance(x),
                         "dominance_top10_official": dominance_scores(x, (10,))[10], "sweep": sweep})
            print(rows[-1], flush=True)
    bench.write_result(pd.DataFrame(rows), bench.RESULTS / "disf_fig3_dominance_before_after.csv")


def main() -> None:
    args = bench.commands(__doc__, greedy=dict(
        cases=("16,kept", "16 (16 picks per batch) and/or kept (10%% kept)"),
        batches=(3, "DiSF batches of b items (16 picks, d = 384)"), batch_size=(1024, "b of DiSF Algorithm 1"),
        picks=(16, "picks per batch (official default 16 of 1024)"), dims=("384,768", "d of the 16-picks case"),
        batches_768=(1, "batches at d=768 (the official run takes ~4x longer per batch than at 384)"),
        kept_fraction=(0.1, "fraction kept per batch (kept case)"),
        kept_batches=(2, "batches of the kept case (official: ~30 s per batch at d = 256, loaded machine)"),
        threads=(1, "torch threads (1: on a shared, loaded 2-core machine 2 threads ran 10x slower)"),
        fast_repeats=(9, "timed runs of fast (median reported)"),
        pairs_repeats=(3, "timed runs of fast with pair rows only"), seed=0, out=bench.RESULTS,
        no_mlflow=(False, "do not log the results to MLflow")), fig3=dict(sweeps={
            "nargs": "+", "required": True, "help": "SETTING=FOLDER: a disf_fig3_dominance sweep's multirun folder"})
    ).parse_args()
    fig3(args) if args.command == "fig3" else official_vs_fast(args)


if __name__ == "__main__":
    main()
