"""A data decision with a ~29M-parameter model on one GPU: candidates cut here, cells trained there, decided here.

``experiment=decide``'s cells one size up (issue #38 item 4: DataDecide's decision accuracy from tiny and small
on CPU to it) or DATAMASK Table 2's corpora (``experiment=table2_tiny``, issue #21 item 6). Three steps, because
the GPU machine has torch, Lightning, tokenizers and pyarrow but not Kedro, MLflow or Hydra (``run`` and
``gather`` import only :mod:`curation.lm` and :mod:`curation.evaluation`):

    # 1. here, after the experiment's CPU run in its namespace (REPRODUCING.md):
    PYTHONPATH=src .venv/bin/python benchmarks/pretraining/gpu_cells.py prepare --experiment decide --out gpu_decide
    # 2. on the GPU (reads only gpu_decide): every cell, one process per (candidate, seed) or, table2, per seed;
    #    `gather` collects OUT/cells.csv (and table2's OUT/values.csv) from the cells a killed run finished
    PYTHONPATH=src python3 benchmarks/pretraining/gpu_cells.py run --inputs gpu_decide --out OUT
    # 3. here: the decisions (decide: and the agreement of the sizes; table2: seed sd and heat map)
    PYTHONPATH=src .venv/bin/python benchmarks/pretraining/gpu_cells.py report --experiment decide --cells OUT/cells.csv

Experiments: ``decide``, the two-size run decide_B1_sizes (``--sizes medium,tiny`` re-trains the tiny cells as a
device check); ``decide_b1``, the three candidates of decide_B1 the two-size run lacks (its report sets all seven
side by side, tiny -> medium); ``table2``, the six Table 2 corpora of conf/experiment/table2_tiny.yaml (``--sizes
medium``: the GPU recipe of :func:`_table2_config`; ``tiny``: the CPU suite's cell exactly). decide_gpu.sh and
table2_gpu.sh run step 2 through the `device` tool. ``megatron``: the logs megatron_gpu.sh brings back (a
different check: curate-megatron on one GPU) as megatron_gpu.csv and .png:

    .venv/bin/python benchmarks/pretraining/gpu_cells.py megatron --logs dense=<OUT>/dense_log.jsonl [...]
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

FRAMES = ("data/02_intermediate/{ns}/documents", "data/04_feature/{ns}/scores", "data/04_feature/{ns}/embeddings",
          "data/05_model_input/{ns}/pruned_scores", "data/05_model_input/{ns}/pruned_embeddings")
CACHE = "cache.dir=data/04_feature/cache_decide_B1"
# name -> the job whose candidates are cut (its experiment, namespace, candidates, overrides; a decide job's cells,
# checked against) and where the report goes (under RESULTS)
EXPERIMENTS = {
    "decide": {"job": "decide", "namespace": "decide_B1_sizes",
               "candidates": ("random", "topk_quality", "datamask", "edu"),
               "overrides": [CACHE, "decide.sizes=[tiny,small]",
                             "+decide.candidates.edu={method: topk_quality, pool: raw, score: edu, config: {}}"],
               "cells": "benchmarks/results/decide_B1_sizes/decide_cells.csv", "results": "decide_B1_sizes/gpu"},
    "decide_b1": {"job": "decide", "namespace": "decide_B1", "overrides": [CACHE],
                  "candidates": ("datamask_paper", "greedy_disf", "semdedup"),
                  "cells": "benchmarks/results/decide_B1/decide_cells.csv", "results": "decide_B1/gpu"},
    "table2": {"job": "table2_tiny", "namespace": "default", "overrides": [], "results": ".",
               "candidates": ("raw", "semdedup", "edu", "dclm", "datamask_paper", "datamask")},
}
SKIP_TASKS = ("triviaqa", "nq_open")  # table2: greedy generation, exact match is 0 at this scale and the slowest


# --- 1. prepare (here) ---------------------------------------------------------------------------------------

def compose(overrides: list[str], ns: str) -> tuple:
    """A job's config as ``curate`` composes it, its namespace's outputs (:class:`curation.decide.cells.Frames`)
    and its content cache (an absolute ``dir``)."""
    from curation.config_loader import compose_config
    from curation.decide.cells import Frames

    cfg = compose_config(ROOT / "conf", overrides=overrides)
    return cfg, Frames(*bench.load_frames(ns, FRAMES)), {**cfg["cache"], "dir": str(ROOT / cfg["cache"]["dir"])}


def prepare(args) -> None:
    """Each candidate cut and packed as the job does (:func:`curation.decide.cells.candidate_corpora`), a decide
    candidate's documents and tokens checked against the job's cells; the job's tokenizer, config and tasks."""
    from curation.decide.cells import candidate_corpora
    from curation.lm import parse_config
    from curation.lm.cached import cached_tokenizer

    experiment = EXPERIMENTS[args.experiment]
    out, ns = Path(args.out), args.namespace or experiment["namespace"]
    out.mkdir(parents=True, exist_ok=True)
    overrides = [f"experiment={experiment['job']}", f"run.namespace={ns}", *experiment["overrides"]]
    cfg, frames, cache = compose(overrides, ns)
    pretrain = parse_config(cfg["pretrain"])
    tokenizer, _ = cached_tokenizer(frames.documents, pretrain.tokenizer, cache)
    corpora = candidate_corpora(frames, _candidates(experiment, cfg), cfg["budget"], int(cfg["run"]["seed"]),
                                tokenizer, pretrain.train.seq_len, cache)
    job = pd.read_csv(ROOT / experiment["cells"]) if "cells" in experiment else None
    sizes = {}
    for name, (packed, metrics) in corpora.items():
        if job is not None:  # a decide candidate: the job's own picks, or stop here
            row = job[(job["candidate"] == name) & (job["size"] == "tiny")].iloc[0]
            for key in ("corpus_docs", "corpus_tokens", "lm_tokens"):
                if float(row[key]) != float(metrics[key]):
                    raise SystemExit(f"{name}: {key} {metrics[key]} here, {row[key]} in the job's decide_cells.csv")
        shutil.copytree(packed.path, out / "packed" / name, dirs_exist_ok=True)
        sizes[name] = {k: v if isinstance(v, str) else float(v) for k, v in metrics.items()}
    tokenizer.save(str(out / "tokenizer.json"))
    bench.copy_tasks(out)
    (out / "job.json").write_text(json.dumps({
        "experiment": args.experiment, "namespace": ns, "overrides": overrides, "corpora": sizes,
        "pretrain": dataclasses.asdict(pretrain), "eval": dict(cfg["eval"])}, indent=1, default=str))
    print(f"prepared {len(corpora)} candidates in {out}", flush=True)


