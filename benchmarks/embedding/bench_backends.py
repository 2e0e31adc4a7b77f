"""Embedding backends timed on the same real corpus documents, two results (sub-commands).

``throughput``: our SentenceEmbedder vs a plain SentenceTransformer.encode. Same real corpus texts, same model,
one process, configurations interleaved (repeat r runs each once before repeat r+1); one CSV row per
(configuration, repeat) with the largest deviation from the plain vectors, and a bar chart of the median docs/s.
Writes benchmarks/results/embedding_throughput.csv and .png. (ONNX Runtime is timed by ``backends``.)

    .venv/bin/python benchmarks/embedding/bench_backends.py throughput --n 1000 --repeats 2

``backends`` (embedding_backends.csv/.png, logged to MLflow; docs/embeddings.md, "Selection agreement"): the
backends side by side (``plain`` encode; ours in PyTorch, ``torch``, the reference; ONNX fp32/int8; ``static`` and
``static_trained``) on the same real documents (every human-labelled DCLM and LLM-scored FineWeb-Edu row, a fill
from documents the trained static model never saw): docs/s, 1 - cos to ``torch`` and what selection keeps judged
under MiniLM's vectors (DataMask gain shares, the Edu head's ROC-AUC, near-duplicate and SemDeDup recall).

    flock /tmp/bench.lock .venv/bin/python benchmarks/embedding/bench_backends.py backends
"""

from __future__ import annotations

import os
import platform
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402

FORCED_SOURCES = ("dclm_human_labeled", "fineweb_edu_scorer")


def warm_model(texts: list[str]):
    """MiniLM as SentenceTransformer loads it, warmed up: first-call allocations are not throughput."""
    from curation.embedding import load_sentence_model

    model = load_sentence_model()
    model.encode(texts[:16])
    return model


def plain(model, texts: list[str], batch_size: int = 32):
    """The library baseline: ``SentenceTransformer.encode``, normalised (batch 32: the library's default)."""
    return model.encode(texts, batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False)


# --- throughput ---------------------------------------------------------------------------------------------

def throughput(args) -> None:
    import torch

    from curation.embedding import EmbedderConfig, SentenceEmbedder

    texts = bench.sample_texts(args.n)
    model = warm_model(texts)

    def plain_timed(batch_size: int):
        def run():
            t0 = time.perf_counter()
            return plain(model, texts, batch_size), time.perf_counter() - t0

        return run

    def ours(**kw):
        emb = SentenceEmbedder(EmbedderConfig(show_progress=False, **kw), model=model)

        def run():
            r = emb.encode(texts)
            return r.embeddings, r.seconds

        return run

    configs = {
        "plain encode bs32 (library default)": plain_timed(32),
        "plain encode bs64": plain_timed(64),
        "ours default (bs64, sort, 2 threads, max_chars 4096)": ours(),
        "ours bs32": ours(batch_size=32),
        "ours bs128": ours(batch_size=128),
        "ours no token sort": ours(sort_by_length=False),
        "ours no char pre-cut": ours(max_chars=0),
        "ours 1 thread": ours(num_threads=1),
        "ours int8 dynamic quantisation (opt-in)": ours(quantize="int8"),
    }

    rows = []
    reference = None
    for rep in range(args.repeats):
        for name, run in configs.items():
            vecs, seconds = run()
            vecs = np.asarray(vecs, dtype=np.float32)
            if reference is None:
                reference = vecs
            dev = float(1.0 - (vecs * reference).sum(1).min())
            rows.append({"config": name, "repeat": rep, "n_docs": len(texts), "seconds": round(seconds, 3),
                         "docs_per_s": round(len(texts) / seconds, 2), "max_1_minus_cos_vs_plain": dev,
                         "torch_threads_default": torch.get_num_threads(), "cpus": os.cpu_count(),
                         "load_avg_1m": round(bench.loadavg(), 2), "python": platform.python_version()})
            print(f"[{rep}] {name:55s} {rows[-1]['docs_per_s']:8.2f} docs/s  dev={dev:.2e}  "
                  f"load={rows[-1]['load_avg_1m']}", flush=True)

    bench.write_result(rows, args.out.with_suffix(".csv"), plot=lambda _, png: plot_throughput(
        pd.read_csv(args.out.with_suffix(".csv")), png))


