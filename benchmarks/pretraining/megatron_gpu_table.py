"""Collect the train_log.jsonl files that megatron_gpu.sh brought back into one CSV and a loss plot.

    python benchmarks/pretraining/megatron_gpu_table.py run=<log.jsonl> [run=<log.jsonl> ...]

Each argument is ``<label>=<path>``; a log that holds several attempts (the device's save folder is reused
while the machine stays warm) is split at each iteration-1 record into ``<label>``, ``<label>.2``, ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402


def runs(label: str, path: Path) -> dict[str, list[dict]]:
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


def main(argv: list[str]) -> None:
    rows = []
    for arg in argv:
        label, path = arg.split("=", 1)
        for name, records in runs(label, Path(path)).items():
            rows += [{"run": name, **r} for r in records]
    keys = ["run", "iteration", "lm_loss", "grad_norm", "lr", "tokens_per_s", "max_memory_gib", "device", "world_size"]
    bench.write_result([{k: r[k] for k in keys if k in r} for r in rows], bench.RESULTS / "megatron_gpu.csv",
                       columns=keys, plot=plot)


def plot(rows: list[dict], png: Path) -> None:
    with bench.figure(png, figsize=(7, 4), dpi=120) as (fig, ax):
        for name in dict.fromkeys(r["run"] for r in rows):
            its = [(r["iteration"], r["lm_loss"]) for r in rows if r["run"] == name]
            ax.plot(*zip(*its), marker="o", ms=3, label=name)
        ax.set_xlabel("iteration")
        ax.set_ylabel("LM loss (nats/token)")
        ax.set_title(f"curate-megatron train on {rows[0]['device']}")
        ax.legend(fontsize=7)

if __name__ == "__main__":
    main(sys.argv[1:])
