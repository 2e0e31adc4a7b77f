"""Embedding throughput: our SentenceEmbedder vs a plain SentenceTransformer.encode.

Same real corpus texts, same model, one process, configurations interleaved (repeat r runs each once before
repeat r+1); one CSV row per (configuration, repeat) with the largest deviation from the plain vectors, and a
bar chart of the median docs/s. Writes benchmarks/results/embedding_throughput.csv and .png.

    .venv/bin/python benchmarks/embedding/bench_embed.py --n 1000 --repeats 2
"""

from __future__ import annotations

import os
import platform
import time
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402


def main() -> None:
    args = bench.parser(__doc__, n=(1000, "documents per run"), repeats=(1, "interleaved repeats of every configuration"),
                        out=bench.RESULTS / "embedding_throughput",
                        plot_only=(False, "redraw the PNG from an existing CSV")).parse_args()
    if args.plot_only:
        plot(pd.read_csv(args.out.with_suffix(".csv")), args.out.with_suffix(".png"))
        return

    import torch

    from curation.embedding import EmbedderConfig, SentenceEmbedder, load_sentence_model

    texts = bench.sample_texts(args.n)
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
                    "load_avg_1m": round(bench.loadavg(), 2),
                    "python": platform.python_version(),
                }
            )
            print(f"[{rep}] {name:55s} {rows[-1]['docs_per_s']:8.2f} docs/s  dev={dev:.2e}  load={rows[-1]['load_avg_1m']}", flush=True)
    rows.append({"config": "onnx backend", "repeat": 0, "n_docs": len(texts), "seconds": "", "docs_per_s": "", "max_1_minus_cos_vs_plain": onnx_note})

    bench.write_result(rows, args.out.with_suffix(".csv"), plot=lambda _, png: plot(
        pd.read_csv(args.out.with_suffix(".csv")), png))


def plot(frame: pd.DataFrame, png_path: Path) -> None:
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

if __name__ == "__main__":
    main()