def _candidates(experiment: dict, cfg) -> dict:
    """The experiment's candidates as its job specifies them (name -> corpus spec), in the job's order."""
    from curation.lm.config import parse_dataclass
    from curation.reporting.decide import parse_decide
    from curation.selection.corpus import CorpusSpec

    if experiment["job"] == "decide":
        return {k: v for k, v in parse_decide(cfg["decide"]).candidates.items() if k in experiment["candidates"]}
    return {k: parse_dataclass(CorpusSpec, v, prefix=f"table2.corpora.{k}.").validate(k)
            for k, v in cfg["table2"]["corpora"].items() if k in experiment["candidates"]}


# --- 2. run and gather (on the GPU) ----------------------------------------------------------------------------

def run(args) -> None:
    """One process per (candidate, seed) (table2: per seed, its candidates in turn), each training its sizes in
    turn; the parent gathers."""
    inputs, out = Path(args.inputs), Path(args.out)
    job = json.loads((inputs / "job.json").read_text())
    kind = EXPERIMENTS[job["experiment"]]["job"]
    train = STEPS[kind][0]
    if args.seed is not None:
        for name in [args.candidate] if args.candidate else job["corpora"]:
            for size in args.sizes.split(","):
                path = out / "cells" / f"{name}-{size}-{args.seed}.json"
                bench.cell(path, lambda: train(args, job, name, size, args.seed, path))
        return
    common = ["--inputs", args.inputs, "--out", str(out), "--sizes", args.sizes, "--tokens", str(args.tokens),
              *(["--limit", str(args.limit)] if args.limit else [])]
    groups = [["--candidate", name] for name in job["corpora"]] if kind == "decide" else [[]]
    bench.fan_out(__file__, [[*common, *group, "--seed", str(seed)] for group in groups for seed in range(args.seeds)],
                  lambda: gather(out), env={**os.environ, "PYTHONWARNINGS": "ignore"})


