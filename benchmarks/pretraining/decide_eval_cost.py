"""What evaluating every item a task ships would cost per decide cell (issue #43 item 1), measured, not guessed.

Reads the per-task evaluation times a decide run logged (``<task>: <metric>=... on 100 items (<s>s)``) and the
item counts the offline task files hold, and writes, per task, the median seconds per item and the minutes
of one cell at 100 items and at every item. Input: a decide run's ``run.log``; output: ``eval_cost.csv`` beside it.

Run:  .venv/bin/python benchmarks/pretraining/decide_eval_cost.py benchmarks/results/decide_ladder_B1/run.log
"""

from __future__ import annotations

import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import pandas as pd

from curation.evaluation.tasks import load_task

LINE = re.compile(r"INFO\s+(\w+): \w+=[\d.]+ on (\d+)\s+items\s+\(([\d.]+)s\)")


def main(log_path: str) -> None:
    # rich wraps a long record onto the next lines: join them before matching
    text = re.sub(r"\s+runs\.py:\d+\s*\n\s{20,}", " ", Path(log_path).read_text())
    per_item: dict[str, list[float]] = defaultdict(list)
    for m in LINE.finditer(text):
        per_item[m.group(1)].append(float(m.group(3)) / int(m.group(2)))
    rows = []
    for task, times in per_item.items():
        shipped = load_task(task, limit=1).n_total
        med = statistics.median(times)
        rows.append({"task": task, "items_shipped": shipped, "cells_timed": len(times), "s_per_item_median": med,
                     "cell_s_at_100": med * min(100, shipped), "cell_min_at_all": med * shipped / 60})
    table = pd.DataFrame(rows)
    total = {"task": "all", "items_shipped": table["items_shipped"].sum(), "cells_timed": table["cells_timed"].min(),
             "s_per_item_median": float("nan"), "cell_s_at_100": table["cell_s_at_100"].sum(),
             "cell_min_at_all": table["cell_min_at_all"].sum()}
    table = pd.concat([table, pd.DataFrame([total])], ignore_index=True)
    out = Path(log_path).with_name("eval_cost.csv")
    table.to_csv(out, index=False, float_format="%.4g")
    print(table.to_string(index=False))
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1])
