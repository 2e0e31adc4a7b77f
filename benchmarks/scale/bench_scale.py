"""The scale benchmarks, one sub-command each (their findings: docs/scaling.md).

Each measurement runs in a fresh process whose process tree's RSS is polled (``process_tree.py``; Ray's figure is
an upper bound), with the load average before and after; ``shards``, ``chain`` and ``datatrove`` on the REPLICATED
corpus (``make_corpus.py``: the bundled corpus repeated with new ids, for time and memory only). Run alone, under
the benchmark lock; each writes its CSV (+ .png) under benchmarks/results and logs both to MLflow.

``shards`` (scale.csv): per-shard stages (``ingest``; ``signals``, the 11 RedPajama signals, on ``--signals-docs``
documents): wall time, docs/s per core and peak RSS, local engine vs Ray vs the whole-frame code before them.

    flock /tmp/bench.lock .venv/bin/python benchmarks/scale/bench_scale.py shards --sizes 100000 300000

``chain`` (scale_chain.csv; issue #14): the whole default chain as a user runs it, ``curate pipeline=<stage>`` for
ingest -> scoring -> pruning -> selection, each stage its own process: wall time, docs/s per core, peak RSS.

    flock /tmp/bench.lock .venv/bin/python benchmarks/scale/bench_scale.py chain --sizes 100000 300000 1000000

``datatrove`` (datatrove_side_by_side.csv, its .png the ratio curation/datatrove per stage; issue #22 item 5):
side by side with datatrove, the same parquet shards (one datatrove task each), the same number of processes,
two stages, each run as a user runs it (a fresh process, start-up included): ``read_write`` (read the shards ->
write them) and ``fasttext`` (read -> the same fastText model's P(``__label__hq``) per document -> write).
curation: ``curation_side.py``; datatrove: ``datatrove_side.py`` in its own environment (``--dt-python``). Per
run: wall and engine seconds, peak RSS; the two outputs are checked against each other (first repeat).

    flock /tmp/bench.lock .venv/bin/python benchmarks/scale/bench_scale.py datatrove --n 100000 --workers 2

``scoring`` (scoring_shards_vs_frame.csv): scoring and embeddings on ``--shards`` document shards vs the
whole-frame path, on the bundled corpus, each path in a fresh child process (peak RSS: the child's own).

    flock /tmp/bench.lock .venv/bin/python benchmarks/scale/bench_scale.py scoring

``blocks`` (scale/selection_blocks.csv; issue #14): DataMask on N synthetic unit vectors (timing and memory only)
written as sharded ``pruned_scores`` / ``pruned_embeddings``: one block as an independent task (``block_task``)
vs today's in-process ``select('datamask', ...)`` (``--baseline``) and two blocks of N / 2 (``--half-blocks``).
Same seed and config: the DataMask selections' digests must agree. ``--greedy`` (committed with ``--out
.../scale/selection_blocks_greedy.csv``): greedy DiSF streamed from the shards too (``blocks``: its chunks).

    flock /tmp/bench.lock .venv/bin/python benchmarks/scale/bench_scale.py blocks --n 1000000 --steps 5 \\
        --baseline --half-blocks
"""

from __future__ import annotations

import glob
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402
from _driver import ROOT, SCALE, loadavg, loadavg3  # noqa: E402
from make_corpus import make_corpus  # noqa: E402
from process_tree import run_json, run_measured  # noqa: E402


def stage_metrics(rows: list[dict], keys: tuple[str, ...]) -> dict:
    """MLflow metrics ``<stage>_<engine>_<corpus_docs>_<key>`` of the rows' non-empty cells."""
    return {f"{r['stage']}_{r['engine']}_{r['corpus_docs']}_{k}": r[k] for r in rows for k in keys if r[k] != ""}


# --- shards: one stage per child process -----------------------------------------------------------------------

# One stage on one engine (whole_frame: the code before the shards).
CHILD = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    stage, engine, corpus, work, limit = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
    import pandas as pd
    from curation.datasets import CorpusShardsDataset
    from curation.shards import EngineConfig, ShardTask, run_shards, ShardWriter
    if stage == "ingest":
        from curation.data import ValidationConfig, ValidationReport, validate_documents
        from curation.data.ingest import category, ingest_shards
    else:
        from curation.scoring.redpajama import RedPajamaSignals
        from curation.scoring.stages import signals_shard
    tasks = [ShardTask(k, v) for k, v in CorpusShardsDataset(path=corpus).load().items()][:limit or None]
    if engine == "ray":
        import ray
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    if engine.startswith("local-w"):
        ENGINE = EngineConfig(engine="local", progress=False, workers=int(engine[len("local-w"):]))
    elif engine != "whole_frame":
        ENGINE = EngineConfig(engine=engine, progress=False)
    start = time.perf_counter()
    if stage == "ingest" and engine == "whole_frame":
        # The ingest node as it was: every shard kept, one set of every id, pd.concat, one file each.
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
    elif engine == "whole_frame":
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
    """Cores an engine uses: Ray's local instance 2, local-wN N (at most the CPUs available), the others 1."""
    if engine == "ray":
        return 2
    if engine.startswith("local-w"):
        return min(int(engine[len("local-w"):]), len(os.sched_getaffinity(0)))
    return 1


