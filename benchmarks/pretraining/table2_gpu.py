"""DATAMASK Table 2 decision suite with a larger model on one GPU (issue #21 item 6).

Three steps, so the training can run where a GPU is (the `device` tool's machine has torch, Lightning,
tokenizers and pyarrow, but not Kedro/MLflow/Hydra: ``run`` imports only ``curation.lm`` and
``curation.evaluation``):

    # 1. here, after `curate experiment=table2_tiny` (or the default job) in namespace NS:
    PYTHONPATH=src python benchmarks/pretraining/table2_gpu.py prepare --out DIR
    # 2. on the GPU (reads only DIR): every (corpus, seed) cell trained and evaluated, one process per seed
    PYTHONPATH=src python benchmarks/pretraining/table2_gpu.py run --inputs DIR --out OUT
    # 3. here: the decisions table, seed sd and heat map from OUT/values.csv
    PYTHONPATH=src python benchmarks/pretraining/table2_gpu.py decide --values OUT/values.csv --out benchmarks/results

``prepare`` writes each Table 2 corpus of ``conf/experiment/table2_tiny.yaml`` exactly as the sweep makes it,
the sweep's tokenizer and the evaluation tasks; ``run`` uses the project's trainer (bf16-mixed on the GPU) and
zero-shot evaluation with model ``small`` below (~29M parameters) in place of the 3.2M ``tiny``.
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

SKIP_TASKS = ("triviaqa", "nq_open")  # greedy generation: exact match is 0 at this scale, and the slowest part

# ~29M parameters: 8 layers of d_model 512 (8 query / 4 KV heads, SwiGLU 1,536), vocabulary 8,192 tied.
SMALL = {"n_layer": 8, "d_model": 512, "n_head": 8, "n_kv_head": 4, "d_ff": 1536, "max_seq_len": 256}


def prepare(args) -> None:
    from curation.config_loader import compose_config
    from curation.lm.cached import cached_tokenizer
    from curation.lm.config import parse_config, parse_dataclass
    from curation.selection.corpus import CorpusSpec, corpus_documents

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = compose_config(ROOT / "conf", overrides=["experiment=table2_tiny", f"run.namespace={args.namespace}"])
    ns = args.namespace
    docs, scores, embeddings, pruned, pruned_embeddings = bench.load_frames(ns, (
        "data/02_intermediate/{ns}/documents", "data/04_feature/{ns}/scores", "data/04_feature/{ns}/embeddings",
        "data/05_model_input/{ns}/pruned_scores", "data/05_model_input/{ns}/pruned_embeddings"))
    sizes = {}
    for name, raw in cfg["table2"]["corpora"].items():
        spec = parse_dataclass(CorpusSpec, raw, prefix=f"table2.corpora.{name}.").validate(name)
        frame, metrics = corpus_documents(docs, scores, embeddings, pruned, pruned_embeddings, spec,
                                          cfg["budget"], int(cfg["run"]["seed"]), cfg["cache"])
        frame[["id", "text"]].to_parquet(out / f"{name}.parquet", index=False)
        sizes[name] = {k: float(v) for k, v in metrics.items()}
        print(name, len(frame), "docs", flush=True)
    pre = parse_config(cfg["pretrain"])
    tokenizer, _ = cached_tokenizer(docs, pre.tokenizer, cfg["cache"])
    tokenizer.save(str(out / "tokenizer.json"))
    bench.copy_tasks(out)
    (out / "corpora.json").write_text(json.dumps({"namespace": ns, "corpora": sizes, "seed": int(cfg["run"]["seed"])},
                                                 indent=1))


def _small_config(args, seed: int, max_tokens: int | None = None):
    """Model ``SMALL`` with the tiny preset's other settings; cosine schedule over ``max_tokens``."""
    import torch

    from curation.lm.config import get_config, parse_config

    base = get_config("tiny")
    if args.model == "tiny":  # conf/experiment/table2_tiny.yaml's cells exactly: constant 4e-4, batch 16
        return parse_config({**dataclasses.asdict(base), "train": {**vars(base.train), "max_tokens": max_tokens or args.tokens,
                                                          "seed": seed, "checkpoint_every_steps": None}})
    return parse_config({
        "name": "small", "tokenizer": {"vocab_size": 8192},
        "model": {**vars(base.model), **SMALL, "vocab_size": 8192},
        "train": {**vars(base.train), "seq_len": 256, "batch_size": args.batch_size,
                  "max_tokens": max_tokens or args.tokens, "lr": args.lr, "min_lr": args.lr / 10,
                  "schedule": "cosine", "warmup_steps": args.warmup, "seed": seed, "num_threads": 2,
                  "precision": "bf16-mixed" if torch.cuda.is_available() else "32-true",
                  "checkpoint_every_steps": None, "val_every_steps": None},
    })


