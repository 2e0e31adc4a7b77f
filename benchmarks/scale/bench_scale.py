"""Per-shard stages at 100k / 300k (/ 1M) documents: wall time, docs/s per core and peak RSS
of the whole process tree, local engine vs Ray vs today's whole-frame code.

Corpus: ``make_corpus.py`` (the bundled corpus REPLICATED with new ids: for scale only); each measurement in
a fresh child process whose process tree's RSS is polled (``process_tree.py``; Ray's figure is an upper bound).
Stages: ``ingest`` (validation + cross-shard duplicate ids; ``whole_frame``: the ingest before, at the smallest
size) and ``signals`` (the 11 RedPajama signals per shard, on ``--signals-docs`` documents).

Run only under the benchmark lock:

    flock /tmp/bench.lock .venv/bin/python benchmarks/scale/bench_scale.py --sizes 100000 300000

Writes benchmarks/results/scale.csv (+ .png) and logs them to MLflow (experiment ``benchmarks``).
"""

from __future__ import annotations

import os
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402
from _driver import loadavg  # noqa: E402
from make_corpus import make_corpus  # noqa: E402
from process_tree import run_json  # noqa: E402

CHILD = textwrap.dedent("""
    import json, sys, time
    from functools import partial
    from pathlib import Path
    stage, engine, corpus, work, limit = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
    import pandas as pd
    from curation.data import ValidationConfig, ValidationReport, validate_documents
    from curation.datasets import CorpusShardsDataset
    from curation.shards import EngineConfig, ShardResult, ShardTask, run_shards, ShardWriter, sum_stats
    from curation.shards.executor import cpus_available
    from curation.data.ingest import ingest_shards
    raw = CorpusShardsDataset(path=corpus).load()
    tasks = [ShardTask(k, v) for k, v in raw.items()]
    if limit:
        tasks = tasks[:limit]
    if engine == "ray":
        import ray
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    # local-wN: the local engine with N shard worker processes (data.workers=N), as in bench_chain.py;
    # local_workers (the name of earlier result rows): one per CPU
    if engine.startswith("local-w") or engine == "local_workers":
        n = cpus_available() if engine == "local_workers" else int(engine[len("local-w"):])
        ENGINE = EngineConfig(engine="local", workers=n, progress=False)
    else:
        ENGINE = EngineConfig(engine=engine, progress=False)
    start = time.perf_counter()
    if stage == "ingest" and engine == "whole_frame":
        # The ingest node as it was: every shard kept, one set of every id, pd.concat, one file each.
        from curation.data.ingest import category
        seen, parts, rejects, report = set(), [], [], ValidationReport()
        for t in tasks:
            kept, rejected, r = validate_documents(t.load(), ValidationConfig(), source_name=t.name, seen_ids=seen)
            parts.append(kept); rejects.append(rejected); report = report + r
        docs = pd.concat(parts, ignore_index=True)
        docs["category"] = category(docs["extra"])
        docs.to_parquet(Path(work) / "documents.parquet", index=False)
        pd.concat(rejects, ignore_index=True).to_parquet(Path(work) / "rejected.parquet", index=False)
        rows, digest = len(docs), ""
    elif stage == "ingest":
        res = ingest_shards(tasks, ValidationConfig(), work_dir=work, engine=ENGINE)
        rows, digest = len(res.documents), res.documents.fingerprint
    else:
        raise SystemExit(stage)
    print(json.dumps({"rows": rows, "seconds": time.perf_counter() - start, "digest": digest}))
""")

SIGNALS_CHILD = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    engine, corpus, work, limit = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    import pandas as pd
    from curation.datasets import CorpusShardsDataset
    from curation.scoring.redpajama import RedPajamaSignals
    from curation.shards import EngineConfig, ShardTask, run_shards, ShardWriter
    from curation.shards.executor import cpus_available
    from curation.scoring.stages import signals_shard
    raw = CorpusShardsDataset(path=corpus).load()
    tasks = [ShardTask(k, v) for k, v in raw.items()][:limit]
    if engine == "ray":
        import ray
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    if engine.startswith("local-w") or engine == "local_workers":  # as in CHILD
        ENGINE = EngineConfig(engine="local", progress=False,
                              workers=cpus_available() if engine == "local_workers" else int(engine[len("local-w"):]))
    elif engine != "whole_frame":
        ENGINE = EngineConfig(engine=engine, progress=False)
    start = time.perf_counter()
    if engine == "whole_frame":
        docs = pd.concat([t.load() for t in tasks], ignore_index=True)
        frame = RedPajamaSignals().score_frame(docs["text"].tolist())
        frame.insert(0, "id", docs["id"].to_numpy())
        rows, digest = len(frame), ""
    else:
        run_shards(signals_shard, tasks, {"signals": (work, "frame")}, ENGINE)
        w = ShardWriter(work).finalize([t.name for t in tasks], stage="signals")
        rows, digest = w.rows, w.fingerprint
    print(json.dumps({"rows": rows, "seconds": time.perf_counter() - start, "digest": digest}))
