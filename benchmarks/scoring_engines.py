"""Scoring engines side by side: in-process vs Ray Data, same documents, same fitted raters.

The bundled corpus (16,513 real documents) is replicated to ``--n`` rows
(fresh ids; replicated real text is fine for timing). The fastText raters are
fitted once on a few hundred corpus documents; then each workload is scored by

- ``inprocess``: the fitted raters' ``score`` and ``RedPajamaSignals`` on the whole
  list in this process, as ``score_corpus`` does with ``scoring.engine=inprocess``;
- ``ray``: ``curation.scoring.ray_engine.score_with_ray`` on a local Ray instance
  (``num_cpus`` = all cores; 1 actor and 2 actors x 0.5 CPU), end to end: ``ray.init``,
  models and input shards written, the map_batches job, the parquet read back and the id
  join. ``job_seconds`` is the map_batches + write part alone. The in-process engine is
  one process on one core; 2 Ray actors are two processes, so they can use the second
  core: the 1-actor row separates Ray's overhead from that parallelism.

Workloads (run interleaved per repeat, so a neighbour's load hits both engines):

- ``fasttext_dclm`` on ``--n`` documents (the issue's "200k documents by fastText");
- ``fasttext_dclm + fasttext_ultrafineweb + 11 signals`` on ``--n-full`` documents
  (the full text-rater set is ~10 ms/document on one core, so fewer rows).

    nice -n 10 .venv/bin/python benchmarks/scoring_engines.py --n 200000 --n-full 16513

Writes benchmarks/results/scoring_engines.csv (one row per workload x engine x
repeat, with the 1-minute load average) and .png (seconds per engine, Ray / in-process ratio).
The scores of both engines are compared (max |difference|) in every row.
fastText hash tables use ``--bucket`` buckets (default 200k) instead of the recipes' 2M,
so two Ray actors plus the driver do not hold 3 x 2.8 GB of models; scoring speed
does not depend on it.
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

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def load_corpus(n: int) -> pd.DataFrame:
    """The bundled corpus replicated to ``n`` rows with unique ids (``id``, ``text``, ``extra``, ``quality_label``)."""
    files = sorted(glob.glob(str(ROOT / "data" / "01_raw" / "corpus" / "corpus-*.parquet")))
    df = pd.concat([pd.read_parquet(f, columns=["id", "text", "extra", "quality_label"]) for f in files],
                   ignore_index=True)
    rows = np.arange(n) % len(df)
    out = df.iloc[rows].reset_index(drop=True)
    out["id"] = [f"{doc}#{i // len(df)}" for i, doc in zip(range(n), out["id"])]
    return out


def fit_raters(corpus: pd.DataFrame, bucket: int) -> dict:
    from curation.scoring import FastTextConfig, FastTextRater, UltraFineWebConfig, build_training_set

    ts = build_training_set(corpus.head(4000))
    return {
        "fasttext_dclm": FastTextRater(FastTextConfig(bucket=bucket)).fit(ts.positives, ts.negatives),
        "fasttext_ultrafineweb": FastTextRater(UltraFineWebConfig(bucket=bucket)).fit(ts.positives, ts.negatives),
    }


def score_inprocess(texts: list[str], raters: dict, signals: bool) -> pd.DataFrame:
    from curation.scoring import RedPajamaSignals

    out = {name: rater.score(texts) for name, rater in raters.items()}
    frame = pd.DataFrame(out)
    if signals:
        frame = pd.concat([frame, RedPajamaSignals().score_frame(texts)], axis=1)
    return frame


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000, help="documents of the fastText-DCLM workload")
    ap.add_argument("--n-full", type=int, default=16_513, help="documents of the fastText x2 + signals workload")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--bucket", type=int, default=200_000, help="fastText hash buckets")
    ap.add_argument("--actors", default="1,2", help="comma-separated actor pool sizes, one Ray row each")
    ap.add_argument("--actor-num-cpus", type=float, default=0.5)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--out", default=str(RESULTS / "scoring_engines"), help="output path without suffix")
    ap.add_argument("--plot-only", action="store_true", help="redraw the PNG from an existing CSV")
    args = ap.parse_args()
    out = Path(args.out)
    if args.plot_only:
        plot(out.with_suffix(".csv"), out.with_suffix(".png"))
        return

    from curation.scoring.ray_engine import RayConfig, score_with_ray

    corpus = load_corpus(max(args.n, args.n_full))
    raters = fit_raters(corpus, args.bucket)
    workloads = {
        "fasttext_dclm": (args.n, {"fasttext_dclm": raters["fasttext_dclm"]}, False),
        "fasttext_dclm+ultrafineweb+11 signals": (args.n_full, raters, True),
    }
    pools = [int(a) for a in args.actors.split(",")]
    rows = []
    for rep in range(args.repeats):
        for workload, (n, chosen, signals) in workloads.items():
            docs = corpus.head(n)[["id", "text"]]
            texts = docs["text"].tolist()
            t0 = time.perf_counter()
            reference = score_inprocess(texts, chosen, signals)
            inproc = time.perf_counter() - t0
            load_inproc = os.getloadavg()[0]
            common = {"workload": workload, "repeat": rep, "n_docs": n, "cpus": os.cpu_count(),
                      "python": platform.python_version()}
            rows.append({**common, "engine": "inprocess", "seconds": round(inproc, 2), "job_seconds": round(inproc, 2),
                         "docs_per_s": round(n / inproc, 1), "ratio_to_inprocess": 1.0,
                         "max_abs_diff_vs_inprocess": 0.0, "load_avg_1m": round(load_inproc, 2)})
            print(f"[{rep}] {workload:40s} n={n:7d} inprocess {inproc:7.1f}s  load={load_inproc:.1f}", flush=True)
            for actors in pools:
                # blocks: 4 per actor, so every actor gets work (Ray's own blocks are ~128 MiB)
                cfg = RayConfig(actors=actors, actor_num_cpus=args.actor_num_cpus, batch_size=args.batch_size,
                                repartition=4 * actors)
                t0 = time.perf_counter()
                frame, timing = score_with_ray(docs, chosen, cfg, signals=signals)
                ray_total = time.perf_counter() - t0
                diff = float(np.nanmax(np.abs(frame[reference.columns].to_numpy() - reference.to_numpy())))
                rows.append({**common, "engine": f"ray {actors} actor(s) x {args.actor_num_cpus} CPU",
                             "seconds": round(ray_total, 2), "job_seconds": round(timing["job_seconds"], 2),
                             "docs_per_s": round(n / ray_total, 1), "ratio_to_inprocess": round(ray_total / inproc, 3),
                             "max_abs_diff_vs_inprocess": diff, "load_avg_1m": round(os.getloadavg()[0], 2)})
                print(f"[{rep}] {workload:40s} n={n:7d} ray x{actors} {ray_total:7.1f}s (job {timing['job_seconds']:.1f}s)"
                      f"  ratio {ray_total / inproc:.2f}x  diff={diff:.1e}  load={os.getloadavg()[0]:.1f}", flush=True)

    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        writer.writeheader()
        writer.writerows(rows)
    plot(out.with_suffix(".csv"), out.with_suffix(".png"))
    print(f"wrote {out.with_suffix('.csv')} and {out.with_suffix('.png')}")


def plot(csv_path: Path, png_path: Path) -> None:
    """Median seconds per workload and engine; each Ray bar labelled with its ratio to in-process."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frame = pd.read_csv(csv_path)
    med = frame.groupby(["workload", "engine"], sort=False)[["seconds", "job_seconds", "n_docs"]].median()
    workloads = list(dict.fromkeys(frame["workload"]))
    engines = list(dict.fromkeys(frame["engine"]))
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / len(engines)
    for j, engine in enumerate(engines):
        for i, workload in enumerate(workloads):
            sec = med.loc[(workload, engine), "seconds"]
            x = i + (j - (len(engines) - 1) / 2) * width
            ax.bar(x, sec, width, color=["#888888", "#9ecae1", "#1f77b4", "#08519c"][j % 4], label=engine if i == 0 else None)
            base = med.loc[(workload, engines[0]), "seconds"]
            note = f"{sec:.1f}s" if j == 0 else f"{sec:.1f}s\n{sec / base:.2f}x\n(job {med.loc[(workload, engine), 'job_seconds']:.1f}s)"
            ax.text(x, sec, note, ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(workloads)))
    ax.set_xticklabels([f"{w}\n({int(med.loc[(w, engines[0]), 'n_docs']):,} docs)" for w in workloads])
    ax.set_ylabel("seconds (lower is better)")
    ax.set_ylim(0, ax.get_ylim()[1] * 1.25)
    n_rep = int(frame["repeat"].max()) + 1
    ax.set_title(f"Scoring engines on {int(frame['cpus'].iloc[0])} cores: in-process vs Ray Data "
                 f"(median of {n_rep} run(s); Ray end to end incl. ray.init)", fontsize=10)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)


if __name__ == "__main__":
    main()
