"""Markdown tables from an `experiment=decide` run's files, for REPRODUCING.md (issue #38).

    python benchmarks/pretraining/decide_tables.py benchmarks/results/decide_A3

Reads decide_cells.csv, decisions.csv, item_vs_seed.csv and (two sizes or rungs) size_agreement.csv, snr.csv and
tasks.csv from the folder. Runs before issue #43 have no ``scale`` (grouped by size) and a seed-only ``se``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _driver import METRICS  # noqa: E402



def main(folder: Path) -> None:
    cells = pd.read_csv(folder / "decide_cells.csv")
    scale = "scale" if "scale" in cells.columns else "size"
    for size, part in cells.groupby(scale, sort=False):
        print(f"\n### {size}: seed mean ± sd\n")
        print("| candidate | docs | ref. tokens | LM tokens | epochs | " + " | ".join(METRICS) + " |")
        print("|---|---:|---:|---:|---:|" + "---:|" * len(METRICS))
        for name, g in part.groupby("candidate", sort=False):
            vals = " | ".join(f"{g[m].mean():.4f} ± {g[m].std(ddof=1):.4f}" for m in METRICS if m in g)
            print(f"| {name} | {g['corpus_docs'].iloc[0]:,.0f} | {g['corpus_tokens'].iloc[0]:,.0f} | "
                  f"{g['lm_tokens'].iloc[0]:,.0f} | {g['epochs'].max():.2f} | {vals} |")
    table = pd.read_csv(folder / "decisions.csv")
    full = "se_item" in table.columns
    print("\n### decided pairs " + ("(full SE: seeds and items; Holm-corrected p < 0.05)" if full else "(> 2 SE)")
          + ", per scale and metric\n")
    for (size, metric), g in table.groupby([scale if scale in table.columns else "size", "metric"], sort=False):
        won = g[g["decided"]]
        print(f"- {size} {metric}: {len(won)} of {len(g)}: " + "; ".join(
            f"{r['winner']} > {r['corpus_b'] if r['winner'] == r['corpus_a'] else r['corpus_a']} "
            f"({abs(r['mean_diff']):.3g} ± {r['se']:.2g}"
            + (f" [seeds {r['se_seed']:.2g}, items {r['se_item']:.2g}], Holm p {r['p_holm']:.2g})" if full
               else f", p {r['p']:.2g})") for _, r in won.iterrows()))
    errors = folder / "item_vs_seed.csv"
    if errors.is_file():
        print("\n### items vs seeds\n")
        print(pd.read_csv(errors).to_markdown(index=False, floatfmt=".3g"))
    for name, title in (("size_agreement.csv", "agreement with the top scale"), ("snr.csv", "signal and noise"),
                        ("tasks.csv", "tasks against chance at the top scale")):
        path = folder / name
        if path.is_file() and path.stat().st_size > 1:
            print(f"\n### {title}\n")
            print(pd.read_csv(path).to_markdown(index=False, floatfmt=".3g"))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
