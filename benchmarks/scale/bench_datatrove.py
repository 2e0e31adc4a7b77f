"""Side by side with datatrove (issue #22 item 5): the same parquet shards, the same number of
processes, two stages, each run as a user runs it (a fresh process, start-up included):

``read_write`` (read the shards -> write them) and ``fasttext`` (read -> the same fastText model's
P(``__label__hq``) per document -> write). curation: ``curation_side.py`` (project environment); datatrove:
``datatrove_side.py`` in its own environment (``--dt-python``). Per run: wall and engine seconds, peak RSS of
the process tree, load before and after; the two outputs are checked against each other (first repeat).
Corpus: ``make_corpus.py`` (REPLICATED: time and memory only); ``--shards k`` takes its first k shards.

Run alone, under the benchmark lock:

    flock /tmp/bench.lock .venv/bin/python benchmarks/scale/bench_datatrove.py --n 100000 --workers 2

Writes benchmarks/results/datatrove_side_by_side.csv (+ .png: the ratio curation/datatrove per stage) and
logs them to MLflow (experiment ``benchmarks``).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402
from _driver import ROOT, SCALE as HERE, loadavg  # noqa: E402
from make_corpus import make_corpus  # noqa: E402
from process_tree import run_measured  # noqa: E402

STAGES = ("read_write", "fasttext")
TOOLS = ("curation", "datatrove")


def default_model() -> str:
    found = sorted(glob.glob(str(ROOT / "data/06_models/shared/ref-fasttext_dclm-*/fasttext_dclm.bin")))
    return found[0] if found else ""


def select_shards(corpus: Path, k: int, scratch: Path) -> tuple[Path, int]:
    """A folder holding the first ``k`` shards of ``corpus`` (0 = all) as hard links; their count."""
    files = sorted(corpus.glob("*.parquet"))
    if k:
        files = files[:k]
    folder = scratch / "input"
    folder.mkdir(parents=True)
    for f in files:
        try:
            os.link(f, folder / f.name)
        except OSError:  # another file system
            shutil.copy2(f, folder / f.name)
    return folder, len(files)


def run_side(tool: str, stage: str, source: Path, out: Path, shards: int, args) -> dict:
    if tool == "curation":
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(HERE)])}
        argv = [sys.executable, "-c", "import curation_side; curation_side.main()", stage]
    else:
        env = {**os.environ, "PYTHONPATH": str(HERE), "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
        argv = [args.dt_python, "-c", "import datatrove_side; datatrove_side.main()", stage, "--tasks", str(shards),
                "--logs", str(out.with_name(out.name + "-logs"))]
    argv += ["--input", str(source), "--output", str(out), "--workers", str(args.workers)]
    if stage == "fasttext":
        argv += ["--model", args.model]
    before = loadavg()
    run = run_measured(argv, env=env, cwd=ROOT)
    after = loadavg()
    if run.returncode != 0:
        raise RuntimeError(f"{tool} {stage} failed ({run.returncode}):\n{run.stderr[-4000:]}")
    inner = json.loads(run.stdout.strip().splitlines()[-1])
    return {"seconds": round(run.seconds, 2), "engine_seconds": round(inner["engine_seconds"], 2),
            "import_seconds": round(inner["import_seconds"], 2), "peak_rss_mb": round(run.peak_rss_mb, 1),
            "peak_anon_mb": round(run.peak_anon_mb, 1), "load_before": before, "load_after": after}


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


def main() -> None:
    parser = bench.parser(
        __doc__, n=(100_000, "corpus documents (make_corpus.py; 10k per shard)"),
        shards=(0, "use the first k shards only (0 = all)"), workers=(2, "processes, the same for both tools"),
        stages={"nargs": "+", "default": list(STAGES), "choices": STAGES},
        repeats=(3, "runs per tool and stage (alternating which goes first); the ratio is of the medians"),
        model=(default_model(), "fastText .bin (with the project's .json sidecar)"),
        dt_python=("/work/dtvenv/bin/python", "python of the datatrove venv"),
        corpus_dir=Path(tempfile.gettempdir()) / "scale_corpus", out=bench.RESULTS / "datatrove_side_by_side.csv",
        mlflow=True)
    args = parser.parse_args()
    if "fasttext" in args.stages and not (args.model and Path(args.model).is_file()):
        parser.error(f"no fastText model at {args.model!r} (--model)")

    corpus = make_corpus(args.n, args.corpus_dir / f"{args.n}")
    args.scratch = Path(tempfile.mkdtemp(prefix="datatrove-side-", dir=args.corpus_dir))
    rows: list[dict] = []
    try:
        source, shards = select_shards(corpus, args.shards, args.scratch)
        import pyarrow.parquet as pq

        docs = sum(pq.ParquetFile(f).metadata.num_rows for f in source.glob("*.parquet"))
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
    bench.write_result(rows + summary, args.out, plot=lambda _, png: plot(summary, png), log=None if args.no_mlflow
                       else dict(name="datatrove_side_by_side", metrics=metrics, params={
                           "n": args.n, "shards": args.shards, "workers": args.workers, "repeats": args.repeats,
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


def plot(summary: list[dict], path: Path) -> None:
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
        for key, offset, label in (("ratio_seconds", -width / 2, "wall time"), ("ratio_peak_rss", width / 2, "peak RSS")):
            bars = axes[1].bar([i + offset for i in x], [s[key] for s in summary], width, label=label)
            axes[1].bar_label(bars, fmt="%.2f")
        axes[1].axhline(1.0, color="grey", lw=0.8, ls=":")
        axes[1].set(xticks=list(x), xticklabels=stages, ylabel="curation / datatrove (< 1: curation better)",
                    title="ratio per stage")
        axes[1].legend()

if __name__ == "__main__":
    main()
