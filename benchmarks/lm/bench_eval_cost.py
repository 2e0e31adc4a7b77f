"""Evaluation seconds per 1,000 items, per-request vs packed scoring, side by side; training throughput as a share
of this machine's fp32 matmul peak (issue #51, part 3).

One process: trains the decide cells' model (``conf/pretrain/tiny.yaml`` = ``PRESETS["tiny"]``) on real corpus text
with the real trainer (``curation.lm.train``) for ``--steps`` steps (its steady tokens/s, x 6 x parameters = the
training FLOP/s), times a large fp32 ``torch.matmul`` (the peak), then evaluates that checkpoint on the decide
evaluation config (``conf/experiment/_decide_base.yaml``'s ``eval``: 10 tasks x 100 items) with the per-request path
(``packed=False``) and the packed one, alternating, ``--repeats`` times; each pair's ratio, the largest metric and
per-item differences between the two paths, and the load (``/proc/loadavg``, what ``uptime`` prints) at each start.
Writes benchmarks/results/lm_eval_cost.csv and .png.

    .venv/bin/python benchmarks/lm/bench_eval_cost.py --repeats 2
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402


def matmul_peak(threads: int, n: int, repeats: int) -> float:
    """Best GFLOP/s of an n x n fp32 matmul (2 n^3 FLOPs) on ``threads`` torch threads."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.matmul(a, b)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.matmul(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e9


def decide_eval_config(tasks: str, limit: int, threads: int):
    """The decide experiment's evaluation settings (its yaml over the eval defaults), or ``--tasks``/``--limit``."""
    import yaml

    from curation.evaluation.config import EvalConfig

    base = yaml.safe_load((bench.ROOT / "conf" / "experiment" / "_decide_base.yaml").read_text())["eval"]
    return EvalConfig(tasks=tasks.split(",") if tasks else base["tasks"], limit=limit or base["limit"],
                      num_threads=threads)


def differences(a, b) -> tuple[float, str, float, float, float]:
    """(largest |a - b| over the report metrics, that metric, the largest |a - b| / max(|b|, 1) over them, the
    same two over every per-item value)."""
    ma, mb = a.metrics(), b.metrics()
    diffs = {k: abs(ma[k] - mb[k]) for k in ma if np.isfinite(ma[k]) and np.isfinite(mb[k])}
    name = max(diffs, key=diffs.get)
    metric_rel = max(d / max(abs(mb[k]), 1.0) for k, d in diffs.items())
    item = rel = 0.0
    for task, values in a.item_values().items():
        for key, got in values.items():
            x, y = np.asarray(got, dtype=float), np.asarray(b.item_values()[task][key], dtype=float)
            item = max(item, float(np.max(np.abs(x - y))))
            rel = max(rel, float(np.max(np.abs(x - y) / np.maximum(np.abs(y), 1.0))))
    return diffs[name], name, metric_rel, item, rel


