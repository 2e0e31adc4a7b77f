"""Re-check the issue-38 decisions (seed-only SE, "decided" at 2 SE) with the full SE of issue #43.

The issue-38 runs recorded per-cell means but not per-item scores, so the item part of each difference's SE
is taken from that run's ``item_vs_seed.csv`` (``item_se_diff``: the item SE of a difference between two
cells at that size); the 29.4M GPU size recorded none and borrows the 12.6M value. The test is decide's own
(Cochran-Cox on the seed and item parts, Holm over the size's pairs on each metric).

    python benchmarks/pretraining/decide_recheck_full_se.py   # writes benchmarks/results/decide_B1_sizes/full_se_recheck.csv
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from curation.reporting.decide_stats import cochran_cox_p, holm

RESULTS = Path(__file__).resolve().parents[1] / "results" / "decide_B1_sizes"
ITEMS = 1000  # 10 tasks x 100 items per cell in the issue-38 runs
BORROW = {"medium": "small"}  # the GPU size recorded no items


def main() -> None:
    items = pd.read_csv(RESULTS / "item_vs_seed.csv").set_index(["size", "metric"])["item_se_diff"]
    cpu = pd.read_csv(RESULTS / "decisions.csv")
    gpu = pd.read_csv(RESULTS / "gpu" / "decisions.csv")
    table = pd.concat([cpu, gpu[gpu["size"] == "medium"]], ignore_index=True)
    table = table[table["metric"] != "average"].copy()
    keys = list(zip(table["size"].map(lambda s: BORROW.get(s, s)), table["metric"]))
    table["se_seed"] = table["se"]
    table["se_item"] = [items.get(k, np.nan) for k in keys]
    table["se_full"] = np.sqrt(table["se_seed"] ** 2 + table["se_item"] ** 2)
    table["p_full"] = [cochran_cox_p(d, s ** 2, i ** 2, 2, ITEMS - 10)
                       for d, s, i in zip(table["mean_diff"], table["se_seed"], table["se_item"])]
    table["p_holm"] = table.groupby(["size", "metric"])["p_full"].transform(lambda p: holm(p.to_numpy()))
    table["decided_full"] = table["p_holm"] < 0.05
    table["decided_issue38"] = table["decided"]
    out = table[["size", "corpus_a", "corpus_b", "metric", "mean_diff", "se_seed", "se_item", "se_full", "p",
                 "decided_issue38", "p_full", "p_holm", "decided_full"]]
    out.to_csv(RESULTS / "full_se_recheck.csv", index=False)
    summary = out.groupby(["size", "metric"])[["decided_issue38", "decided_full"]].sum().astype(int)
    print(summary.to_string())
    print(f"decided, issue 38: {int(out['decided_issue38'].sum())} of {len(out)}; full SE + Holm: "
          f"{int(out['decided_full'].sum())}")


if __name__ == "__main__":
    main()
