"""Wall time of the default job on the whole bundled corpus (issue #53: <= 60 s alone on 2 cores), for the code of
one or more checkouts side by side (``--trees label=path,...``), runs interleaved (A, B, A, B, ...) so that a change
in the machine's load falls on both.

Each run is ``curate run.namespace=bench_default_job cache.dir=<empty folder>``: the README's default job on all
16,513 documents with an EMPTY result cache (it embeds, scores, prunes and selects from scratch), the static
embedder and the reference raters already built (``scripts/setup.sh``; every tree reads this checkout's, through
``CURATION_SHARED_MODELS``, ``CURATION_EMBEDDING_ARTIFACTS`` and ``CURATION_DECONTAMINATION_INDEX``), MLflow
tracking on, as a user runs it. Before the measured runs each tree runs once unmeasured (its MLflow store's
first-use set-up, the bytecode). Recorded per run: the whole command's wall seconds, the summary's "finished in"
seconds, the seconds of every Kedro node (MLflow ``time/<node>``), the peak RSS of the process tree, and the 1/5/15-
minute load averages before and after.

    .venv/bin/python benchmarks/pipelines/bench_default_job.py --repeats 3 \\
        --trees before=/tmp/before,after=/work/main      # git worktree add /tmp/before <commit>

Writes benchmarks/results/default_job.{csv,png} (rows appended: each run names its trees' commits).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402

sys.path.insert(0, str(bench.SCALE))
from process_tree import run_measured  # noqa: E402

CSV = bench.RESULTS / "default_job.csv"
RUN_ID = re.compile(r"\(([0-9a-f]{32})\)")
STORE = re.compile(r"--backend-store-uri (\S+)")
FINISHED = re.compile(r"default job finished in ([\d.]+) s")


def commit_of(tree: Path) -> str:
    out = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return out.stdout.strip() + ("+dirty" if dirty else "")


def node_seconds(store: str, run_id: str) -> dict[str, float]:
    """``time/<node>`` of the run, from its MLflow store."""
    from mlflow.tracking import MlflowClient

    metrics = MlflowClient(tracking_uri=store).get_run(run_id).data.metrics
    return {k.split("/", 1)[1]: round(v, 2) for k, v in metrics.items() if k.startswith("time/")}


def run_once(tree: Path, cache: Path) -> dict:
    models = bench.ROOT / "data" / "06_models"
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "CURATION_PROJECT_ROOT": str(tree),
           "CURATION_SHARED_MODELS": str(models / "shared"), "CURATION_EMBEDDING_ARTIFACTS": str(models / "embedding"),
           "CURATION_DECONTAMINATION_INDEX": str(models / "decontamination"), "COLUMNS": "200",
           "KEDRO_DISABLE_TELEMETRY": "true", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    load_before = bench.loadavg3()
    run = run_measured([str(bench.ROOT / ".venv" / "bin" / "python"), "-m", "curation",
                        "run.namespace=bench_default_job", f"cache.dir={cache}"], cwd=str(tree), env=env)
    finished = FINISHED.search(run.stdout)
    run_id, store = RUN_ID.findall(run.stdout), STORE.search(run.stdout)
    if finished is None or not run_id or store is None:
        raise RuntimeError(f"no summary in the output: {run.stdout[-3000:]}")
    return {"seconds": round(run.seconds, 1), "summary_seconds": float(finished.group(1)),
            "peak_rss_mb": round(run.peak_rss_mb), "load_before": load_before, "load_after": bench.loadavg3(),
            **{f"node_{k}": v for k, v in sorted(node_seconds(store.group(1), run_id[-1]).items())}}


COMMENT = ("default job (curate, all 16,513 bundled documents, empty result cache, raters and embedder built), trees "
           "interleaved; seconds = whole command; node_* = MLflow time/<node>")


def plot(rows: list[dict], path: Path) -> None:
    def group(r: dict) -> str:  # one group per label and commit (rows of several sessions share labels)
        return f"{r['label']}\n{r['commit']}"

    labels = list(dict.fromkeys(map(group, rows)))
    nodes = sorted({k for r in rows for k in r if k.startswith("node_") and k != "node_pipeline_seconds"
                    and r[k] != ""}, key=lambda k: -max(float(r[k]) for r in rows if r.get(k, "") != ""))[:8]
    with bench.figure(path, 1, 2, figsize=(12, 4.5)) as (fig, axes):
        for i, label in enumerate(labels):
            cells = [r for r in rows if group(r) == label]
            axes[0].scatter([i] * len(cells), [float(r["seconds"]) for r in cells], label=label)
            bottom = 0.0
            timed = [r for r in cells if r.get("node_pipeline_seconds", "") != ""] or cells
            for j, node in enumerate(nodes):
                mean = sum(float(r.get(node) or 0) for r in timed) / len(timed)
                axes[1].bar(i, mean, bottom=bottom, color=f"C{j}", label=node[5:] if i == 0 else None)
                bottom += mean
        axes[0].axhline(60, color="grey", ls="--", label="goal 60 s")
        axes[0].set(xticks=range(len(labels)), xticklabels=labels, ylabel="wall seconds (whole command)",
                    title="default job, all 16,513 documents, empty cache")
        axes[1].set(xticks=range(len(labels)), xticklabels=labels, ylabel="seconds (mean over runs)",
                    title="Kedro nodes (the 8 longest)")
        axes[0].legend(fontsize=8)
        axes[1].legend(fontsize=7)


def main() -> None:
    args = bench.parser(__doc__, repeats=3, trees=f"current={bench.ROOT}", note="",
                        plot_only=(False, "redraw the PNG from the CSV")).parse_args()
    if args.plot_only:
        return plot(bench.read_rows(CSV), CSV.with_suffix(".png"))
    trees = [(label, Path(path)) for label, path in (t.split("=", 1) for t in args.trees.split(","))]
    commits = {label: commit_of(tree) for label, tree in trees}
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_default_job_") as tmp:
        for label, tree in trees:  # unmeasured: the tree's MLflow store set-up and bytecode
            print(f"[{label}] warm-up run", flush=True)
            run_once(tree, Path(tmp) / f"warm-{label}")
        for repeat in range(args.repeats):
            for label, tree in trees:
                row = {"label": label, "commit": commits[label], "repeat": repeat,
                       **run_once(tree, Path(tmp) / f"{label}-{repeat}"), "note": args.note}
                print({k: row[k] for k in ("label", "seconds", "summary_seconds", "load_before", "load_after")},
                      flush=True)
                rows.append(row)
    bench.write_result(rows, CSV, plot=plot, comment=COMMENT, append=True)
    for label, _ in trees:
        cells = [float(r["seconds"]) for r in rows if r["label"] == label]
        print(f"{label}: median {sorted(cells)[len(cells) // 2]} s over {len(cells)} runs", flush=True)


if __name__ == "__main__":
    main()