def shards(args) -> None:
    rows: list[dict] = []

    def measure(stage: str, engine: str, n: int, corpus: Path, limit: int) -> None:
        """``stage`` on the first ``limit`` shards of ``corpus`` (0 = all) in a fresh child process."""
        with tempfile.TemporaryDirectory(dir=args.corpus_dir) as work:
            result = run_json(CHILD, stage, engine, corpus, work, limit, RAY_DEDUP_LOGS="0")
        cores = cores_of(engine)
        rows.append({"stage": stage, "engine": engine, "docs": result["rows"], "corpus_docs": n,
                     "seconds": round(result["seconds"], 2),
                     "docs_per_s_per_core": round(result["rows"] / result["seconds"] / cores, 1),
                     "peak_rss_mb": round(result["peak_rss_mb"], 1), "cores": cores, "digest": result["digest"],
                     "load_before": result["load_before"], "load_after": result["load_after"]})
        print(rows[-1], flush=True)

    for i, n in enumerate(args.sizes):
        corpus = make_corpus(n, args.corpus_dir / f"{n}")
        for engine in list(args.engines) + (["whole_frame"] if i == 0 else []):
            measure("ingest", engine, n, corpus, 0)
    if args.signals_docs:
        # Shards of signals_docs / 4 rows, so two Ray workers have shards to share.
        corpus = make_corpus(args.signals_docs, args.corpus_dir / f"signals{args.signals_docs}",
                             rows_per_shard=max(1, args.signals_docs // 4))
        for engine in ["whole_frame", *args.engines]:
            measure("signals", engine, args.signals_docs, corpus, 4)

    bench.write_result(rows, args.out, plot=plot_shards, log=None if args.no_mlflow else dict(
        name="scale_shards", metrics=stage_metrics(rows, ("seconds", "docs_per_s_per_core", "peak_rss_mb")),
        params={"sizes": args.sizes, "engines": args.engines, "signals_docs": args.signals_docs}))


def plot_shards(rows: list[dict], path: Path) -> None:
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


# --- chain: curate, one process per stage ------------------------------------------------------------------

STAGES = ("ingest", "scoring", "pruning", "selection")
# the sharded output of a stage, and the stage whose output a stage reads (its docs: that manifest's rows)
OUTPUT = {"ingest": "data/02_intermediate/{}/documents", "scoring": "data/04_feature/{}/scores",
          "pruning": "data/05_model_input/{}/pruned_scores"}
READS = {"ingest": "ingest", "scoring": "ingest", "pruning": "scoring", "selection": "pruning"}


def manifest(stage: str, namespace: str) -> dict:
    """The manifest of ``stage``'s sharded output ({} if it has none)."""
    path = ROOT / OUTPUT[stage].format(namespace) / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def output_digest(stage: str, namespace: str) -> str:
    """A digest of what the stage made, to compare engines: the manifest fingerprint of its sharded
    output, or for the selection the hash of the selected ids in order."""
    import hashlib

    if stage != "selection":
        return str(manifest(stage, namespace).get("fingerprint", ""))[:16]
    path = ROOT / "data/07_model_output" / namespace / "selected_ids.parquet"
    if not path.is_file():
        return ""
    import pandas as pd

    ids = pd.read_parquet(path, columns=["id"])["id"].astype(str)
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]


# The selection's objective next to a random and the top-k quality subset of the same size (the run's
# ``selection_metrics``, from MLflow), and the DataMask policy's health: a quality regression at scale
# shows up in the CSV, not only a speed one (issue #20).
SELECTION_COLUMNS = {"sel_quality_mean": "selected_quality_mean", "sel_pws": "selected_pairwise_similarity",
                     "random_quality_mean": "selected_random_quality_mean",
                     "random_pws": "selected_random_pairwise_similarity",
                     "topk_quality_mean": "selected_topk_quality_mean",
                     "topk_pws": "selected_topk_pairwise_similarity", "final_entropy_min": "info_final_entropy_min",
                     "returned_shortfall_max": "info_returned_shortfall_max", "blocks_warned": "info_blocks_warned"}


def selection_objectives(experiment: str) -> dict:
    """SELECTION_COLUMNS of the latest run of ``experiment`` (the selection stage just run)."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{ROOT}/mlruns/mlflow.db")
    found = client.get_experiment_by_name(experiment)
    runs = client.search_runs([found.experiment_id], order_by=["start_time DESC"], max_results=1) if found else []
    from curation.tracking.metric_names import unstaged

    metrics = {unstaged(k): v for k, v in runs[0].data.metrics.items()} if runs else {}  # selection/x -> x
    return {col: round(metrics[key], 5) if key in metrics else "" for col, key in SELECTION_COLUMNS.items()}


def chain(args) -> None:
    rows = bench.read_rows(args.out) if args.append and args.out.is_file() else []
    curate = str(Path(sys.executable).with_name("curate"))
    for n in args.sizes:
        corpus = make_corpus(n, args.corpus_dir / f"{n}")
        for engine in args.engines:
            namespace = f"bench_chain/{n}-{engine}"
            cache = Path(tempfile.mkdtemp(prefix=f"chain-cache-{n}-{engine}-", dir=args.corpus_dir))
            base_engine, _, workers = engine.partition("-w")
            common = [f"data.path={corpus}", f"data.engine={base_engine}", f"run.namespace={namespace}",
                      f"cache.dir={cache}", f"embedding={args.embedding}", "selection=datamask",
                      f"selection.steps={args.steps}", "selection.block_size=1000000",
                      "tracking.experiment_name=bench_chain"]
            if workers:
                common.append(f"data.workers={int(workers)}")
            common += args.override
            if args.raters != "all":
                common.append(f"scoring.raters=[{args.raters}]")
            common += [f"scoring.fasttext_dclm.thread={args.fasttext_threads}",
                       f"scoring.fasttext_ultrafineweb.thread={args.fasttext_threads}"]
            env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "true", "HF_HUB_OFFLINE": "1",
                   "TRANSFORMERS_OFFLINE": "1", "MPLBACKEND": "Agg", "RAY_DEDUP_LOGS": "0"}
            for stage in STAGES:
                before = loadavg()
                result = run_measured([curate, f"pipeline={stage}", *common], cwd=ROOT, env=env,
                                      stderr=subprocess.STDOUT)
                docs = int(manifest(READS[stage], namespace).get("rows", -1))
                cores = 2
                row = {"stage": stage, "engine": engine, "corpus_docs": n, "docs": docs,
                       "seconds": round(result.seconds, 1),
                       "docs_per_s_per_core": round(docs / result.seconds / cores, 1) if docs > 0 else "",
                       "peak_rss_mb": round(result.peak_rss_mb, 1), "cores": cores,
                       "load_before": before, "load_after": loadavg(),
                       "output_digest": output_digest(stage, namespace),
                       **(selection_objectives("bench_chain") if stage == "selection" else
                          dict.fromkeys(SELECTION_COLUMNS, ""))}
                rows.append(row)
                print(row, flush=True)
            if not args.keep:
                for layer in ("02_intermediate", "03_primary", "04_feature", "05_model_input", "07_model_output",
                              "08_reporting", "06_models"):
                    shutil.rmtree(ROOT / "data" / layer / namespace, ignore_errors=True)
            shutil.rmtree(cache, ignore_errors=True)

    bench.write_result(rows, args.out, plot=plot_chain, log=None if args.no_mlflow else dict(
        name="scale_chain", metrics=stage_metrics(rows, ("seconds", "peak_rss_mb")),
        params={"sizes": args.sizes, "engines": args.engines, "steps": args.steps, "embedding": args.embedding,
                "raters": args.raters}))


def plot_chain(rows: list[dict], path: Path) -> None:
    with bench.figure(path, 1, 2, figsize=(12, 4.2)) as (fig, axes):
        engines = list(dict.fromkeys(r["engine"] for r in rows))
        for engine, style in zip(engines, ["-", "--", ":", "-."] * 3):
            for stage, marker in zip(STAGES, "osD^"):
                sel = [r for r in rows if r["engine"] == engine and r["stage"] == stage]
                if sel:
                    x = [r["corpus_docs"] for r in sel]
                    for ax, key in zip(axes, ("peak_rss_mb", "seconds")):
                        ax.plot(x, [r[key] for r in sel], style, marker=marker, label=f"{stage} ({engine})")
        axes[0].axhline(3072, color="grey", lw=0.8, ls=":")
        axes[0].set(xlabel="documents (replicated corpus)", ylabel="peak RSS of the process tree (MB)",
                    title="memory per stage (goal: <= 3 GB at 1M)", xscale="log")
        axes[1].set(xlabel="documents (replicated corpus)", ylabel="wall time (s)", title="time per stage",
                    xscale="log", yscale="log")
        axes[1].legend(fontsize=7)


# --- datatrove: side by side ---------------------------------------------------------------------------------

SIDE_STAGES = ("read_write", "fasttext")
TOOLS = ("curation", "datatrove")


def default_model() -> str:
    found = sorted(glob.glob(str(ROOT / "data/06_models/shared/ref-fasttext_dclm-*/fasttext_dclm.bin")))
    return found[0] if found else ""


def run_side(tool: str, stage: str, source: Path, out: Path, shards: int, args) -> dict:
    argv = [stage, "--input", source, "--output", out, "--workers", args.workers]
    argv += ["--model", args.model] if stage == "fasttext" else []
    if tool == "curation":
        run = run_json("import curation_side; curation_side.main()", *argv, cwd=ROOT)
    else:
        run = run_json("import datatrove_side; datatrove_side.main()", *argv, "--tasks", shards, "--logs",
                       out.with_name(out.name + "-logs"), python=args.dt_python, cwd=ROOT, PYTHONPATH=str(SCALE),
                       HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1")
    return {"seconds": round(run["wall_seconds"], 2), "engine_seconds": round(run["engine_seconds"], 2),
            "import_seconds": round(run["import_seconds"], 2), "peak_rss_mb": round(run["peak_rss_mb"], 1),
            "peak_anon_mb": round(run["peak_anon_mb"], 1), "load_before": run["load_before"],
            "load_after": run["load_after"]}


def read_output(tool: str, out: Path):
    """id, a hash of the text and (if any) the score of every written document, sorted by id
    (one file in memory at a time)."""
    import pandas as pd
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    files = sorted((out / "shards").glob("*.parquet")) if tool == "curation" else sorted(out.rglob("*.parquet"))
    parts = []
    for f in files:
        t = pq.read_table(f)
        part = pd.DataFrame({"id": t.column("id").to_pandas(),
                             "text_hash": pd.util.hash_pandas_object(t.column("text").to_pandas(), index=False)})
        if tool == "curation" and "fasttext_dclm" in t.column_names:
            part["score"] = t.column("fasttext_dclm").to_numpy()
        elif tool == "datatrove" and "metadata" in t.column_names:
            meta = t.column("metadata").combine_chunks()
            if "__label__hq" in [meta.type.field(i).name for i in range(meta.type.num_fields)]:
                part["score"] = pc.struct_field(meta, "__label__hq").to_numpy(zero_copy_only=False)
        parts.append(part)
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame({"id": [], "text_hash": []})
    return frame.sort_values("id").reset_index(drop=True)


def compare(outputs: dict[str, Path], stage: str) -> dict:
    """Same ids and texts in both outputs; for fasttext the largest |score difference|."""
    import numpy as np

    ours, theirs = read_output("curation", outputs["curation"]), read_output("datatrove", outputs["datatrove"])
    check = {"same_ids": bool(len(ours) == len(theirs) and (ours["id"].to_numpy() == theirs["id"].to_numpy()).all())}
    check["same_texts"] = bool(check["same_ids"] and
                               (ours["text_hash"].to_numpy() == theirs["text_hash"].to_numpy()).all())
    if stage == "fasttext" and check["same_ids"]:
        a = ours["score"].to_numpy(float)
        b = np.clip(theirs["score"].to_numpy(float), 0.0, 1.0)  # the project clips fastText's 1.00001
        diff = np.abs(a - b)
        check["scored"] = int(np.isfinite(a).sum())
        check["max_abs_score_diff"] = float(np.nanmax(diff)) if np.isfinite(diff).any() else float("nan")
        check["scores_over_1e-6_apart"] = int((diff > 1e-6).sum())
    return check


def datatrove(args) -> None:
    if "fasttext" in args.stages and not (args.model and Path(args.model).is_file()):
        raise SystemExit(f"no fastText model at {args.model!r} (--model)")
    source = make_corpus(args.n, args.corpus_dir / f"{args.n}")
    docs, shards = args.n, len(list(source.glob("*.parquet")))
    args.scratch = Path(tempfile.mkdtemp(prefix="datatrove-side-", dir=args.corpus_dir))
    rows: list[dict] = []
    try:
        for stage in args.stages:
            checks: dict = {}
            for rep in range(args.repeats):
                order = TOOLS if rep % 2 == 0 else TOOLS[::-1]
                outputs = {}
                for tool in order:
                    out = args.scratch / f"{stage}-{tool}-{rep}"
                    result = run_side(tool, stage, source, out, shards, args)
                    outputs[tool] = out
                    row = {"stage": stage, "tool": tool, "repeat": rep, "docs": docs, "shards": shards,
                           "workers": args.workers, **result,
                           "docs_per_s": round(docs / result["seconds"], 1)}
                    rows.append(row)
                    print(row, flush=True)
                if rep == 0:
                    checks = compare(outputs, stage)
                    print(stage, "check:", checks, flush=True)
                for out in outputs.values():
                    shutil.rmtree(out, ignore_errors=True)
                    shutil.rmtree(out.with_name(out.name + "-logs"), ignore_errors=True)
            for row in rows:
                if row["stage"] == stage:
                    row["check"] = json.dumps(checks, sort_keys=True)
    finally:
        shutil.rmtree(args.scratch, ignore_errors=True)

    summary = ratios(rows)
    for s in summary:
        print(s)
    metrics = {f"{s['stage']}_{k}": s[k] for s in summary for k in s if k not in ("stage", "tool", "docs", "workers")}
    bench.write_result(rows + summary, args.out, plot=lambda _, png: plot_datatrove(summary, png),
                       log=None if args.no_mlflow else dict(name="datatrove_side_by_side", metrics=metrics, params={
                           "n": args.n, "shards": shards, "workers": args.workers, "repeats": args.repeats,
                           "model": args.model}))


def ratios(rows: list[dict]) -> list[dict]:
    """Per stage: medians of both tools and the ratio curation/datatrove (< 1: curation is faster / smaller)."""
    out = []
    for stage in dict.fromkeys(r["stage"] for r in rows):
        med = {tool: {k: statistics.median(r[k] for r in rows if r["stage"] == stage and r["tool"] == tool)
                      for k in ("seconds", "engine_seconds", "peak_rss_mb", "load_before", "load_after")}
               for tool in TOOLS}
        docs = next(r["docs"] for r in rows if r["stage"] == stage)
        workers = next(r["workers"] for r in rows if r["stage"] == stage)
        out.append({"stage": stage, "tool": "ratio curation/datatrove (medians)", "docs": docs, "workers": workers,
                    "curation_seconds": med["curation"]["seconds"], "datatrove_seconds": med["datatrove"]["seconds"],
                    "ratio_seconds": round(med["curation"]["seconds"] / med["datatrove"]["seconds"], 3),
                    "ratio_engine_seconds": round(med["curation"]["engine_seconds"] /
                                                  med["datatrove"]["engine_seconds"], 3),
                    "curation_peak_rss_mb": med["curation"]["peak_rss_mb"],
                    "datatrove_peak_rss_mb": med["datatrove"]["peak_rss_mb"],
                    "ratio_peak_rss": round(med["curation"]["peak_rss_mb"] / med["datatrove"]["peak_rss_mb"], 3),
                    "load_min": min(r[k] for r in rows if r["stage"] == stage for k in ("load_before", "load_after")),
                    "load_max": max(r[k] for r in rows if r["stage"] == stage for k in ("load_before", "load_after"))})
    return out


def plot_datatrove(summary: list[dict], path: Path) -> None:
    with bench.figure(path, 1, 2, figsize=(10, 4)) as (fig, axes):
        stages = [s["stage"] for s in summary]
        x = range(len(stages))
        width = 0.38
        axes[0].bar([i - width / 2 for i in x], [s["curation_seconds"] for s in summary], width, label="curation")
        axes[0].bar([i + width / 2 for i in x], [s["datatrove_seconds"] for s in summary], width, label="datatrove")
        axes[0].set(xticks=list(x), xticklabels=stages, ylabel="wall s (whole process, median)",
                    title=(f"{summary[0]['docs']:,} documents, {summary[0]['workers']} processes, load "
                           f"{min(s['load_min'] for s in summary)}-{max(s['load_max'] for s in summary)}")
                    if summary else "")
        axes[0].legend()
        for key, offset, label in (("ratio_seconds", -width / 2, "wall time"),
                                   ("ratio_peak_rss", width / 2, "peak RSS")):
            bars = axes[1].bar([i + offset for i in x], [s[key] for s in summary], width, label=label)
            axes[1].bar_label(bars, fmt="%.2f")
        axes[1].axhline(1.0, color="grey", lw=0.8, ls=":")
        axes[1].set(xticks=list(x), xticklabels=stages, ylabel="curation / datatrove (< 1: curation better)",
                    title="ratio per stage")
        axes[1].legend()


# --- scoring: embeddings and scores, shards vs one frame ------------------------------------------------------

# the raters trained on the scored corpus itself, as when the result was measured (before the reference raters)
SCORING = {"fasttext_dclm": {"bucket": 200000, "thread": 1}, "fasttext_ultrafineweb": {"bucket": 200000, "thread": 1},
           "training": {"source": "corpus"}}
EMBEDDING = dict(backend="static", dim=256, pca_dims=256, max_seq_length=256, batch_size=1024, sort_by_length=False,
                 device="cpu", show_progress=False, num_workers=1)


def load_corpus(n: int | None):
    import pandas as pd

    from curation.scoring.training_sets import category_of

    files = sorted(bench.CORPUS.glob("corpus-*.parquet"))
    df = pd.concat([pd.read_parquet(f, dtype_backend="numpy_nullable") for f in files], ignore_index=True)
    df = df.iloc[:n] if n else df
    return df.assign(category=category_of(df["extra"]).astype("string")).reset_index(drop=True)


def scoring_child(path: str, n: int | None, shards: int, work: Path) -> dict:
    import numpy as np

    from curation.embedding import EmbedderConfig, make_embedder
    from curation.scoring import score_corpus, scoring_config_from_dict

    df = load_corpus(n)
    cfg = scoring_config_from_dict(SCORING)
    emb_cfg = EmbedderConfig(**EMBEDDING)
    t0 = time.perf_counter()
    if path == "frame":
        vectors = make_embedder(emb_cfg).encode(df["text"].tolist()).embeddings
        t1 = time.perf_counter()
        scores = score_corpus(df, cfg, embeddings=vectors).scores
    else:
        from curation.embedding.sharded import embed_shards
        from curation.scoring.sharded import score_shards
        from curation.shards import ShardedDataset, ShardWriter, shard_names

        writer = ShardWriter(work / "documents", "frame")
        names = shard_names(shards)
        for name, rows in zip(names, np.array_split(np.arange(len(df)), shards)):
            writer.mark_complete(writer.write(name, df.iloc[rows]))
        writer.finalize(names, stage="ingest")
        documents = ShardedDataset(work / "documents")
        t0 = time.perf_counter()
        vectors, _ = embed_shards(documents, emb_cfg, work / "embeddings")
        t1 = time.perf_counter()
        scores = score_shards(documents, vectors, cfg, work / "scoring").scores.to_frame()
    t2 = time.perf_counter()
    scores.to_parquet(work / f"{path}_scores.parquet", index=False)
    return {"path": path, "docs": len(df), "shards": shards if path == "shards" else 1,
            "embed_seconds": t1 - t0, "score_seconds": t2 - t1,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def scoring(args) -> None:
    if args.child:
        print(json.dumps(scoring_child(args.child, args.n, args.shards, Path(args.work))))
        return
    import pandas as pd

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in ("frame", "shards"):
            load_before = bench.loadavg()
            cmd = [sys.executable, __file__, "scoring", "--child", path, "--shards", str(args.shards), "--work", tmp]
            if args.n:
                cmd += ["--n", str(args.n)]
            done = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
            if done.returncode:
                raise SystemExit(done.stderr[-3000:])
            row = json.loads(done.stdout.strip().splitlines()[-1])
            row.update(load_before=load_before, load_after=bench.loadavg())
            rows.append(row)
        a = pd.read_parquet(Path(tmp) / "frame_scores.parquet")
        b = pd.read_parquet(Path(tmp) / "shards_scores.parquet")
        identical = bool(a.equals(b))
    frame = pd.DataFrame(rows)
    frame["score_docs_per_s_per_core"] = frame["docs"] / frame["score_seconds"]  # one process, one core busy
    frame["embed_docs_per_s"] = frame["docs"] / frame["embed_seconds"]
    frame["scores_identical"] = identical
    base = frame.iloc[0]
    frame["score_speed_vs_frame"] = frame["score_docs_per_s_per_core"] / base["score_docs_per_s_per_core"]
    frame["embed_speed_vs_frame"] = frame["embed_docs_per_s"] / base["embed_docs_per_s"]
    print(frame.to_string())

    def plot(_, png: Path) -> None:
        with bench.figure(png, 1, 2, figsize=(8, 3.2)) as (fig, axes):
            axes[0].bar(frame["path"], frame["score_docs_per_s_per_core"], color=["#888", "#2a7"])
            axes[0].set_title("scoring docs/s (all raters + merge)")
            axes[1].bar(frame["path"], frame["peak_rss_mb"], color=["#888", "#2a7"])
            axes[1].set_title("peak RSS, MB")
            fig.suptitle(f"{int(base['docs'])} docs, shards={args.shards}, identical={identical}")

    bench.write_result(frame, args.out.with_suffix(".csv"), plot=plot, log=None if args.no_mlflow else dict(
        name="scoring_shards_vs_frame", params={"docs": int(base["docs"]), "shards": args.shards, "bucket": 200000},
        metrics={"score_speed_ratio": float(frame["score_speed_vs_frame"].iloc[1]),
                 "embed_speed_ratio": float(frame["embed_speed_vs_frame"].iloc[1]),
                 "scores_identical": float(identical)}))


# --- blocks: DataMask on one block task vs in one process --------------------------------------------------

BLOCKS_WRITE = textwrap.dedent("""
    import json, sys, numpy as np, pandas as pd
    from curation.shards import ShardWriter, shard_names
    root, n, d, shards = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    names = shard_names(shards)
    sw, ew = ShardWriter(root + "/pruned_scores", "frame"), ShardWriter(root + "/pruned_embeddings", "array")
    bounds = np.linspace(0, n, shards + 1).astype(int)
    for i, name in enumerate(names):
        rng = np.random.default_rng([7, i])
        rows = bounds[i + 1] - bounds[i]
        x = rng.standard_normal((rows, d), dtype=np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        q = np.round(rng.uniform(4, 15, rows), 2)
        ids = [f"syn-{j}" for j in range(bounds[i], bounds[i + 1])]
        sw.mark_complete(sw.write(name, pd.DataFrame({"id": ids, "quality": q})))
        ew.mark_complete(ew.write(name, x))
        del x
    p = sw.finalize(names, stage="pruning")
    ew.finalize(names, stage="pruning", aligned_with=p.fingerprint)
    print(json.dumps({"steps": 0, "blocks": 0, "digest": ""}))
""")

# One selection path: in_process (the whole matrix, select()), a block task or greedy_stream (run_greedy_batches).
BLOCKS_SELECT = textwrap.dedent("""
    import hashlib, json, sys, time, numpy as np
    root, work, budget, config, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4]), sys.argv[5]
    if path == "in_process":
        from curation.selection import select
    else:
        from curation.selection.config import parse_selection_config
        from curation.selection.greedy_shards import run_greedy_batches
        from curation.selection.sharded import read_quality, run_datamask_blocks
    from curation.shards import ShardedDataset
    scores, emb = ShardedDataset(root + "/pruned_scores"), ShardedDataset(root + "/pruned_embeddings")
    start = time.perf_counter()
    if path == "in_process":
        q = scores.to_frame(["quality"])["quality"].to_numpy()
        x = np.concatenate([a for _, a in emb.iter_arrays(mmap=False)])  # today: the whole matrix in memory
        result = select("datamask", quality=q, embeddings=x, budget=budget, config=config, seed=0)
        sel, blocks = result.indices.astype(np.int64), result.info["n_blocks"]
    elif path == "greedy_stream":
        q = read_quality(scores)
        cfg = parse_selection_config("greedy", config)
        sel, history, info = run_greedy_batches(q, np.arange(len(q)), emb, budget, cfg, 0, work)
        blocks = info["streamed_chunks"]
    else:
        q = read_quality(scores)
        sel, history, info = run_datamask_blocks(q, np.arange(len(q)), emb, budget, config, 0, work)
        blocks = info["n_blocks"]
    print(json.dumps({"seconds": time.perf_counter() - start, "blocks": blocks,
                      "digest": hashlib.sha256(sel.tobytes()).hexdigest()[:16]}))
