"""Ultra-FineWeb Table 8 (seeds/002 App. C.3) rebuilt from a sweep of ``verification`` runs.

Each job of ``experiment=ufw_table8_verification_ratio`` logs its Table 8 rows as
``tables/verification_table.csv`` (base model, then per ratio the default-mix-only annealing
and each candidate with ``delta_*`` against it). The report stacks the jobs' rows and adds
the paper's comparison of interest: the curated candidate (``selection``) minus the random
sample (``raw``) at each ratio, the analogue of Ultra-FineWeb-en minus FineWeb.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from curation.reporting.artefacts import PAPER_GID, Artefact, Histories, Report, Tables

NAME = "ufw_table8_verification_ratio"

# seeds/002 Table 8, Average column (8 tasks; 1B model, 10B-token annealing); "base" is the base model.
PAPER = pd.DataFrame({
    "ratio": ["-", "5%", "10%", "20%", "30%", "40%", "50%"],
    "FW (FineWeb)": [54.46, 54.87, 55.28, 55.25, 55.21, 55.46, 55.16],
    "FE (FineWeb-edu)": [np.nan, 54.92, 55.34, 55.46, 55.54, 55.70, 55.37],
    "UFW-en": [np.nan, 55.10, 55.70, 56.05, 56.30, 56.35, 56.10],
    "UFW-en minus FW": [np.nan, 0.23, 0.42, 0.81, 1.09, 0.89, 0.94],
})


def stack_tables(runs: pd.DataFrame, tables: Tables) -> pd.DataFrame:
    """One Table 8 from the jobs' tables: the base row once, then every (ratio, dataset) row."""
    frames = [tables[r]["verification_table"] for r in runs["run_id"] if "verification_table" in tables.get(r, {})]
    if not frames:
        raise ValueError(f"no run logged tables/verification_table.csv: run `curate -m experiment={NAME}` first")
    table = pd.concat(frames, ignore_index=True)
    table["ratio"] = pd.to_numeric(table["ratio"], errors="coerce")
    base = table[table["ratio"].isna()].head(1)
    rest = table[table["ratio"].notna()].drop_duplicates(["ratio", "dataset"], keep="last")
    return pd.concat([base, rest.sort_values(["ratio"], kind="stable")], ignore_index=True)


def build(runs: pd.DataFrame, histories: Histories, tables: Tables) -> Report:
    table = stack_tables(runs, tables)
    tasks = [c for c in table.columns if c not in ("ratio", "dataset", "average") and not c.startswith("delta_")]
    notes = ["Scores in percent on `verification.limit` items per task; `delta_*` is the candidate's gain over "
             "the annealing on the default mix alone at the same ratio (the paper's Table 8 gives FE/UFW deltas "
             "against FW instead; the `selection - raw` line below is that comparison)."]
    rows = []
    for ratio, group in table[table["ratio"].notna()].groupby("ratio"):
        by = group.set_index("dataset")["average"]
        rows.append({"ratio": ratio, **{f"avg_{d}": by[d] for d in by.index},
                     "selection_minus_raw": by.get("selection", np.nan) - by.get("raw", np.nan)})
    summary = pd.DataFrame(rows)
    if len(summary):
        limit = runs.get("params.verification.limit")
        n = pd.to_numeric(limit, errors="coerce").dropna().iloc[0] if limit is not None and \
            pd.to_numeric(limit, errors="coerce").notna().any() else np.nan
        if np.isfinite(n):
            se = 100.0 * np.sqrt(0.25 / (n * len(tasks)))  # binomial SE of an 8-task average at p = 0.5
            notes.append(f"With {int(n)} items per task the average's sampling error is about {se:.1f} points "
                         f"(binomial, p = 0.5, {len(tasks)} tasks): differences below ~{2 * se:.1f} points are noise.")
        notes.append("selection - raw per ratio: " + ", ".join(
            f"r={r.ratio:.2f}: {r.selection_minus_raw:+.2f}" for r in summary.itertuples()) + " points (paper, "
            "UFW-en - FW: +0.23 at 5% rising to +1.09 at 30%).")
    fig, (ax, theirs) = plt.subplots(1, 2, figsize=(11, 3.6))
    for column in [c for c in summary.columns if c.startswith("avg_")]:
        ax.plot(summary["ratio"], summary[column], marker="o", label=column[4:])
    base = table[table["ratio"].isna()]
    if len(base):
        ax.axhline(float(base["average"].iloc[0]), color="black", linestyle="dotted", linewidth=1, label="base model")
    ax.set_xlabel("verification ratio r (candidate share of each annealing batch)")
    ax.set_ylabel("average score (%)")
    ax.set_title("this run: annealing average vs ratio (Ultra-FineWeb Table 8 analogue)", fontsize=9)
    ax.legend(fontsize=7)
    # the paper's rows beside ours: raw ~ FW (FineWeb), selection ~ UFW-en
    ratios = PAPER["ratio"].str.rstrip("%")
    annealed = PAPER[ratios != "-"]
    x = pd.to_numeric(ratios[ratios != "-"]) / 100.0
    for column in ("FW (FineWeb)", "FE (FineWeb-edu)", "UFW-en"):
        theirs.plot(x, annealed[column], marker="o", label=column)
    theirs.axhline(float(PAPER.loc[ratios == "-", "FW (FineWeb)"].iloc[0]), color="black", linestyle="dotted",
                   linewidth=1, label="base model")
    theirs.set_gid(PAPER_GID)
    theirs.set_xlabel("verification ratio r")
    theirs.set_ylabel("average score (%)")
    theirs.set_title("paper: 1B model, 10B-token annealing (seeds/002 Table 8)", fontsize=9)
    theirs.legend(fontsize=7)
    fig.tight_layout()
    shown = table.round(2)
    if len(summary):
        notes.append("Per-ratio averages: " + "; ".join(
            f"r={r['ratio']:.2f} " + ", ".join(f"{c[4:]} {r[c]:.2f}" for c in summary.columns if c.startswith("avg_"))
            for _, r in summary.iterrows()))
    return Report("Ultra-FineWeb Table 8: efficient verification across ratios", shown,
                  {"verification_ratio": fig}, PAPER, notes)


ARTEFACTS = {NAME: Artefact("Ultra-FineWeb Table 8", build, (), ("verification_table",))}