def _eval_tasks() -> list[str]:
    return [t for t in _tasks() if t not in SKIP_TASKS]


def _verify(args, seed: int, device_note: dict) -> dict:
    """Ultra-FineWeb's efficient verification of the same corpora with the same model (seed ``seed``): a WSD
    base on the whole corpus (the default mix), then per corpus an annealing run at share ``args.ratio``
    on a ``args.candidate_tokens`` sample of it, and one on the default mix alone; every model evaluated
    on the same tasks as the from-scratch cells (:func:`curation.verification.anneal_candidates`)."""
    import curation.verification.anneal as va
    from curation.lm.tokenizer import load_tokenizer
    from curation.verification.config import DEFAULT_MIX, parse_verification_config

    inputs, out = Path(args.inputs), Path(args.out)
    if (out / "verify" / f"seed-{seed}.json").exists():
        return json.loads((out / "verify" / f"seed-{seed}.json").read_text())
    device = bench.device()[0]
    raw = bench.bundled(["id", "text"])
    ids = pd.read_parquet(inputs / "documents_ids.parquet")["id"]
    documents = raw.set_index("id").loc[ids].reset_index()  # the ingested corpus (the bundled one passes whole)
    corpora = args.corpora.split(",")
    candidates = pd.concat([pd.DataFrame({"candidate": c, "id": pd.read_parquet(inputs / f"{c}.parquet")["id"]})
                            for c in corpora] + [pd.DataFrame({"candidate": DEFAULT_MIX, "id": documents["id"]})])
    tokenizer = load_tokenizer(inputs / "tokenizer.json")
    pretrain = _small_config(args, seed)
    cfg = parse_verification_config({"ratios": [args.ratio], "base_tokens": args.base_tokens, "seed": seed,
                                     "candidate_tokens": args.candidate_tokens, "tasks": _eval_tasks(),
                                     "limit": args.limit, "anneal_max_steps": args.anneal_max_steps})
    real = va.run_evaluation

    def on_device(checkpoint, eval_cfg, cache):  # evaluate where the model trained
        checkpoint.model.to(device)
        try:
            return real(checkpoint, {**dict(eval_cfg), "batch_size": 64, "num_threads": 2,
                                     "data_dir": str(inputs / "hf_datasets")}, cache)
        finally:
            checkpoint.model.to("cpu")

    va.run_evaluation = on_device
    t0 = time.perf_counter()
    tokens, token_metrics = va.pack_candidates(documents, candidates, tokenizer, 256, cfg.candidate_tokens, seed)
    base, _, base_metrics = va.train_base(tokens, tokenizer, pretrain, cfg, {"enabled": False})
    base_s = time.perf_counter() - t0
    results, _, metrics = va.anneal_candidates(base, tokens, pretrain, cfg, {}, {"enabled": False})
    row = {"seed": seed, "metrics": {**token_metrics, **base_metrics, **metrics}, "base_s": base_s,
           "total_s": time.perf_counter() - t0, **device_note}
    (out / "verify").mkdir(parents=True, exist_ok=True)
    (out / "verify" / f"seed-{seed}.json").write_text(json.dumps(row))
    results.assign(seed=seed).to_csv(out / "verify" / f"results-{seed}.csv", index=False)
    print(f"verification seed {seed}: base {base_s:.0f} s, total {row['total_s']:.0f} s", flush=True)
    return row