def plot_throughput(frame: pd.DataFrame, png_path: Path) -> None:
    """Bar chart of the median docs/s per configuration, ratio to the first (plain) row."""
    frame = frame[pd.to_numeric(frame["docs_per_s"], errors="coerce").notna()].astype({"docs_per_s": float})
    med = frame.groupby("config", sort=False)["docs_per_s"].median()
    base = med.iloc[0]
    n_rep = int(frame["repeat"].max()) + 1
    with bench.figure(png_path, figsize=(11, 5), dpi=120) as (fig, ax):
        colors = ["#888888" if c.startswith("plain") else "#1f77b4" for c in med.index]
        ax.barh(med.index[::-1], med.values[::-1], color=colors[::-1])
        for i, v in enumerate(med.values[::-1]):
            ax.text(v, i, f" {v:.1f} ({v / base:.2f}x)", va="center", fontsize=8)
        ax.set_xlabel(
            f"documents / second (median of {n_rep} interleaved run(s), {int(frame['n_docs'].iloc[0])} real corpus "
            f"docs,\nall-MiniLM-L6-v2 on CPU, {int(frame['cpus'].iloc[0])} cores, 1-min load avg "
            f"{frame['load_avg_1m'].min():.1f}-{frame['load_avg_1m'].max():.1f})")
        ax.set_title("Embedding throughput: ours vs plain SentenceTransformer.encode (grey)")
        ax.set_xlim(0, med.max() * 1.3)


# --- backends -----------------------------------------------------------------------------------------------

def load_documents(n: int, seed: int = 0) -> pd.DataFrame:
    df = bench.bundled()
    forced = np.flatnonzero(df["source"].isin(FORCED_SOURCES).to_numpy())
    # the fill comes from the documents the trained static model never saw (its held-out share), so
    # every row is judged on text none of the embedders was fitted to
    from curation.embedding.tokenlearn import is_held_out

    rest = np.setdiff1d(np.flatnonzero(is_held_out(df["id"], df["source"])), forced)
    fill = np.random.default_rng(seed).choice(rest, size=max(0, n - len(forced)), replace=False)
    return df.iloc[np.sort(np.r_[forced, fill])].reset_index(drop=True)


def gain_share(ref_emb, sel_idx, ref_idx, rnd_idxs, fn) -> float:
    q = np.zeros(len(ref_emb))
    base = np.mean([fn(ref_emb, q, r) for r in rnd_idxs])
    return (fn(ref_emb, q, sel_idx) - base) / (fn(ref_emb, q, ref_idx) - base)


def top_pairs(unit: np.ndarray, k: int | None = None, threshold: float | None = None) -> set[tuple[int, int]]:
    sim = unit @ unit.T
    iu = np.triu_indices(len(unit), 1)
    s = sim[iu]
    if threshold is not None:
        keep = np.flatnonzero(s >= threshold)
    else:
        keep = np.argpartition(-s, k)[:k] if k else np.array([], int)
    return set(zip(iu[0][keep].tolist(), iu[1][keep].tolist()))


