"""Embedding throughput: our SentenceEmbedder vs a plain SentenceTransformer.encode.

Same real corpus texts, same model, one process, configurations run
interleaved (repeat r runs every configuration once before repeat r+1), so a
neighbour's load on the machine hits all of them alike. One CSV row per
(configuration, repeat) plus a bar chart of the median docs/s:

    .venv/bin/python benchmarks/embedding/bench_embed.py --n 1000 --repeats 2

Writes benchmarks/results/embedding_throughput.csv and .png. Each row also
records the largest deviation from the plain vectors (1 - cosine), so a
faster setting that changes the embeddings shows it.

The ONNX backend of sentence-transformers needs ``onnxruntime`` (and
``optimum``), which are not installed; that row is reported as skipped.
"""

from __future__ import annotations

import argparse
import csv
import glob
import os
import platform
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def load_texts(n: int, seed: int = 0) -> list[str]:
    """``n`` real documents drawn uniformly from the bundled corpus (all lengths and sources)."""
    files = sorted(glob.glob(str(ROOT / "data" / "01_raw" / "corpus" / "corpus-*.parquet")))
    df = pd.concat([pd.read_parquet(f, columns=["text"]) for f in files], ignore_index=True)
    idx = np.random.default_rng(seed).choice(len(df), size=min(n, len(df)), replace=False)
    return df["text"].iloc[np.sort(idx)].tolist()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="documents per run")
    ap.add_argument("--repeats", type=int, default=1, help="interleaved repeats of every configuration")
    ap.add_argument("--out", default=str(RESULTS / "embedding_throughput"), help="output path without suffix")
    ap.add_argument("--plot-only", action="store_true", help="redraw the PNG from an existing CSV")
    args = ap.parse_args()
    if args.plot_only:
        plot(Path(args.out).with_suffix(".csv"), Path(args.out).with_suffix(".png"))
        return

    import torch

    from curation.embedding import EmbedderConfig, SentenceEmbedder, load_sentence_model

    texts = load_texts(args.n)
    model = load_sentence_model()
    model.encode(texts[:16])  # warm-up: first-call allocations are not throughput

    def plain(batch_size: int):
        def run():
            t0 = time.perf_counter()
            v = model.encode(texts, batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False)
            return v, time.perf_counter() - t0

        return run

    def ours(**kw):
        emb = SentenceEmbedder(EmbedderConfig(show_progress=False, **kw), model=model)

        def run():
            r = emb.encode(texts)
            return r.embeddings, r.seconds

        return run

    configs = {
        "plain encode bs32 (library default)": plain(32),
        "plain encode bs64": plain(64),
        "ours default (bs64, sort, 2 threads, max_chars 4096)": ours(),
        "ours bs32": ours(batch_size=32),
        "ours bs128": ours(batch_size=128),
        "ours no token sort": ours(sort_by_length=False),
        "ours no char pre-cut": ours(max_chars=0),
        "ours 1 thread": ours(num_threads=1),
        "ours int8 dynamic quantisation (opt-in)": ours(quantize="int8"),
    }
    try:
        import onnxruntime  # noqa: F401

        onnx_note = "onnxruntime present but the ONNX export needs a hub download; not run"
    except ImportError:
        onnx_note = "skipped: onnxruntime not installed (no extra installs)"

    rows = []
    reference = None
    for rep in range(args.repeats):
        for name, run in configs.items():
            vecs, seconds = run()
            vecs = np.asarray(vecs, dtype=np.float32)
            if reference is None:
                reference = vecs
            dev = float(1.0 - (vecs * reference).sum(1).min())
            rows.append(
                {
                    "config": name,
                    "repeat": rep,
                    "n_docs": len(texts),
                    "seconds": round(seconds, 3),
                    "docs_per_s": round(len(texts) / seconds, 2),
                    "max_1_minus_cos_vs_plain": dev,
                    "torch_threads_default": torch.get_num_threads(),
                    "cpus": os.cpu_count(),
                    "load_avg_1m": round(os.getloadavg()[0], 2),
                    "python": platform.python_version(),
                }
            )
            print(f"[{rep}] {name:55s} {rows[-1]['docs_per_s']:8.2f} docs/s  dev={dev:.2e}  load={rows[-1]['load_avg_1m']}", flush=True)
    rows.append({"config": "onnx backend", "repeat": 0, "n_docs": len(texts), "seconds": "", "docs_per_s": "", "max_1_minus_cos_vs_plain": onnx_note})

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)

    plot(out.with_suffix(".csv"), out.with_suffix(".png"))
    print(f"wrote {out.with_suffix('.csv')} and {out.with_suffix('.png')}")


def plot(csv_path: Path, png_path: Path) -> None:
    """Bar chart of the median docs/s per configuration, ratio to the first (plain) row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frame = pd.read_csv(csv_path)
    frame = frame[pd.to_numeric(frame["docs_per_s"], errors="coerce").notna()].astype({"docs_per_s": float})
    med = frame.groupby("config", sort=False)["docs_per_s"].median()
    base = med.iloc[0]
    n_rep = int(frame["repeat"].max()) + 1
    fig, ax = plt.subplots(figsize=(11, 5))
    colors = ["#888888" if c.startswith("plain") else "#1f77b4" for c in med.index]
    ax.barh(med.index[::-1], med.values[::-1], color=colors[::-1])
    for i, v in enumerate(med.values[::-1]):
        ax.text(v, i, f" {v:.1f} ({v / base:.2f}x)", va="center", fontsize=8)
    ax.set_xlabel(
        f"documents / second (median of {n_rep} interleaved run(s), {int(frame['n_docs'].iloc[0])} real corpus docs,\n"
        f"all-MiniLM-L6-v2 on CPU, {int(frame['cpus'].iloc[0])} cores, 1-min load avg "
        f"{frame['load_avg_1m'].min():.1f}-{frame['load_avg_1m'].max():.1f})"
    )
    ax.set_title("Embedding throughput: ours vs plain SentenceTransformer.encode (grey)")
    ax.set_xlim(0, med.max() * 1.3)
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