def _cell(args, corpus: str, seed: int, device_note: dict) -> dict:
    return bench.cell(Path(args.out) / "cells" / f"{corpus}-{seed}.json", lambda: _train_cell(args, corpus, seed,
                                                                                            device_note))


def _train_cell(args, corpus: str, seed: int, device_note: dict) -> dict:
    from curation.evaluation import evaluate
    from curation.lm import PackedDataset, train
    from curation.lm.cached import pack_texts
    from curation.lm.tokenizer import load_tokenizer

    inputs, out = Path(args.inputs), Path(args.out)
    tokenizer = load_tokenizer(inputs / "tokenizer.json")
    texts = pd.read_parquet(inputs / f"{corpus}.parquet")["text"].tolist()
    work = out / "work" / f"{corpus}-{seed}"
    packed = pack_texts(texts, tokenizer, 256)
    cfg = _small_config(args, seed)
    t0 = time.perf_counter()
    result = train(cfg, PackedDataset(packed.path, seq_len=256), work, resume=False)
    train_s = time.perf_counter() - t0
    model = result.model.to(bench.device()[0])
    t1 = time.perf_counter()
    report = evaluate(model, tokenizer, {"tasks": _eval_tasks(), "limit": args.limit,
                                         "batch_size": 64, "num_threads": 2, "data_dir": str(inputs / "hf_datasets")})
    eval_s = time.perf_counter() - t1
    params = sum(p.numel() for p in model.parameters())
    row = {"corpus": corpus, "seed": seed, "metrics": report.metrics(), "final_loss": result.final_loss,
           "train_tokens": result.tokens, "corpus_tokens": len(packed) * 256, "epochs": result.tokens / max(len(packed) * 256, 1),
           "tokens_per_s": result.tokens_per_s, "train_s": train_s, "eval_s": eval_s, "params": params, **device_note}
    shutil.rmtree(work, ignore_errors=True)
    print(f"{corpus} seed {seed}: loss {result.final_loss:.3f}, {result.tokens_per_s:,.0f} tok/s, train {train_s:.0f} s,"
          f" eval {eval_s:.0f} s", flush=True)
    return row


def _tasks() -> list[str]:
    from curation.evaluation.config import EvalConfig
    return list(EvalConfig().tasks)


