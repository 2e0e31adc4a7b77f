"""Training throughput (tokens/s) of the tiny LM trainer on this machine.

Runs ``curation.lm.train`` (the real Lightning loop) on real corpus text for each configuration (tiny, +compile,
+bf16, tiny_moe, proxy_quick), interleaved across repeats: the steady-state rate (after ``--warmup`` steps) and
the whole-run rate, with the load at each start. Then tiny's bare step as fp32, bf16 autocast and
torch.compile, interleaved step by step (lm_tiny_trainer_interleaved.csv). Writes
benchmarks/results/lm_tiny_trainer.csv and .png (median and best steady tokens/s per configuration).

    .venv/bin/python benchmarks/lm/bench_tiny_trainer.py --steps 30 --repeats 2
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402

# name -> (preset, train-config overrides)
VARIANTS = {
    "tiny": ("tiny", {}),
    "tiny_compile": ("tiny", {"compile": True}),
    "tiny_bf16": ("tiny", {"precision": "bf16-mixed"}),
    "tiny_moe": ("tiny_moe", {}),
    "proxy_quick": ("proxy_quick", {}),
}


def interleaved_steps(threads: int, rounds: int) -> list[dict]:
    """tiny's bare training step (forward, backward, clip, AdamW) as fp32, bf16 autocast and torch.compile.

    All three models live in one process and take turns step by step, so load
    from other processes falls on each alike: the fairest precision/compile
    comparison a shared machine allows (Lightning's loop is not included).
    """
    import torch

    from curation.lm import CausalLM, get_config

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cfg = get_config("tiny")
    B, T = cfg.train.batch_size, cfg.train.seq_len
    x = torch.randint(1, cfg.model.vocab_size, (B, T))
    y = torch.randint(1, cfg.model.vocab_size, (B, T))
    variants = {}
    for name, dtype, compiled in [("fp32", None, False), ("bf16_autocast", torch.bfloat16, False),
                                  ("fp32_compile", None, True)]:
        model = CausalLM(cfg.model)
        if compiled:
            model.compile()
        variants[name] = (model, torch.optim.AdamW(model.parameters(), lr=4e-4), dtype)

    def step(name: str) -> float:
        model, optimizer, dtype = variants[name]
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype is not None):
            loss = model(x, y).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    for name in variants:  # warm-up; compiles the compiled one
        step(name), step(name)
    times: dict[str, list[float]] = {name: [] for name in variants}
    load = bench.loadavg()
    for _ in range(rounds):
        for name in variants:
            times[name].append(step(name))
    rows = []
    for name, ts in times.items():
        rows.append({"variant": name, "steps": len(ts), "tokens_per_step": B * T,
                     "tokens_per_s_median": round(B * T / statistics.median(ts), 1),
                     "tokens_per_s_best": round(B * T / min(ts), 1), "threads": threads,
                     "load_avg_1m_at_start": round(load, 2), "date": time.strftime("%Y-%m-%d %H:%M")})
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    args = bench.parser(
        __doc__, docs=(2000, "documents tokenised and packed"), steps=(30, "optimizer steps per run"),
        warmup=(5, "first steps left out of the steady rate"), repeats=(1, "interleaved repeats of each configuration"),
        threads=2, configs="tiny,tiny_compile,tiny_bf16,tiny_moe,proxy_quick",
        interleaved_rounds=(12, "rounds of the interleaved step test (0 = skip)"),
        out=(bench.RESULTS / "lm_tiny_trainer", "output path without suffix")).parse_args()

    from curation.lm import CausalLM, get_config, pack_documents, train, train_tokenizer

    texts = bench.sample_texts(args.docs)
    scratch = tempfile.TemporaryDirectory(prefix="bench_lm_")  # packed data and checkpoints, removed at exit
    work = Path(scratch.name)
    tok = train_tokenizer(texts, vocab_size=8192)
    packed = {T: pack_documents(texts, tok, work / f"packed_{T}", seq_len=T) for T in (128, 256)}

    rows = []
    for repeat in range(args.repeats):
        for name in [c for c in args.configs.split(",") if c]:
            preset, overrides = VARIANTS[name]
            cfg = get_config(preset)
            for key, value in {**overrides, "num_threads": args.threads, "max_steps": args.steps}.items():
                setattr(cfg.train, key, value)
            load = bench.loadavg()
            t0 = time.perf_counter()
            result = train(cfg, packed[cfg.train.seq_len], work / f"run_{name}_{repeat}", resume=False)
            wall = time.perf_counter() - t0
            hist = [row for row in result.history if "loss" in row]  # step rows, not validation rows
            steady = hist[args.warmup :] if len(hist) > args.warmup else hist
            span = steady[-1]["elapsed_s"] - (hist[args.warmup - 1]["elapsed_s"] if len(hist) > args.warmup else 0.0)
            steady_tps = len(steady) * cfg.train.tokens_per_step / span
            model = CausalLM(cfg.model)
            row = {"config": name, "repeat": repeat, "params": model.num_parameters(),
                   "params_non_embedding": model.num_parameters(exclude_embeddings=True),
                   "params_active": model.num_active_parameters(), "precision": cfg.train.precision,
                   "compile": cfg.train.compile, "batch_size": cfg.train.batch_size, "seq_len": cfg.train.seq_len,
                   "steps": result.steps, "tokens": result.tokens, "fit_s": round(result.elapsed_s, 2),
                   "wall_s": round(wall, 2), "tokens_per_s_steady": round(steady_tps, 1),
                   "tokens_per_s_whole_run": round(result.tokens_per_s, 1), "final_loss": round(result.final_loss, 4),
                   "threads": args.threads, "load_avg_1m_at_start": round(load, 2),
                   "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                   "date": time.strftime("%Y-%m-%d %H:%M")}
            rows.append(row)
            print({k: row[k] for k in ("config", "params", "tokens_per_s_steady", "tokens_per_s_whole_run",
                                       "fit_s", "load_avg_1m_at_start")}, flush=True)

    interleaved = interleaved_steps(args.threads, args.interleaved_rounds) if args.interleaved_rounds else []

    out = args.out
    if interleaved:
        bench.write_result(interleaved, out.parent / (out.name + "_interleaved.csv"))
    if rows:  # else only the interleaved test was asked for
        bench.write_result(rows, out.with_suffix(".csv"), plot=lambda rows, png: plot(rows, png, args))


def plot(rows: list[dict], png: Path, args) -> None:
    names = list(dict.fromkeys(r["config"] for r in rows))
    rates = {n: [r["tokens_per_s_steady"] for r in rows if r["config"] == n] for n in names}
    medians = [statistics.median(rates[n]) for n in names]
    best = [max(rates[n]) for n in names]  # least disturbed by neighbours on a shared machine
    loads = [statistics.median(r["load_avg_1m_at_start"] for r in rows if r["config"] == n) for n in names]
    with bench.figure(png, figsize=(9, 4.5), dpi=120) as (fig, ax):
        x = np.arange(len(names))
        ax.bar(x - 0.2, medians, width=0.4, color="#4c72b0", label=f"median of {args.repeats}")
        bars = ax.bar(x + 0.2, best, width=0.4, color="#55a868", label=f"best of {args.repeats}")
        for bar, value, load in zip(bars, best, loads):
            ax.text(bar.get_x() + bar.get_width() / 2, value, f"{value:,.0f}\n(load {load:.1f})", ha="center",
                    va="bottom", fontsize=8)
        ax.set_xticks(x, names, rotation=15)
        ax.set_ylabel("training tokens / s (steady state)")
        ax.set_title(f"curation.lm.train on {os.cpu_count()} shared CPU cores, {args.threads} torch threads")
        ax.set_ylim(0, max(best) * 1.3)
        ax.legend(loc="upper left")

if __name__ == "__main__":
    main()