def backends(args) -> None:
    import torch

    from curation.embedding import EmbedderConfig, make_embedder
    from curation.scoring.config import ScoringConfig
    from curation.scoring.run import score_corpus
    from curation.selection import api as sel_api
    from curation.selection.objectives import facility_location, pairwise_similarity

    torch.set_num_threads(2)
    load0 = bench.loadavg()
    docs = load_documents(args.n)
    texts = docs["text"].tolist()
    print(f"{len(texts)} documents, load {load0:.2f}", flush=True)

    base = dict(show_progress=False, device="cpu")
    static = dict(**base, backend="static", max_seq_length=256, batch_size=1024, sort_by_length=False)
    configs = {
        "torch": EmbedderConfig(**base),
        "onnx_fp32": EmbedderConfig(**base, backend="onnx", batch_size=32),
        "onnx_int8": EmbedderConfig(**base, backend="onnx", batch_size=32, quantize="int8"),
        "static": EmbedderConfig(**static, dim=256, pca_dims=256),
        # the same distilled model trained with tokenlearn on the corpus's other documents
        "static_trained": EmbedderConfig(**static, dim=args.static_dim, static_model=args.static_model),
    }
    vectors: dict[str, np.ndarray] = {}
    rows: list[dict] = []

    def timed(name: str, fn) -> None:
        la = bench.loadavg()
        w0, c0 = time.perf_counter(), time.process_time()
        v = np.asarray(fn(), dtype=np.float32)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        vectors[name] = v
        rows.append({"embedder": name, "n_docs": len(texts), "dim": v.shape[1], "seconds": round(wall, 2),
                     "docs_per_s": round(len(texts) / wall, 1), "docs_per_cpu_s": round(len(texts) / cpu, 1),
                     "load_before": round(la, 2), "load_after": round(bench.loadavg(), 2)})
        print(f"{name:10s} {rows[-1]['docs_per_s']:8.1f} docs/s {rows[-1]['docs_per_cpu_s']:8.1f} docs/cpu-s "
              f"load {la:.1f}", flush=True)

    model = warm_model(texts)
    timed("plain", lambda: plain(model, texts))
    for name, cfg in configs.items():
        t0 = time.perf_counter()
        emb = make_embedder(cfg)  # builds (or loads) the artifact: not part of docs/s
        setup_s = round(time.perf_counter() - t0, 1)
        emb.encode(texts[:16])
        timed(name, lambda: emb.encode(texts).embeddings)
        rows[-1].update(artifact=getattr(emb, "artifact", ""), setup_s=setup_s)

    ref = vectors["torch"]
    n = len(ref)
    rng = np.random.default_rng(1)
    rnd = [np.sort(rng.choice(n, args.budget, replace=False)) for _ in range(10)]
    sel_cfg = {"lam": 0.0, "standardize": False, "steps": args.steps, "group_size": 64, "batch_ratio": 1.0,
               "history_every": 1000, "final": "topk"}
    seeds = list(range(args.seeds))
    selections: dict[str, dict[str, list[np.ndarray]]] = {}
    noise: dict[str, list[float]] = {}
    for name, v in vectors.items():
        selections[name] = {}
        for div in ("pws", "fl"):
            selections[name][div] = [sel_api.select("datamask", quality=np.zeros(n), embeddings=v, budget=args.budget,
                                                    config={**sel_cfg, "diversity": div}, seed=seed).indices
                                     for seed in seeds]
        semdedup = sel_api.select("semdedup", quality=np.zeros(n), embeddings=v, budget=int(0.9 * n),
                                  config={"n_clusters": 50}, seed=0)
        selections[name]["semdedup_removed"] = np.setdiff1d(np.arange(n), semdedup.indices)

    fl_ref = lambda e, q, i: facility_location(e, q, i, reference_size=n)  # noqa: E731
    judges = {"pws": pairwise_similarity, "fl": fl_ref}

    def shares(name: str, div: str, shift: int = 0) -> list[float]:
        """Per seed: the share of MiniLM's own gain (its selection with the same seed) that ``name``'s
        selection with seed + ``shift`` keeps."""
        mine, own = selections[name][div], selections["torch"][div]
        return [gain_share(ref, mine[(i + shift) % len(seeds)], own[i], rnd, judges[div]) for i in range(len(seeds))]

    def mean_se(values: list[float]) -> tuple[float, float]:
        v = np.asarray(values, dtype=float)
        return round(float(v.mean()), 4), round(float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else 0.0, 4)

    for div in judges:  # the noise floor: MiniLM's own selection from another seed
        noise[div] = list(mean_se(shares("torch", div, shift=1))) if len(seeds) > 1 else [float("nan"), 0.0]
    print("noise floor (MiniLM, another seed):", noise, flush=True)
    ref_pairs = {t: top_pairs(ref, threshold=t) for t in (0.8, 0.9)}
    # the Edu head trained on these documents' own annotations (not the shared reference heads, which are
    # trained in one embedding space): ROC-AUC on their held-out human labels
    scoring_cfg = ScoringConfig(raters=["edu"])
    scoring_cfg = replace(scoring_cfg, training=replace(scoring_cfg.training, source="corpus"))
    for row in rows:
        name, v = row["embedder"], vectors[row["embedder"]]
        if v.shape[1] == ref.shape[1]:
            d = 1.0 - (v * ref).sum(1)
            row["max_1_minus_cos"], row["mean_1_minus_cos"] = float(d.max()), float(d.mean())
        else:
            row["max_1_minus_cos"] = row["mean_1_minus_cos"] = float("nan")
        for div in judges:  # mean over seeds, with its standard error
            row[f"{div}_gain_share"], row[f"{div}_gain_share_se"] = mean_se(shares(name, div))
            row[f"{div}_gain_share_minilm_other_seed"], row[f"{div}_gain_share_minilm_other_seed_se"] = noise[div]
        row["selection_seeds"] = len(seeds)
        for t, pairs in ref_pairs.items():
            mine = top_pairs(v, threshold=t)
            row[f"ref_pairs@cos>={t}"] = len(pairs)
            row[f"dup_recall@cos>={t}"] = round(len(mine & pairs) / max(len(pairs), 1), 4)
            row[f"dup_precision@cos>={t}"] = round(len(mine & pairs) / max(len(mine), 1), 4)
            row[f"dup_recall@K(cos>={t})"] = round(len(top_pairs(v, k=len(pairs)) & pairs) / max(len(pairs), 1), 4)
        removed_ref = selections["torch"]["semdedup_removed"]
        row["semdedup_removed_recall"] = round(
            len(np.intersect1d(selections[name]["semdedup_removed"], removed_ref)) / max(len(removed_ref), 1), 4)
        res = score_corpus(docs, scoring_cfg, embeddings=v)
        row["edu_roc_auc"] = round(float(res.metrics["roc_auc/edu"]), 4)
        row["edu_n_eval"] = int(res.metrics["roc_auc/n_eval"])
        print({k: row[k] for k in row if "gain" in k or "recall" in k or "auc" in k or "cos" in k}, flush=True)
    plain_rate = next((r["docs_per_s"] for r in rows if r["embedder"] == "plain"), float("nan"))
    plain_cpu = next((r["docs_per_cpu_s"] for r in rows if r["embedder"] == "plain"), float("nan"))
    for row in rows:
        row["speedup_vs_plain"] = round(row["docs_per_s"] / plain_rate, 2)
        row["cpu_speedup_vs_plain"] = round(row["docs_per_cpu_s"] / plain_cpu, 2)
        row.update(cpus=os.cpu_count(), torch_threads=2, python=platform.python_version(),
                   budget=args.budget, datamask_steps=args.steps)

    # the numeric cells as MLflow metrics <embedder>_<column> (names made MLflow-safe)
    metrics = {re.sub(r"[^0-9A-Za-z_\-. /:]", "_", f"{r['embedder']}_{k}".replace(">=", "_ge_")): float(v)
               for r in rows for k, v in r.items()
               if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)}
    bench.write_result(rows, args.out.with_suffix(".csv"), plot=lambda _, png: plot_backends(
        args.out.with_suffix(".csv"), png), log=None if args.no_mlflow else dict(
        name="embedding_backends", params={**vars(args), "out": str(args.out)}, metrics=metrics,
        tags={"area": "embedding"}))
    print(pd.read_csv(args.out.with_suffix(".csv")).T.to_string())


