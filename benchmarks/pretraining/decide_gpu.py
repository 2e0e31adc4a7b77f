"""The third model size of the data decision (issue #38 item 4): ``experiment=decide``'s cells at ~29M
parameters on one GPU, then DataDecide's decision accuracy from tiny and small (CPU) to it.

Three steps, because the GPU machine has torch, Lightning, tokenizers and pyarrow but not Kedro, MLflow or
Hydra (``run`` imports only :mod:`curation.lm` and :mod:`curation.evaluation`):

    # 1. here, after the two-size run (namespace decide_B1_sizes, REPRODUCING.md):
    PYTHONPATH=src .venv/bin/python benchmarks/pretraining/decide_gpu.py prepare --out gpu_decide
    # 2. on the GPU (reads only gpu_decide; one process per (candidate, seed)):
    PYTHONPATH=src python3 benchmarks/pretraining/decide_gpu.py run --inputs gpu_decide --out OUT
    # 3. here: the three-size decisions and agreement tables
    PYTHONPATH=src .venv/bin/python benchmarks/pretraining/decide_gpu.py agree --cells OUT/cells.csv

``prepare`` cuts each candidate exactly as the decide job did (checked against its ``decide_cells.csv``) and
writes the packed token streams, the job's tokenizer, ``pretrain`` and ``eval`` blocks and the evaluation
tasks; ``run`` trains each cell with the job's trainer and settings (model ``medium``) in full precision and
evaluates it on the same items. ``--sizes medium,tiny`` also re-trains the tiny cells (a device check).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402
from _driver import ROOT  # noqa: E402

CACHE = "cache.dir=data/04_feature/cache_decide_B1"
# Which job's candidates: ``sizes`` = the two-size run (REPRODUCING.md, "Does the decision hold as the model
# grows?"); ``b1`` = the six-candidate run decide_B1, for its three candidates the two-size run lacks.
SETS = {
    "sizes": {"namespace": "decide_B1_sizes", "candidates": ("random", "topk_quality", "datamask", "edu"),
              "overrides": ["decide.sizes=[tiny,small]",
                            "+decide.candidates.edu={method: topk_quality, pool: raw, score: edu, config: {}}"],
              "cells": "benchmarks/results/decide_B1_sizes/decide_cells.csv"},
    "b1": {"namespace": "decide_B1", "candidates": ("datamask_paper", "greedy_disf", "semdedup"), "overrides": [],
           "cells": "benchmarks/results/decide_B1/decide_cells.csv"},
}
CANDIDATES = SETS["sizes"]["candidates"]
FRAMES = ("data/02_intermediate/{ns}/documents", "data/04_feature/{ns}/scores", "data/04_feature/{ns}/embeddings",
          "data/05_model_input/{ns}/pruned_scores", "data/05_model_input/{ns}/pruned_embeddings")


def prepare(args) -> None:
    from curation.config_loader import compose_config
    from curation.lm import parse_config
    from curation.lm.cached import cached_tokenizer
    from curation.decide.cells import Frames, candidate_corpora
    from curation.reporting.decide import parse_decide

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    chosen = SETS[args.set]
    ns = chosen["namespace"]
    overrides = ["experiment=decide", f"run.namespace={ns}", CACHE, *chosen["overrides"]]
    cfg = compose_config(ROOT / "conf", overrides=overrides)

    frames = Frames(*bench.load_frames(ns, FRAMES))
    decide = parse_decide(cfg["decide"])
    candidates = {k: v for k, v in decide.candidates.items() if k in chosen["candidates"]}
    pretrain = parse_config(cfg["pretrain"])
    cache = {**cfg["cache"], "dir": str(ROOT / cfg["cache"]["dir"])}
    tokenizer, _ = cached_tokenizer(frames.documents, pretrain.tokenizer, cache)
    corpora = candidate_corpora(frames, candidates, cfg["budget"], int(cfg["run"]["seed"]), tokenizer,
                                pretrain.train.seq_len, cache)
    job = pd.read_csv(ROOT / chosen["cells"])
    sizes = {}
    for name, (packed, metrics) in corpora.items():
        row = job[(job["candidate"] == name) & (job["size"] == "tiny")].iloc[0]
        for key in ("corpus_docs", "corpus_tokens", "lm_tokens"):  # the job's own picks, or stop here
            if float(row[key]) != float(metrics[key]):
                raise SystemExit(f"{name}: {key} {metrics[key]} here, {row[key]} in the job's decide_cells.csv")
        shutil.copytree(packed.path, out / "packed" / name, dirs_exist_ok=True)
        sizes[name] = {k: float(v) for k, v in metrics.items()}
    tokenizer.save(str(out / "tokenizer.json"))
    bench.copy_tasks(out)
    (out / "job.json").write_text(json.dumps({
        "namespace": ns, "overrides": overrides, "corpora": sizes,
        "pretrain": dataclasses.asdict(pretrain), "eval": dict(cfg["eval"])}, indent=1, default=str))
    print(f"prepared {len(corpora)} candidates in {out}", flush=True)


def _cell(inputs: Path, out: Path, name: str, size: str, seed: int) -> dict:
    return bench.cell(out / "cells" / f"{name}-{size}-{seed}.json", lambda: _train_cell(inputs, out, name, size, seed))


def _train_cell(inputs: Path, out: Path, name: str, size: str, seed: int) -> dict:
    from curation.decide.cells import size_config
    from curation.evaluation.runs import run_evaluation
    from curation.lm import parse_config
    from curation.lm.cached import pretrain
    from curation.lm.packing import PackedDataset
    from curation.lm.tokenizer import load_tokenizer

    job = json.loads((inputs / "job.json").read_text())
    cfg = size_config(parse_config(job["pretrain"]), size)
    # the job's cell exactly, but one thread per process (12 processes share the machine's 16 cores)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, seed=seed, num_threads=1))
    t0 = time.perf_counter()
    checkpoint, _, train_metrics = pretrain(PackedDataset(inputs / "packed" / name),
                                            load_tokenizer(inputs / "tokenizer.json"), cfg, {"enabled": False})
    device, device_name = bench.device()
    checkpoint.model.to(device)
    eval_cfg = {**job["eval"], "data_dir": str(inputs / "hf_datasets"), "batch_size": 64, "num_threads": 1}
    if os.environ.get("DECIDE_GPU_LIMIT"):  # a local dry run only
        eval_cfg["limit"] = int(os.environ["DECIDE_GPU_LIMIT"])
    items: dict = {}
    eval_metrics, _ = run_evaluation(checkpoint, eval_cfg, {"enabled": False}, items_out=items)
    row = {"candidate": name, "size": size, "seed": seed, **job["corpora"][name], **train_metrics, **eval_metrics,
           "device": device_name, "cell_seconds": time.perf_counter() - t0}
    (out / "cells").mkdir(parents=True, exist_ok=True)
    (out / "cells" / f"{name}-{size}-{seed}.items.json").write_text(json.dumps(items))
    print(f"{name} {size} seed {seed}: loss {row['final_loss']:.3f}, {row['train_tokens_per_s']:,.0f} tok/s, "
          f"train {row['train_seconds']:.0f} s, eval {row['eval_seconds']:.0f} s, "
          f"mc_correct_prob_per_char {row.get('mc_correct_prob_per_char', float('nan')):.5f}", flush=True)
    return row


def run(args) -> None:
    """One process per (candidate, seed), each training its sizes in turn; the parent gathers cells.csv."""
    inputs, out = Path(args.inputs), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sizes = args.sizes.split(",")
    if args.candidate is not None:
        for size in sizes:
            _cell(inputs, out, args.candidate, size, args.seed)
        return
    job = json.loads((inputs / "job.json").read_text())
    bench.fan_out(__file__, [["--inputs", str(inputs), "--out", str(out), "--sizes", args.sizes, "--candidate", name,
                              "--seed", str(seed)] for name in job["corpora"] for seed in range(args.seeds)],
                  lambda: gather(out))


def gather(out: Path) -> None:
    rows = bench.cells(out / "cells")
    pd.DataFrame(rows).to_csv(out / "cells.csv", index=False)
    print(f"{len(rows)} cells gathered", flush=True)


def agree(args) -> None:
    """Decisions per size and DataDecide's decision accuracy. ``--set sizes``: the two-size run's four
    candidates, tiny -> small, tiny -> medium, small -> medium. ``--set all``: seven candidates (decide_B1's six
    and Edu top-k from the two-size run: the same picks, the same tiny cells), tiny -> medium."""
    from curation.reporting.decide import DECISION_METRICS, decision_table, size_agreement

    gpu = pd.concat([pd.read_csv(c) for c in args.cells], ignore_index=True)
    sizes_cpu = pd.read_csv(ROOT / SETS["sizes"]["cells"])
    if args.set == "sizes":
        order, cpu, pairs = list(CANDIDATES), sizes_cpu, (("tiny", "small"), ("tiny", "medium"), ("small", "medium"))
    else:
        b1 = pd.read_csv(ROOT / SETS["b1"]["cells"])
        cpu = pd.concat([b1, sizes_cpu[(sizes_cpu["candidate"] == "edu") & (sizes_cpu["size"] == "tiny")]],
                        ignore_index=True)
        order, pairs = [*SETS["sizes"]["candidates"], *SETS["b1"]["candidates"]], (("tiny", "medium"),)
    checks = gpu[gpu["size"] != "medium"]  # the device check: tiny re-trained on the GPU
    cells = pd.concat([cpu, gpu[gpu["size"] == "medium"]], ignore_index=True)
    cells = cells[cells["candidate"].isin(order)]
    table = decision_table(cells, order=order)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "decisions.csv", index=False)
    agreement = pd.concat([size_agreement(table, a, b) for a, b in pairs], ignore_index=True)
    agreement.to_csv(out / "size_agreement.csv", index=False)
    keep = ["candidate", "size", "seed", *[m for m in DECISION_METRICS if m in gpu.columns], "parameters",
            "train_tokens", "epochs", "final_loss", "train_seconds", "train_tokens_per_s", "eval_seconds", "device"]
    gpu[[c for c in keep if c in gpu.columns]].to_csv(out / "gpu_cells.csv", index=False)
    if not checks.empty:  # the same tiny cell on two devices: its values and the decisions it gives
        both = checks.merge(cpu, on=["candidate", "size", "seed"], suffixes=("_gpu", "_cpu"))
        rows = [{"metric": m, "max_abs_diff": float((both[f"{m}_gpu"] - both[f"{m}_cpu"]).abs().max()),
                 "cells": len(both)} for m in DECISION_METRICS if f"{m}_gpu" in both]
        pd.DataFrame(rows).to_csv(out / "device_check.csv", index=False)
        tiny_gpu = decision_table(checks.assign(size="tiny_gpu"), order=order)
        tiny_gpu.to_csv(out / "decisions_tiny_on_gpu.csv", index=False)
    print(agreement.to_string(index=False))


def main() -> None:
    req = {"required": True}
    args = bench.commands(
        __doc__, prepare=dict(out=req, set={"default": "sizes", "choices": sorted(SETS)}),
        run=dict(inputs=req, out=req, sizes="medium", seeds=3, candidate=None, seed=0), gather=dict(out=req),
        agree=dict(cells={"required": True, "nargs": "+"},  # the GPU runs' cells.csv
                   set={"default": "sizes", "choices": ["sizes", "all"]},
                   out=str(ROOT / "benchmarks/results/decide_B1_sizes/gpu"))).parse_args()
    {"prepare": prepare, "run": run, "gather": lambda a: gather(Path(a.out)), "agree": agree}[args.command](args)


if __name__ == "__main__":
    main()