def main() -> None:
    args = bench.parser(
        __doc__, docs=(2000, "documents tokenised and packed for training"),
        steps=(40, "training steps of the tiny preset (16 x 256 tokens each)"),
        warmup=(5, "first steps left out of the steady training rate"), repeats=2, threads=2,
        tasks=("", "comma-separated tasks (default: the decide config's)"),
        limit=(0, "items per task (0: the decide config's)"), matmul_n=(2048, "matmul size for the peak"),
        out=(bench.RESULTS / "lm_eval_cost", "output path without suffix")).parse_args()

    import torch

    from curation.evaluation.evaluate import evaluate
    from curation.lm import get_config, pack_documents, train, train_tokenizer

    torch.set_num_threads(args.threads)
    texts = bench.sample_texts(args.docs)
    scratch = tempfile.TemporaryDirectory(prefix="bench_eval_")
    work = Path(scratch.name)
    cfg = get_config("tiny")
    tok = train_tokenizer(texts, vocab_size=cfg.tokenizer.vocab_size)
    packed = pack_documents(texts, tok, work / "packed", seq_len=cfg.train.seq_len)
    cfg.train.max_steps, cfg.train.num_threads = args.steps, args.threads
    common = {"threads": args.threads, "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
              "date": time.strftime("%Y-%m-%d %H:%M")}

    load = bench.loadavg3()
    result = train(cfg, packed, work / "run", resume=False)
    hist = [row for row in result.history if "loss" in row]
    w = min(args.warmup, len(hist) - 1)
    span = hist[-1]["elapsed_s"] - (hist[w - 1]["elapsed_s"] if w > 0 else 0.0)
    train_tps = (len(hist) - w) * cfg.train.tokens_per_step / span
    model = result.model.eval()
    params = model.num_parameters()
    load_mm = bench.loadavg3()
    peak = matmul_peak(args.threads, args.matmul_n, repeats=5)
    train_gflops = 6 * params * train_tps / 1e9
    rows = [{"kind": "train", "path": "tiny", "params": params, "tokens_per_s": round(train_tps, 1),
             "train_gflop_s": round(train_gflops, 2), "matmul_gflop_s": round(peak, 2),
             "train_share_of_matmul_peak": round(train_gflops / peak, 4), "steps": result.steps,
             "final_loss": round(result.final_loss, 4), "load_1_5_15": load, **common},
            {"kind": "matmul", "path": f"fp32 {args.matmul_n}x{args.matmul_n}", "matmul_gflop_s": round(peak, 2),
             "load_1_5_15": load_mm, **common}]
    print(rows[0], flush=True)

    eval_cfg = decide_eval_config(args.tasks, args.limit, args.threads)
    for repeat in range(args.repeats):
        reports, seconds = {}, {}
        for path, is_packed in (("per_request", False), ("packed", True)):
            load = bench.loadavg3()
            t0, c0 = time.perf_counter(), time.process_time()
            reports[path] = evaluate(model, tok, eval_cfg, packed=is_packed)
            seconds[path] = time.perf_counter() - t0
            cpu = time.process_time() - c0
            n_items = sum(r.n_items for r in reports[path].tasks.values())
            rows.append({"kind": "eval", "path": path, "repeat": repeat, "params": params, "items": n_items,
                         "tasks": len(reports[path].tasks), "eval_s": round(seconds[path], 2),
                         "eval_s_per_1000_items": round(1000 * seconds[path] / n_items, 2),
                         "cpu_s_per_1000_items": round(1000 * cpu / n_items, 2),
                         "average": reports[path].average, "load_1_5_15": load, **common})
            print({k: rows[-1][k] for k in ("path", "repeat", "eval_s", "eval_s_per_1000_items", "load_1_5_15")},
                  flush=True)
        metric, name, metric_rel, item, rel = differences(reports["packed"], reports["per_request"])
        rows[-1].update({"ratio_to_per_request": round(seconds["packed"] / seconds["per_request"], 3),
                         "cpu_ratio_to_per_request": round(rows[-1]["cpu_s_per_1000_items"]
                                                           / rows[-2]["cpu_s_per_1000_items"], 3),
                         "max_metric_abs_diff": metric, "max_metric_abs_diff_of": name,
                         "max_metric_rel_diff": metric_rel, "max_item_abs_diff": item, "max_item_rel_diff": rel})
        print({k: rows[-1][k] for k in ("ratio_to_per_request", "cpu_ratio_to_per_request", "max_metric_abs_diff",
                                        "max_metric_abs_diff_of", "max_metric_rel_diff", "max_item_abs_diff",
                                        "max_item_rel_diff")}, flush=True)
    columns = ["kind", "path", "repeat", "params", "items", "tasks", "eval_s", "eval_s_per_1000_items",
               "cpu_s_per_1000_items", "ratio_to_per_request", "cpu_ratio_to_per_request", "max_metric_abs_diff",
               "max_metric_abs_diff_of", "max_metric_rel_diff", "max_item_abs_diff", "max_item_rel_diff", "average", "tokens_per_s", "train_gflop_s",
               "matmul_gflop_s", "train_share_of_matmul_peak", "steps", "final_loss", "load_1_5_15", "threads",
               "cpu", "cores", "date"]
    bench.write_result(rows, args.out.with_suffix(".csv"), columns=columns, plot=plot)


def plot(rows: list[dict], png: Path) -> None:
    evals = [r for r in rows if r["kind"] == "eval"]
    repeats = sorted({r["repeat"] for r in evals})
    train = next(r for r in rows if r["kind"] == "train")
    with bench.figure(png, 1, 2, figsize=(11, 4.2), dpi=120) as (fig, (ax, ax2)):
        x = np.arange(len(repeats))
        for offset, path, color in ((-0.2, "per_request", "#c44e52"), (0.2, "packed", "#55a868")):
            values = [next(r["eval_s_per_1000_items"] for r in evals if r["repeat"] == k and r["path"] == path)
                      for k in repeats]
            bars = ax.bar(x + offset, values, width=0.4, color=color, label=path)
            for bar, k, value in zip(bars, repeats, values):
                load = next(r["load_1_5_15"] for r in evals if r["repeat"] == k and r["path"] == path).split()[0]
                ax.text(bar.get_x() + bar.get_width() / 2, value, f"{value:.1f}\nload {load}", ha="center",
                        va="bottom", fontsize=7)
        ratios = [next(r["ratio_to_per_request"] for r in evals if r["repeat"] == k and r["path"] == "packed")
                  for k in repeats]
        ax.set_xticks(x, [f"repeat {k}\n{ratio:.2f}x" for k, ratio in zip(repeats, ratios)])
        ax.set_ylabel("evaluation s per 1,000 items")
        ax.set_title("decide eval (10 tasks x 100 items), tiny checkpoint")
        ax.legend(loc="upper right")
        ax.set_ylim(0, max(r["eval_s_per_1000_items"] for r in evals) * 1.35)
        ax2.bar([0, 1], [train["matmul_gflop_s"], train["train_gflop_s"]], color=["#4c72b0", "#8172b2"])
        ax2.set_xticks([0, 1], ["fp32 matmul peak", "training (6 x params x tokens/s)"])
        ax2.set_ylabel("GFLOP/s")
        ax2.set_title(f"training at {100 * train['train_share_of_matmul_peak']:.0f}% of the matmul peak "
                      f"({train['tokens_per_s']:,.0f} tokens/s)")
    return None


if __name__ == "__main__":
    main()
