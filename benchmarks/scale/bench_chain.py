"""The whole default chain at 100k / 300k / 1M documents, as a user runs it: ``curate
pipeline=<stage>`` for ingest -> scoring -> pruning -> selection, each stage its own process,
with the local engine and with Ray (issue #14's benchmark).

Per stage: wall time, docs/s per core, peak RSS of the whole process tree (``process_tree.py``; Ray's is an
upper bound). Selection: DataMask on one block of up to 1M candidates, ``--steps`` steps. Corpus:
``make_corpus.py`` (REPLICATED: time and memory only); each run in its own ``run.namespace`` and cache.

Run alone, under the benchmark lock:

    flock /tmp/bench.lock .venv/bin/python benchmarks/scale/bench_chain.py --sizes 100000 300000 1000000

Writes benchmarks/results/scale_chain.csv (+ .png) and logs them to MLflow (experiment ``benchmarks``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402
from _driver import ROOT, loadavg  # noqa: E402
from make_corpus import make_corpus  # noqa: E402
from process_tree import run_measured  # noqa: E402

STAGES = ("ingest", "scoring", "pruning", "selection")


def run_stage(args: list[str], env: dict[str, str]) -> dict:
    """Run one ``curate`` command; wall time and peak RSS of its process tree."""
    run = run_measured([str(Path(sys.executable).with_name("curate")), *args], cwd=ROOT, env=env,
                       stderr=subprocess.STDOUT)
    if run.returncode != 0:
        raise RuntimeError(f"curate {' '.join(args)} failed:\n{run.stdout[-4000:]}")
    return {"seconds": run.seconds, "peak_rss_mb": run.peak_rss_mb, "log_tail": run.stdout[-600:]}


def output_digest(stage: str, namespace: str) -> str:
    """A digest of what the stage made, to compare engines: the manifest fingerprint of its sharded
    output, or for the selection the hash of the selected ids in order."""
    import hashlib

    if stage == "selection":
        path = ROOT / "data/07_model_output" / namespace / "selected_ids.parquet"
        if not path.is_file():
            return ""
        import pandas as pd

        ids = pd.read_parquet(path, columns=["id"])["id"].astype(str)
        return hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]
    folder = {"ingest": "data/02_intermediate/{}/documents", "scoring": "data/04_feature/{}/scores",
              "pruning": "data/05_model_input/{}/pruned_scores"}[stage].format(namespace)
    manifest = ROOT / folder / "manifest.json"
    return str(json.loads(manifest.read_text()).get("fingerprint", ""))[:16] if manifest.is_file() else ""


# The selection's objective next to a random and the top-k quality subset of the same size (the run's
# ``selection_metrics``, from MLflow), and the DataMask policy's health: a quality regression at scale
# shows up in the CSV, not only a speed one (issue #20).
SELECTION_COLUMNS = {"sel_quality_mean": "selected_quality_mean", "sel_pws": "selected_pairwise_similarity",
                     "random_quality_mean": "selected_random_quality_mean",
                     "random_pws": "selected_random_pairwise_similarity",
                     "topk_quality_mean": "selected_topk_quality_mean", "topk_pws": "selected_topk_pairwise_similarity",
                     "final_entropy_min": "info_final_entropy_min", "returned_shortfall_max": "info_returned_shortfall_max",
                     "blocks_warned": "info_blocks_warned"}


def selection_objectives(experiment: str) -> dict:
    """SELECTION_COLUMNS of the latest run of ``experiment`` (the selection stage just run)."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{ROOT}/mlruns/mlflow.db")
    found = client.get_experiment_by_name(experiment)
    runs = client.search_runs([found.experiment_id], order_by=["start_time DESC"], max_results=1) if found else []
    metrics = runs[0].data.metrics if runs else {}
    return {col: round(metrics[key], 5) if key in metrics else "" for col, key in SELECTION_COLUMNS.items()}


def manifest_rows(path: Path) -> int:
    manifest = path / "manifest.json"
    return int(json.loads(manifest.read_text())["rows"]) if manifest.is_file() else -1