def _decide_cell(args, job: dict, name: str, size: str, seed: int, path: Path) -> dict:
    """The job's cell exactly (its trainer and settings, full precision), at ``size``; its items beside it."""
    from curation.decide.cells import size_config
    from curation.evaluation.runs import run_evaluation
    from curation.lm import parse_config
    from curation.lm.cached import pretrain
    from curation.lm.packing import PackedDataset
    from curation.lm.tokenizer import load_tokenizer

    inputs = Path(args.inputs)
    cfg = size_config(parse_config(job["pretrain"]), size)
    # one thread per process (12 processes share the machine's 16 cores)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, seed=seed, num_threads=1))
    t0 = time.perf_counter()
    checkpoint, _, train_metrics = pretrain(PackedDataset(inputs / "packed" / name),
                                            load_tokenizer(inputs / "tokenizer.json"), cfg, {"enabled": False})
    device, device_name = bench.device()
    checkpoint.model.to(device)
    eval_cfg = {**job["eval"], "data_dir": str(inputs / "hf_datasets"), "batch_size": 64, "num_threads": 1}
    if args.limit:  # a local dry run only
        eval_cfg["limit"] = args.limit
    items: dict = {}
    eval_metrics, _ = run_evaluation(checkpoint, eval_cfg, {"enabled": False}, items_out=items)
    row = {"candidate": name, "size": size, "seed": seed, **job["corpora"][name], **train_metrics, **eval_metrics,
           "device": device_name, "cell_seconds": time.perf_counter() - t0}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".items.json").write_text(json.dumps(items))
    print(f"{name} {size} seed {seed}: loss {row['final_loss']:.3f}, {row['train_tokens_per_s']:,.0f} tok/s, "
          f"train {row['train_seconds']:.0f} s, eval {row['eval_seconds']:.0f} s, "
          f"mc_correct_prob_per_char {row.get('mc_correct_prob_per_char', float('nan')):.5f}", flush=True)
    return row


def _table2_config(size: str, seed: int, tokens: int):
    """``tiny``: conf/experiment/table2_tiny.yaml's cell exactly (constant 4e-4, batch 16); any other preset
    (``medium``: ~29M parameters, 8 layers of d_model 512) with the GPU recipe: batch 32, cosine from 1e-3 after
    20 warm-up steps, bf16-mixed on a GPU."""
    import torch

    from curation.lm.config import get_config, parse_config

    base = get_config(size)
    train = {**vars(base.train), "max_tokens": tokens, "seed": seed, "checkpoint_every_steps": None}
    if size != "tiny":
        train.update(seq_len=256, batch_size=32, lr=1e-3, min_lr=1e-4, schedule="cosine", warmup_steps=20,
                     num_threads=2, precision="bf16-mixed" if torch.cuda.is_available() else "32-true",
                     val_every_steps=None)
    return parse_config({**dataclasses.asdict(base), "train": train})


def _table2_cell(args, job: dict, corpus: str, size: str, seed: int, path: Path) -> dict:
    from curation.evaluation import evaluate
    from curation.evaluation.config import EvalConfig
    from curation.lm import PackedDataset, train
    from curation.lm.tokenizer import load_tokenizer

    inputs, work = Path(args.inputs), path.parent.parent / "work" / path.stem
    tokenizer = load_tokenizer(inputs / "tokenizer.json")
    packed = PackedDataset(inputs / "packed" / corpus, seq_len=256)
    t0 = time.perf_counter()
    result = train(_table2_config(size, seed, args.tokens), packed, work, resume=False)
    train_s = time.perf_counter() - t0
    model = result.model.to(bench.device()[0])
    t1 = time.perf_counter()
    report = evaluate(model, tokenizer, {"tasks": [t for t in EvalConfig().tasks if t not in SKIP_TASKS],
                                         "limit": args.limit or 500, "batch_size": 64, "num_threads": 2,
                                         "data_dir": str(inputs / "hf_datasets")})
    eval_s = time.perf_counter() - t1
    corpus_tokens = len(packed) * 256
    row = {"corpus": corpus, "seed": seed, "metrics": report.metrics(), "final_loss": result.final_loss,
           "train_tokens": result.tokens, "corpus_tokens": corpus_tokens,
           "epochs": result.tokens / max(corpus_tokens, 1), "tokens_per_s": result.tokens_per_s, "train_s": train_s,
           "eval_s": eval_s, "params": sum(p.numel() for p in model.parameters()), "device": bench.device()[1]}
    shutil.rmtree(work, ignore_errors=True)
    print(f"{corpus} seed {seed}: loss {result.final_loss:.3f}, {result.tokens_per_s:,.0f} tok/s, "
          f"train {train_s:.0f} s, eval {eval_s:.0f} s", flush=True)
    return row