""")


def blocks(args) -> None:
    config = {"steps": args.steps, "history_every": max(1, args.steps), "checkpoint_every": 0,
              "block_size": max(args.n, 2)}
    budget = int(args.keep * args.n)
    rows = []
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        paths = [("block_task", config)] + ([("in_process", config)] if args.baseline else [])
        if args.half_blocks:
            paths.append(("block_task_half", {**config, "block_size": -(-args.n // 2)}))
        if args.greedy:
            paths.append(("greedy_stream", {"diversity": "disf", "lam": 0.0}))  # selection=greedy_disf
        runs = [("write_shards", BLOCKS_WRITE, [args.n, args.d, args.shards])]
        runs += [(name, BLOCKS_SELECT, [Path(tmp) / f"work-{name}", budget, json.dumps(cfg), name])
                 for name, cfg in paths]
        for name, child, argv in runs:
            result = {"steps": args.steps, **run_json(child, tmp, *argv, load=loadavg3)}
            rows.append({"path": name, "n": args.n, "d": args.d, "steps": result["steps"], "blocks": result["blocks"],
                         # write_shards: the wall time of its process
                         "seconds": round(result.get("seconds", result["wall_seconds"]), 2),
                         "peak_rss_mb": round(result["peak_rss_mb"], 1),
                         "peak_anon_mb": round(result["peak_anon_mb"], 1), "digest": result["digest"],
                         "load_before": result["load_before"], "load_after": result["load_after"]})
            print(rows[-1], flush=True)
    metrics = {f"{r['path']}_{k}": r[k] for r in rows for k in ("seconds", "peak_rss_mb", "peak_anon_mb")}
    bench.write_result(rows, args.out, plot=plot_blocks, log=None if args.no_mlflow else dict(
        name="selection_blocks", metrics=metrics, params={"n": args.n, "d": args.d, "steps": args.steps,
                                                          "shards": args.shards, "budget": budget,
                                                          "vectors": "synthetic unit vectors"}))


def plot_blocks(rows: list[dict], path: Path) -> None:
    runs = [r for r in rows if r["path"] != "write_shards"]
    with bench.figure(path, 1, 2, figsize=(9, 3.6), constrained_layout=True, tight=False) as (fig, axes):
        names = [r["path"] for r in runs]
        colors = {"block_task": "tab:green", "in_process": "tab:red", "block_task_half": "tab:olive",
                  "greedy_stream": "tab:purple"}
        axes[0].bar(names, [r["peak_rss_mb"] / 1024 for r in runs], color=[colors[n] for n in names], alpha=0.35,
                    label="RSS (incl. file-backed pages)")
        axes[0].bar(names, [r["peak_anon_mb"] / 1024 for r in runs], color=[colors[n] for n in names],
                    label="anonymous RSS")
        axes[0].axhline(3.0, color="k", ls="--", lw=1, label="3 GB goal (issue #14)")
        axes[0].set(ylabel="peak of the process tree (GB)", title=f"selection on {runs[0]['n']:,} x {runs[0]['d']}")
        axes[0].legend(loc="lower left", fontsize=8)
        axes[1].bar(names, [r["seconds"] for r in runs], color=[colors[n] for n in names])
        axes[1].set(ylabel=f"wall time (s), DataMask {runs[0]['steps']} steps",
                    title=f"load avg before: {runs[0]['load_before']}")


def main() -> None:
    corpus_dir = Path(tempfile.gettempdir()) / "scale_corpus"
    no_mlflow = (False, "do not log the results to MLflow")
    args = bench.commands(
        __doc__,
        shards=dict(sizes=[100_000, 300_000], engines=["local", "ray"],
                    signals_docs=(8_000, "documents for the signals stage (0 = skip)"), corpus_dir=corpus_dir,
                    out=bench.RESULTS / "scale.csv", no_mlflow=no_mlflow),
        chain=dict(
            sizes=[100_000, 300_000, 1_000_000], engines=["local", "ray"],
            steps=(200, "DataMask steps (the per-step cost is what scales)"),
            embedding=("static", "embedding config group (the fastest: static)"),
            raters=("fasttext_dclm,edu,wiki", "scoring.raters (default: DATAMASK's three quality components, "
                    "App. A.5; 'all' = the default config's six)"),
            fasttext_threads=(1, "fastText training threads (1: bit-reproducible, so the local and Ray runs fit the "
                              "same rater and their selections can be compared; the default config trains with 2)"),
            corpus_dir=corpus_dir, out=bench.RESULTS / "scale_chain.csv", keep=(False, "keep each run's data folders"),
            no_mlflow=no_mlflow,
            append=(False, "add the rows to an existing --out CSV (e.g. 1M local only after 100k local + Ray)"),
            override={"nargs": "*", "default": [], "help": "more Hydra overrides for every stage, e.g. "
                      "data.dedup.exact=false (the replicated corpus is all exact copies: with dedup on, ingest keeps "
                      "only the 16,513 originals)"}),
        datatrove=dict(
            n=(100_000, "corpus documents (make_corpus.py; 10k per shard)"),
            workers=(2, "processes, the same for both tools"),
            stages={"nargs": "+", "default": list(SIDE_STAGES), "choices": SIDE_STAGES},
            repeats=(3, "runs per tool and stage (alternating which goes first); the ratio is of the medians"),
            model=(default_model(), "fastText .bin (with the project's .json sidecar)"),
            dt_python=("/work/dtvenv/bin/python", "python of the datatrove venv"), corpus_dir=corpus_dir,
            out=bench.RESULTS / "datatrove_side_by_side.csv", no_mlflow=no_mlflow),
        scoring=dict(n={"type": int, "default": None, "help": "documents (default: the whole bundled corpus)"},
                     shards=8, child=None, work=None, out=bench.RESULTS / "scoring_shards_vs_frame",
                     no_mlflow=no_mlflow),
        blocks=dict(n=1_000_000, d=384, shards=10, steps=5, keep=0.1,
                    baseline=(False, "also run today's in-process select()"),
                    half_blocks=(False, "also run the block tasks with block_size = n / 2 (two blocks, one "
                                        "process at a time)"), work=Path(tempfile.gettempdir()),
                    greedy=(False, "also greedy DiSF streamed from the shards"),
                    out=bench.RESULTS / "scale" / "selection_blocks.csv", no_mlflow=no_mlflow)).parse_args()
    {"shards": shards, "chain": chain, "datatrove": datatrove, "scoring": scoring, "blocks": blocks}[args.command](args)


if __name__ == "__main__":
    main()