def main() -> None:
    args = bench.parser(
        __doc__, sizes=[100_000, 300_000, 1_000_000], engines=["local", "ray"],
        steps=(200, "DataMask steps (the per-step cost is what scales)"),
        embedding=("static", "embedding config group (the fastest: static)"),
        raters=("fasttext_dclm,edu,wiki", "scoring.raters (default: DATAMASK's three quality components, App. A.5; "
                "'all' = the default config's six)"),
        fasttext_threads=(1, "fastText training threads (1: bit-reproducible, so the local and Ray runs fit the "
                          "same rater and their selections can be compared; the default config trains with 2)"),
        corpus_dir=Path(tempfile.gettempdir()) / "scale_corpus", out=bench.RESULTS / "scale_chain.csv",
        keep=(False, "keep each run's data folders"), mlflow=True,
        append=(False, "add the rows to an existing --out CSV (e.g. 1M local only after 100k local + Ray)"),
        override={"nargs": "*", "default": [], "help": "more Hydra overrides for every stage, e.g. "
                  "data.dedup.exact=false (the replicated corpus is all exact copies: with dedup on, ingest keeps "
                  "only the 16,513 originals)"}).parse_args()

    rows = bench.read_rows(args.out) if args.append and args.out.is_file() else []
    for n in args.sizes:
        corpus = make_corpus(n, args.corpus_dir / f"{n}")
        for engine in args.engines:
            namespace = f"bench_chain/{n}-{engine}"
            cache = Path(tempfile.mkdtemp(prefix=f"chain-cache-{n}-{engine}-", dir=args.corpus_dir))
            # "local-wN": the local engine with N shard worker processes (data.workers); "local" = its default
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
                result = run_stage([f"pipeline={stage}", *common], env)
                docs = {"ingest": manifest_rows(ROOT / "data/02_intermediate" / namespace / "documents"),
                        "scoring": manifest_rows(ROOT / "data/02_intermediate" / namespace / "documents"),
                        "pruning": manifest_rows(ROOT / "data/04_feature" / namespace / "scores"),
                        "selection": manifest_rows(ROOT / "data/05_model_input" / namespace / "pruned_scores")}[stage]
                cores = 2
                row = {"stage": stage, "engine": engine, "corpus_docs": n, "docs": docs,
                       "seconds": round(result["seconds"], 1),
                       "docs_per_s_per_core": round(docs / result["seconds"] / cores, 1) if docs > 0 else "",
                       "peak_rss_mb": round(result["peak_rss_mb"], 1), "cores": cores,
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

    metrics = {f"{r['stage']}_{r['engine']}_{r['corpus_docs']}_{k}": r[k] for r in rows
               for k in ("seconds", "peak_rss_mb") if r[k] != ""}
    bench.write_result(rows, args.out, plot=plot, log=None if args.no_mlflow else dict(
        name="scale_chain", metrics=metrics, params={"sizes": args.sizes, "engines": args.engines, "steps": args.steps,
                                                     "embedding": args.embedding, "raters": args.raters}))


def plot(rows: list[dict], path: Path) -> None:
    with bench.figure(path, 1, 2, figsize=(12, 4.2)) as (fig, axes):
        engines = list(dict.fromkeys(r["engine"] for r in rows))
        for engine, style in zip(engines, ["-", "--", ":", "-."] * 3):
            for stage, marker in zip(STAGES, "osD^"):
                sel = [r for r in rows if r["engine"] == engine and r["stage"] == stage]
                if sel:
                    x = [r["corpus_docs"] for r in sel]
                    axes[0].plot(x, [r["peak_rss_mb"] for r in sel], style, marker=marker, label=f"{stage} ({engine})")
                    axes[1].plot(x, [r["seconds"] for r in sel], style, marker=marker, label=f"{stage} ({engine})")
        axes[0].axhline(3072, color="grey", lw=0.8, ls=":")
        axes[0].set(xlabel="documents (replicated corpus)", ylabel="peak RSS of the process tree (MB)",
                    title="memory per stage (goal: <= 3 GB at 1M)", xscale="log")
        axes[1].set(xlabel="documents (replicated corpus)", ylabel="wall time (s)", title="time per stage",
                    xscale="log", yscale="log")
        axes[1].legend(fontsize=7)

if __name__ == "__main__":
    main()