""")


def cores_of(engine: str) -> int:
    """Cores an engine uses: Ray's local instance 2, the local engine's workers the CPUs available."""
    if engine == "ray":
        return 2
    if engine.startswith("local-w"):
        return min(int(engine[len("local-w"):]), len(os.sched_getaffinity(0)))
    return len(os.sched_getaffinity(0)) if engine == "local_workers" else 1


def main() -> None:
    # local: one shard at a time in the driver (data.workers=1); local-wN: N worker processes (bench_chain's name)
    args = bench.parser(__doc__, sizes=[100_000, 300_000], engines=["local", "ray"],
                        signals_docs=(8_000, "documents for the signals stage (0 = skip)"),
                        corpus_dir=Path(tempfile.gettempdir()) / "scale_corpus", out=bench.RESULTS / "scale.csv",
                        mlflow=True, no_whole_frame=(False, "skip the whole-frame baseline (it holds the corpus)")
                        ).parse_args()

    rows: list[dict] = []

    def record(stage: str, engine: str, n: int, result: dict, cores: int, before: float) -> None:
        row = {"stage": stage, "engine": engine, "docs": result["rows"], "corpus_docs": n,
               "seconds": round(result["seconds"], 2),
               "docs_per_s_per_core": round(result["rows"] / result["seconds"] / cores, 1),
               "peak_rss_mb": round(result["peak_rss_mb"], 1), "cores": cores, "digest": result["digest"],
               "load_before": before, "load_after": loadavg()}
        rows.append(row)
        print(row, flush=True)

    for i, n in enumerate(args.sizes):
        corpus = make_corpus(n, args.corpus_dir / f"{n}")
        engines = list(args.engines) + (["whole_frame"] if i == 0 and not args.no_whole_frame else [])
        for engine in engines:
            with tempfile.TemporaryDirectory(dir=args.corpus_dir) as work:
                before = loadavg()
                result = run_json([CHILD, "ingest", engine, str(corpus), work, "0"], RAY_DEDUP_LOGS="0")
                record("ingest", engine, n, result, cores_of(engine), before)
    if args.signals_docs:
        # Shards of signals_docs / 4 rows, so two Ray workers have shards to share.
        corpus = make_corpus(args.signals_docs, args.corpus_dir / f"signals{args.signals_docs}",
                             rows_per_shard=max(1, args.signals_docs // 4))
        shards = 4
        for engine in ["whole_frame", *args.engines]:
            with tempfile.TemporaryDirectory(dir=args.corpus_dir) as work:
                before = loadavg()
                result = run_json([SIGNALS_CHILD, engine, str(corpus), work, str(shards)], RAY_DEDUP_LOGS="0")
                record("signals", engine, args.signals_docs, result, cores_of(engine), before)

    metrics = {f"{r['stage']}_{r['engine']}_{r['corpus_docs']}_{k}": r[k] for r in rows
               for k in ("seconds", "docs_per_s_per_core", "peak_rss_mb")}
    bench.write_result(rows, args.out, plot=plot, log=None if args.no_mlflow else dict(
        name="scale_shards", metrics=metrics,
        params={"sizes": args.sizes, "engines": args.engines, "signals_docs": args.signals_docs}))


def plot(rows: list[dict], path: Path) -> None:
    with bench.figure(path, 1, 2, figsize=(11, 4)) as (fig, axes):
        for engine, marker in (("local", "o"), ("ray", "s"), ("whole_frame", "^")):
            sel = [r for r in rows if r["stage"] == "ingest" and r["engine"] == engine]
            if sel:
                x = [r["corpus_docs"] for r in sel]
                axes[0].plot(x, [r["peak_rss_mb"] for r in sel], marker=marker, label=engine)
                axes[1].plot(x, [r["docs_per_s_per_core"] for r in sel], marker=marker, label=engine)
        axes[0].set(xlabel="documents (replicated corpus)", ylabel="peak RSS of the process tree (MB)",
                    title="ingest: memory", xscale="log")
        axes[1].set(xlabel="documents (replicated corpus)", ylabel="docs/s per core", title="ingest: throughput",
                    xscale="log")
        for ax in axes:
            ax.legend()


if __name__ == "__main__":
    main()