def gather(out: Path) -> None:
    """cells.csv from the finished cells; values.csv (corpus, seed, metric, value) from those that carry their
    ``metrics`` apart (table2)."""
    rows = bench.cells(out / "cells")
    pd.DataFrame([{k: v for k, v in r.items() if k != "metrics"} for r in rows]).to_csv(out / "cells.csv",
                                                                                          index=False)
    long = [{"corpus": r["corpus"], "seed": r["seed"], "metric": k, "value": v} for r in rows if "metrics" in r
            for k, v in {**r["metrics"], "final_loss": r["final_loss"]}.items()]
    if long:
        pd.DataFrame(long).to_csv(out / "values.csv", index=False)
    print(f"{len(rows)} cells gathered", flush=True)


# --- 3. report (here) -----------------------------------------------------------------------------------------

def report(args) -> None:
    out = Path(args.out or bench.RESULTS / EXPERIMENTS[args.experiment]["results"])
    out.mkdir(parents=True, exist_ok=True)
    STEPS[EXPERIMENTS[args.experiment]["job"]][1](args, out)


def _agree(args, out: Path) -> None:
    """Decisions per size and DataDecide's decision accuracy. ``decide``: the two-size run's four candidates,
    tiny -> small, tiny -> medium, small -> medium. ``decide_b1``: seven candidates (decide_B1's six and Edu
    top-k from the two-size run: the same picks, the same tiny cells), tiny -> medium."""
    from curation.reporting.decide import DECISION_METRICS, decision_table, size_agreement

    gpu = pd.concat([pd.read_csv(c) for c in args.cells], ignore_index=True)
    sizes_cpu = pd.read_csv(ROOT / EXPERIMENTS["decide"]["cells"])
    order = list(EXPERIMENTS["decide"]["candidates"])
    if args.experiment == "decide":
        cpu, pairs = sizes_cpu, (("tiny", "small"), ("tiny", "medium"), ("small", "medium"))
    else:
        b1 = pd.read_csv(ROOT / EXPERIMENTS["decide_b1"]["cells"])
        cpu = pd.concat([b1, sizes_cpu[(sizes_cpu["candidate"] == "edu") & (sizes_cpu["size"] == "tiny")]],
                        ignore_index=True)
        order, pairs = [*order, *EXPERIMENTS["decide_b1"]["candidates"]], (("tiny", "medium"),)
    checks = gpu[gpu["size"] != "medium"]  # the device check: tiny re-trained on the GPU
    cells = pd.concat([cpu, gpu[gpu["size"] == "medium"]], ignore_index=True)
    # the per-item values each GPU cell wrote beside it (cells/<candidate>-<size>-<seed>.items.json): the item part
    # of the error, without which decide's test decides nothing; the committed CPU cells have none
    items = {}
    for path in args.cells:
        for f in Path(path).parent.glob("cells/*.items.json"):
            name, size, seed = f.name[: -len(".items.json")].rsplit("-", 2)
            items[(size, name, int(seed))] = json.loads(f.read_text())
    print(f"per-item values of {len(items)} GPU cells", flush=True)
    table = decision_table(cells[cells["candidate"].isin(order)], items or None, order=order)
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
        on_gpu = {("tiny_gpu", name, seed): v for (size, name, seed), v in items.items() if size == "tiny"}
        tiny_gpu = decision_table(checks.assign(size="tiny_gpu"), on_gpu or None, order=order)
        tiny_gpu.to_csv(out / "decisions_tiny_on_gpu.csv", index=False)
    print(agreement.to_string(index=False))