def run(args) -> None:
    """One process per (protocol, seed) on the one device: ``train`` (every corpus from scratch in turn) and
    ``verify`` (:func:`_verify`); the parent starts them and gathers."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    corpora = args.corpora.split(",")
    if args.seed is not None:
        note = {"device": bench.device()[1]}
        if args.protocol == "verify":
            _verify(args, args.seed, note)
            return
        for corpus in corpora:
            _cell(args, corpus, args.seed, note)
        return
    common = ["--inputs", args.inputs, "--out", args.out, "--corpora", args.corpora, "--tokens", str(args.tokens),
              "--limit", str(args.limit), "--batch-size", str(args.batch_size), "--lr", str(args.lr),
              "--warmup", str(args.warmup), "--ratio", str(args.ratio), "--base-tokens", str(args.base_tokens),
              "--candidate-tokens", str(args.candidate_tokens), "--anneal-max-steps", str(args.anneal_max_steps),
              "--model", args.model]
    bench.fan_out(__file__, [[*common, "--protocol", p, "--seed", str(s)] for p in args.protocols.split(",")
                             for s in range(args.seeds)], lambda: gather(args), env={**os.environ, "PYTHONWARNINGS": "ignore"})


def gather(args) -> None:
    """values.csv / cells.csv (and verify_metrics.csv / verify_results.csv) from the finished cells."""
    out = Path(args.out)
    rows = bench.cells(out / "cells")
    long = [{"corpus": r["corpus"], "seed": r["seed"], "metric": k, "value": v} for r in rows
            for k, v in {**r["metrics"], "final_loss": r["final_loss"]}.items()]
    pd.DataFrame(long).to_csv(out / "values.csv", index=False)
    pd.DataFrame([{k: v for k, v in r.items() if k != "metrics"} for r in rows]).to_csv(out / "cells.csv", index=False)
    verified = bench.cells(out / "verify", "seed-*.json")
    if verified:
        vlong = [{"seed": r["seed"], "metric": k, "value": v} for r in verified for k, v in r["metrics"].items()]
        pd.DataFrame(vlong).to_csv(out / "verify_metrics.csv", index=False)
        pd.concat([pd.read_csv(p) for p in sorted((out / "verify").glob("results-*.csv"))]).to_csv(
            out / "verify_results.csv", index=False)
    print(f"{len(rows)} cells, {len(verified)} verification seeds gathered", flush=True)


def decide(args) -> None:
    from curation.reporting.decisions import heatmap, seed_sd
    from curation.reporting.table2 import CONTINUOUS, table2_decisions

    values = pd.read_csv(args.values)
    wide = values.pivot_table(index=["corpus", "seed"], columns="metric", values="value").reset_index()
    runs = wide.rename(columns={"corpus": "params.table2.corpus", "seed": "params.pretrain.train.seed"})
    runs = runs.rename(columns={c: f"metrics.{c}" for c in wide.columns if c not in ("corpus", "seed")})
    table, _, notes = table2_decisions(runs)  # seed sd below from the raw values (average as a fraction)
    out = Path(args.out)
    table.to_csv(out / f"{args.name}.csv", index=False)
    seed_sd(pd.read_csv(args.values)).to_csv(out / f"{args.name}_seed_sd.csv", index=False)
    shown = [m for m in ("average", *CONTINUOUS, "final_loss") if m in set(table["metric"])]
    fig = heatmap(table[table["metric"].isin(shown)], "raw", shown, args.title)
    fig.savefig(out / f"{args.name}.png", dpi=120)
    print("\n".join(notes))
    verify_path = Path(args.values).with_name("verify_metrics.csv")
    if verify_path.exists():
        _agreement(values, pd.read_csv(verify_path), out, args.name)


AGREEMENT_METRICS = bench.METRICS


def _agreement(train: pd.DataFrame, verify: pd.DataFrame, out: Path, name: str) -> None:
    """Rank agreement of from-scratch training and annealing verification on the same corpora and model."""
    from curation.reporting.decisions import decisions, rank_agreement
    from curation.reporting.table2 import ORDER

    rows = []
    for _, r in verify.iterrows():
        for corpus in ORDER:
            prefix = f"{corpus}_r"
            if r["metric"].startswith(prefix):
                rest = r["metric"][len(prefix):]
                label, _, metric = rest.partition("_")
                if metric in AGREEMENT_METRICS:
                    rows.append({"corpus": corpus, "seed": r["seed"], "metric": metric, "value": r["value"],
                                 "ratio": label})
    verified = pd.DataFrame(rows)
    train = train[train["metric"].isin(AGREEMENT_METRICS)]
    table = rank_agreement(train, verified, AGREEMENT_METRICS, names=("training", "verification"))
    table.to_csv(out / f"{name}_rank_agreement.csv", index=False)
    decisions(verified, AGREEMENT_METRICS, order=list(ORDER)).to_csv(out / f"{name}_verification.csv", index=False)
    print(table.to_string(index=False))


def main() -> None:
    req = {"required": True}
    args = bench.commands(
        __doc__, prepare=dict(namespace="default", out=req),
        run=dict(inputs=req, out=req, corpora="raw,semdedup,edu,dclm,datamask_paper,datamask", seeds=3, seed=None,
                 tokens=2_097_152, limit=500, batch_size=32, lr=1e-3, warmup=20, protocols="train,verify",
                 model={"default": "small", "choices": ["small", "tiny"]},  # tiny: the CPU suite's 3.2M model
                 protocol="train", ratio=0.3, base_tokens=4_194_304,
                 candidate_tokens=16_384,  # App. A: 20 steps, 3.9% of the base
                 anneal_max_steps=256),
        gather=dict(out=req), decide=dict(values=req, out=str(ROOT / "benchmarks" / "results"),
                                          name="table2_gpu_decisions",
                                          title="Table 2, 29M model on one GPU: corpus - raw")).parse_args()
    {"prepare": prepare, "run": run, "gather": gather, "decide": decide}[args.command](args)


if __name__ == "__main__":
    main()