def plot_backends(csv_path: Path, png_path: Path) -> None:
    df = pd.read_csv(csv_path)
    with bench.figure(png_path, 1, 2, figsize=(13, 4.5), dpi=120) as (fig, axes):
        ax = axes[0]
        ax.barh(df["embedder"][::-1], df["docs_per_s"][::-1], color="#1f77b4", label="wall docs/s")
        ax.barh(df["embedder"][::-1], df["docs_per_cpu_s"][::-1], color="none", edgecolor="k", label="docs / CPU-s")
        ax.set_xscale("log")
        for i, (v, c) in enumerate(zip(df["docs_per_s"][::-1], df["docs_per_cpu_s"][::-1])):
            ax.text(max(v, c), i, f" {v:.0f} / {c:.0f}", va="center", fontsize=8)
        ax.set_xlabel(f"documents/s (log), {int(df['n_docs'].iloc[0])} corpus docs, {int(df['cpus'].iloc[0])} cores, "
                      f"load {df['load_before'].min():.1f}-{df['load_after'].max():.1f}")
        ax.legend(fontsize=8)
        ax = axes[1]
        keys = ["pws_gain_share", "fl_gain_share", "edu_roc_auc", "dup_recall@K(cos>=0.8)", "semdedup_removed_recall"]
        x = np.arange(len(keys))
        width = 0.8 / len(df)
        for i, (_, r) in enumerate(df.iterrows()):
            ax.bar(x + i * width, [r[k] for k in keys], width, label=r["embedder"])
        ax.set_xticks(x + 0.4 - width / 2, [k.replace("_", "\n", 1) for k in keys], fontsize=7)
        ax.set_ylim(0, 1.1)
        ax.axhline(1.0, color="grey", lw=0.5)
        ax.set_title("selection agreement (judged under MiniLM vectors)", fontsize=9)
        ax.legend(fontsize=7)


def main() -> None:
    args = bench.commands(
        __doc__, throughput=dict(n=(1000, "documents per run"), out=bench.RESULTS / "embedding_throughput",
                                 repeats=(1, "interleaved repeats of every configuration")),
        backends=dict(n=2000, budget=200, steps=(300, "DataMask steps per selection"),
                      seeds=(5, "DataMask seeds per selection (gain shares: mean +- SE)"),
                      static_model=("models/static-tokenlearn-minilm", "the static_trained row's model folder"),
                      static_dim=(256, "its width"), out=bench.RESULTS / "embedding_backends",
                      no_mlflow=(False, "do not log the results to MLflow"))).parse_args()
    throughput(args) if args.command == "throughput" else backends(args)


if __name__ == "__main__":
    main()