def _table2_decisions(args, out: Path) -> None:
    """Table 2's decisions (``<name>.csv``), the seed sd of every metric and the heat map from values.csv."""
    from curation.reporting.decisions import heatmap, seed_sd
    from curation.reporting.table2 import CONTINUOUS, table2_decisions

    values = pd.concat([pd.read_csv(c) for c in args.cells], ignore_index=True)
    wide = values.pivot_table(index=["corpus", "seed"], columns="metric", values="value").reset_index()
    runs = wide.rename(columns={"corpus": "params.table2.corpus", "seed": "params.pretrain.train.seed"})
    runs = runs.rename(columns={c: f"metrics.{c}" for c in wide.columns if c not in ("corpus", "seed")})
    table, _, notes = table2_decisions(runs)  # seed sd below from the raw values (average as a fraction)
    table.to_csv(out / f"{args.name}.csv", index=False)
    seed_sd(values).to_csv(out / f"{args.name}_seed_sd.csv", index=False)
    shown = [m for m in ("average", *CONTINUOUS, "final_loss") if m in set(table["metric"])]
    heatmap(table[table["metric"].isin(shown)], "raw", shown, args.title).savefig(out / f"{args.name}.png", dpi=120)
    print("\n".join(notes))


# --- the Megatron check's logs (megatron_gpu.sh) -------------------------------------------------------------

def _megatron_runs(label: str, path: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    current = None
    for record in map(json.loads, path.read_text().splitlines()):
        if record.get("iteration") == 1 or current is None:
            current = label if label not in out else f"{label}.{len(out) + 1}"
            out[current] = []
        if "resumed_from" in record:
            current = f"{label}.resumed"
            out[current] = []
            continue
        out[current].append(record)
    return out


def megatron(args) -> None:
    """The train_log.jsonl files megatron_gpu.sh brought back as megatron_gpu.csv and a loss plot. Each log is
    ``<label>=<path>``; one that holds several attempts (the device's save folder is reused while the machine
    stays warm) is split at each iteration-1 record into ``<label>``, ``<label>.2``, ..."""
    rows = []
    for arg in args.logs:
        label, path = arg.split("=", 1)
        for name, records in _megatron_runs(label, Path(path)).items():
            rows += [{"run": name, **r} for r in records]
    keys = ["run", "iteration", "lm_loss", "grad_norm", "lr", "tokens_per_s", "max_memory_gib", "device", "world_size"]

    def plot(rows: list[dict], png: Path) -> None:
        with bench.figure(png, figsize=(7, 4), dpi=120) as (fig, ax):
            for name in dict.fromkeys(r["run"] for r in rows):
                its = [(r["iteration"], r["lm_loss"]) for r in rows if r["run"] == name]
                ax.plot(*zip(*its), marker="o", ms=3, label=name)
            ax.set_xlabel("iteration")
            ax.set_ylabel("LM loss (nats/token)")
            ax.set_title(f"curate-megatron train on {rows[0]['device']}")
            ax.legend(fontsize=7)

    bench.write_result([{k: r[k] for k in keys if k in r} for r in rows], bench.RESULTS / "megatron_gpu.csv",
                       columns=keys, plot=plot)


# the job's experiment -> (train one cell, report)
STEPS = {"decide": (_decide_cell, _agree), "table2_tiny": (_table2_cell, _table2_decisions)}


def main() -> None:
    req, experiment = {"required": True}, {"required": True, "choices": sorted(EXPERIMENTS)}
    args = bench.commands(
        __doc__, prepare=dict(experiment=experiment, out=req, namespace=(None, "default: the experiment's")),
        run=dict(inputs=req, out=req, sizes=("medium", "model presets, trained in turn"), seeds=3,
                 candidate=(None, "one process's candidate (decide)"), seed=(None, "one process's seed"),
                 tokens=(2_097_152, "training tokens per cell (table2)"),
                 limit={"type": int, "default": None, "help": "items per task (default: decide's job's, table2 500)"}),
        gather=dict(out=req),
        report=dict(experiment=experiment, cells={"required": True, "nargs": "+", "type": Path,
                                                  "help": "the GPU runs' cells.csv (decide) or values.csv (table2)"},
                    out=(None, "default: the experiment's folder under benchmarks/results"),
                    name=("table2_gpu_decisions", "table2: the files' name"),
                    title=("Table 2, 29M model on one GPU: corpus - raw", "table2: the heat map's title")),
        megatron=dict(logs={"required": True, "nargs": "+", "help": "<label>=<train_log.jsonl> of each run"}),
    ).parse_args()
    {"prepare": prepare, "run": run, "gather": lambda a: gather(Path(a.out)), "report": report,
     "megatron": megatron}[args.command](args)


if __name__ == "__main__":
    main()
