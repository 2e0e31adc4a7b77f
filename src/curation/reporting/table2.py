"""DATAMASK Table 2 at tiny scale, rebuilt from the MLflow runs of ``conf/experiment/table2_tiny.yaml``.

The experiment is a Hydra sweep (one MLflow child run per cell) over the
corpus (``table2.corpus``: raw / semdedup / edu / dclm / datamask, see
:mod:`curation.selection.corpus`) x the training seed; each cell selects
its corpus, pre-trains the tiny model on the same token budget and evaluates
it. :func:`build_table2` turns those runs into the paper's layout (seeds/000
Table 2): the three ability averages, their mean and the win count, each as
the mean over seeds with the seed standard deviation, plus the delta against
the raw corpus. A chance row and notes say how much of it is noise.

It is the ``table2_tiny`` artefact of the reports pipeline
(:func:`curation.reporting.registry.registry`);
:class:`curation.tracking.hydra_callbacks.Table2ReportCallback` runs that
pipeline when the sweep ends, so ``curate experiment=table2_tiny`` leaves the
report in ``data/08_reporting/<namespace>/table2_tiny/``. Rebuild it from MLflow alone with
``curate experiment=table2_tiny pipeline=reports hydra.mode=RUN``.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pandas as pd

from curation.evaluation.tasks import ABILITIES, TASKS
from curation.reporting.artefacts import PAPER_GID, Artefact, Histories, Report, Tables

log = logging.getLogger(__name__)

NAME = "table2_tiny"
CORPUS_PARAM, SEED_PARAM = "params.table2.corpus", "params.pretrain.train.seed"
ORDER = ("raw", "semdedup", "edu", "ultrafineweb", "dclm", "greedy_disf", "datamask_paper", "datamask")
ANALOGUE = {"raw": "FineWeb", "semdedup": "FineWeb-Semdedup", "edu": "FineWeb-Edu", "ultrafineweb": "UltraFineWeb-en",
            "dclm": "FineWeb-DCLM", "greedy_disf": "greedy DiSF (not a row of the paper's Table 2)",
            "datamask_paper": "FineWeb-Mask", "datamask": "FineWeb-Mask (project's default DataMask, not the paper's recipe)"}
REFERENCE = "raw"
SIZES = {"metrics.tokens_total": "corpus_tokens", "metrics.train_tokens": "train_tokens", "metrics.epochs": "epochs"}

# seeds/000 Table 2, upper part: 1.5B dense model, 400B tokens per corpus (the rows with an analogue here).
PAPER = pd.DataFrame(
    [("FineWeb", 46.0, 53.6, 38.8, 44.9, "0/12"), ("FineWeb-Semdedup", 46.1, 53.3, 36.7, 43.8, "0/12"),
     ("FineWeb-Edu", 46.8, 56.7, 40.2, 46.8, "3/12"), ("UltraFineWeb-en", 47.4, 56.5, 38.2, 45.8, "0/12"),
     ("FineWeb-DCLM", 48.2, 57.2, 39.5, 46.9, "1/12"),
     ("FineWeb-Mask", 48.8, 56.6, 42.1, 48.1, "6/12")],
    columns=["corpus", "reading_comprehension", "reasoning", "knowledge", "average", "win"],
)


def task_scores(runs: pd.DataFrame) -> pd.DataFrame:
    """Long frame (corpus, seed, task, ability, value, chance, n) of each run's primary metric, in percent."""
    rows = []
    for _, run in runs.iterrows():
        for name, spec in TASKS.items():
            column = f"metrics.{name}_{spec.primary_metric}"
            if column not in run or pd.isna(run[column]):
                continue
            chance = run.get(f"metrics.{name}_chance", np.nan)
            rows.append({"corpus": run[CORPUS_PARAM], "seed": run[SEED_PARAM], "task": name,
                         "ability": spec.ability, "value": 100.0 * float(run[column]),
                         "chance": 100.0 * float(chance) if pd.notna(chance) else np.nan})
    return pd.DataFrame(rows, columns=["corpus", "seed", "task", "ability", "value", "chance"])


def ability_scores(scores: pd.DataFrame) -> pd.DataFrame:
    """Per (corpus, seed): each ability's mean over its tasks and ``average``, the mean of the abilities
    (as :func:`curation.evaluation.summarize` computes it)."""
    per = scores.pivot_table(index=["corpus", "seed"], columns="ability", values="value", aggfunc="mean")
    per = per.reindex(columns=[a for a in ABILITIES if a in per.columns])
    per["average"] = per.mean(axis=1)
    return per.reset_index()


def wins(scores: pd.DataFrame) -> pd.Series:
    """Tasks on which each corpus has the best seed-mean score (ties count for each tied corpus)."""
    means = scores.groupby(["task", "corpus"])["value"].mean().unstack("corpus")
    best = means.max(axis=1)
    won = means.ge(best - 1e-9, axis=0)
    return won.sum(axis=0).astype(int)


def _order(corpora: list[str]) -> list[str]:
    return [c for c in ORDER if c in corpora] + sorted(c for c in corpora if c not in ORDER)


def table2(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(Table 2 layout, per-task seed means, notes) from the cells' runs."""
    scores = task_scores(runs)
    if scores.empty:
        raise ValueError("the runs have no task metrics (<task>_<metric>): did the evaluate step run?")
    per_seed = ability_scores(scores)
    columns = [c for c in (*ABILITIES, "average") if c in per_seed.columns]
    mean = per_seed.groupby("corpus")[columns].mean()
    sd = per_seed.groupby("corpus")[columns].std(ddof=1)
    seeds = per_seed.groupby("corpus")["seed"].nunique()
    won = wins(scores)
    n_tasks = scores["task"].nunique()
    corpora = _order(list(mean.index))
    rows = []
    for corpus in corpora:
        row: dict[str, Any] = {"corpus": corpus, "analogue": ANALOGUE.get(corpus, "")}
        for c in columns:
            row[c], row[f"{c}_sd"] = mean.loc[corpus, c], sd.loc[corpus, c]
        row["delta_average"] = (mean.loc[corpus, "average"] - mean.loc[REFERENCE, "average"]
                                if REFERENCE in mean.index else np.nan)
        row["win"] = f"{int(won.get(corpus, 0))}/{n_tasks}"
        row["seeds"] = int(seeds.loc[corpus])
        for column, name in SIZES.items():  # the equal budget, and how much of each corpus it covers
            if column in runs:
                row[name] = float(runs.loc[runs[CORPUS_PARAM] == corpus, column].astype(float).mean())
        rows.append(row)
    chance = scores.drop_duplicates("task").groupby("ability")["chance"].mean()
    chance_row: dict[str, Any] = {"corpus": "chance", "analogue": "random guessing"}
    for c in columns:
        chance_row[c] = chance.mean() if c == "average" else chance.get(c, np.nan)
    rows.append(chance_row)
    table = pd.DataFrame(rows)
    tasks = scores.groupby(["task", "corpus"])["value"].mean().unstack("corpus").reindex(columns=corpora)
    tasks.insert(0, "ability", [TASKS[t].ability for t in tasks.index])
    return table, tasks.reset_index(), _notes(scores, per_seed, table, runs)


def _notes(scores: pd.DataFrame, per_seed: pd.DataFrame, table: pd.DataFrame, runs: pd.DataFrame) -> list[str]:
    counts = scores.groupby("task").size() / max(scores.groupby(["corpus", "seed"]).ngroups, 1)
    n_items = runs.get("params.eval.limit", pd.Series(dtype=str)).iloc[0] if len(runs) else "?"
    sd_mean = table.loc[table["corpus"] != "chance", "average_sd"].mean()
    p = scores["value"].mean() / 100.0
    per_task_sd = 100.0 * np.sqrt(p * (1 - p) / float(n_items)) if str(n_items).isdigit() else np.nan
    notes = [
        "Honest reading: at this scale (a 3.2M-parameter model, a few hundred thousand training tokens, "
        "a few dozen items per task) scores sit near chance and differences between corpora are mostly "
        "noise. Do not read a ranking into differences smaller than the seed spread.",
        f"Seed spread: the standard deviation of `average` over seeds is {sd_mean:.2f} points on average; "
        f"evaluation sampling adds ~{per_task_sd:.1f} points of binomial noise per task "
        f"(limit {n_items} items, accuracy ~{100 * p:.0f}%).",
    ]
    ref = per_seed[per_seed["corpus"] == REFERENCE]["average"]
    for corpus in per_seed["corpus"].unique():
        if corpus == REFERENCE or ref.empty:
            continue
        other = per_seed[per_seed["corpus"] == corpus]["average"]
        se = np.sqrt(ref.var(ddof=1) / len(ref) + other.var(ddof=1) / len(other))
        delta = other.mean() - ref.mean()
        notes.append(f"{corpus} vs {REFERENCE}: {delta:+.2f} points (se {se:.2f}, {len(other)} vs {len(ref)} "
                     "seeds; decided or not: the decisions below).")
    notes.append("Abilities use the tasks shipped offline: reading comprehension is BoolQ only (RACE is "
                 "not shipped), knowledge lacks KQAPro; ARC-Easy, SciQ and BoolQ are not in the paper. "
                 f"Win counts are out of the {scores['task'].nunique()} evaluated tasks, not the paper's 12.")
    return notes


# The metrics every Table 2 decision is made on: the paper's accuracy averages (percent) and the continuous
# likelihood metrics averaged over the multiple-choice tasks (DataDecide), and the held-out loss when logged.
# final_val_loss is not here: it is each corpus's loss on its *own* held-out tail, a different text per
# corpus, so a difference in it says which corpus is easier to model, not which trains the better model.
CONTINUOUS = ("mc_correct_prob_per_char", "mc_norm_correct_prob_per_char", "mc_margin_per_char",
              "mc_correct_logprob_per_char", "ref_bits_per_byte")


def decision_values(runs: pd.DataFrame) -> pd.DataFrame:
    """Long (corpus, seed, metric, value): the ability averages and ``average`` (accuracy, %), each
    task's primary metric (%) and :data:`CONTINUOUS`, per cell."""
    scores = task_scores(runs)
    frames = []
    if not scores.empty:
        per_seed = ability_scores(scores).melt(id_vars=["corpus", "seed"], var_name="metric", value_name="value")
        frames += [per_seed, scores.assign(metric=scores["task"] + "_acc%")[["corpus", "seed", "metric", "value"]]]
    for metric in CONTINUOUS:
        column = f"metrics.{metric}"
        if column in runs:
            frames.append(pd.DataFrame({"corpus": runs[CORPUS_PARAM], "seed": runs[SEED_PARAM], "metric": metric,
                                        "value": pd.to_numeric(runs[column], errors="coerce")}))
    return pd.concat(frames, ignore_index=True).dropna(subset=["value"]) if frames else pd.DataFrame(
        columns=["corpus", "seed", "metric", "value"])


def paper_verdict(table: pd.DataFrame, metrics: list[str], corpora: list[str]) -> list[str]:
    """The decisions set against the paper's Table 2 order (1.5B dense averages of each corpus's analogue):
    per metric, how many decided pairs agree with the paper and how many contradict it, and the
    paper's headline claim (FineWeb-Mask above FineWeb, +3.2 points) read on each metric."""
    from curation.reporting.decisions import paper_agreement

    by_analogue = PAPER.set_index("corpus")["average"]
    paper = {c: float(by_analogue[ANALOGUE[c]]) for c in corpora if ANALOGUE.get(c) in by_analogue.index}
    agreement = paper_agreement(table[table["metric"].isin(metrics)], paper)
    notes = []
    for _, r in agreement.iterrows():
        line = (f"Against the paper's order ({r['metric']}): {r['decided']} of {r['pairs']} pairs with a paper "
                f"row decided, {r['agree']} as the paper orders them, {r['disagree']} the other way")
        if r["disagree"]:
            line += f" ({r['disagree_pairs']})"
        notes.append(line + ".")
    mask = table[(table["corpus_a"] == REFERENCE) & (table["corpus_b"] == "datamask_paper")
                 & table["metric"].isin(metrics)]
    if not mask.empty:
        said = []
        for _, r in mask.iterrows():
            if r["decided"]:
                said.append(f"{r['metric']}: {'supports' if r['winner'] == 'datamask_paper' else 'contradicts'}")
            else:
                said.append(f"{r['metric']}: no decision")
        notes.append("The paper's headline (FineWeb-Mask beats FineWeb by +3.2 average points at 1.5B), "
                     "datamask_paper vs raw here: " + "; ".join(said) + ".")
    return notes


def table2_decisions(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(pairwise decisions, seed sd per metric, notes) of the Table 2 cells."""
    from curation.reporting.decisions import ALPHA, decisions, seed_sd

    values = decision_values(runs)
    corpora = _order(list(dict.fromkeys(values["corpus"])))
    table = decisions(values, order=corpora)
    sd = seed_sd(values)
    headline = [m for m in ("average", *CONTINUOUS) if m in set(values["metric"])]
    decided = table[table["decided"] & table["metric"].isin(headline)]
    notes = [f"Decisions (a t-test over seeds, paired by seed, Holm-corrected over each metric's pairs, "
             f"p < {ALPHA}): {len(decided)} of {int(table['metric'].isin(headline).sum())} (pair, metric) "
             f"comparisons on {', '.join(headline)}. The seeds vary initialisation and data order only: the "
             "evaluation items are the same for every corpus, so item sampling is not in the standard errors and "
             "a decision holds for these items; `curate experiment=decide` counts both."]
    notes += decided["verdict"].tolist()
    notes += paper_verdict(table, headline, corpora)
    if REFERENCE in corpora and "mc_correct_prob_per_char" in headline:
        undecided = table[(table["metric"] == "mc_correct_prob_per_char") & ~table["decided"]
                          & ((table["corpus_a"] == REFERENCE) | (table["corpus_b"] == REFERENCE))]
        for _, r in undecided.iterrows():
            notes.append(f"No decision vs {REFERENCE}: {r['verdict']}.")
    return table, sd, notes


def _figures(table: pd.DataFrame, histories: Histories, runs: pd.DataFrame) -> dict[str, Any]:
    import matplotlib.pyplot as plt

    figures: dict[str, Any] = {}
    shown = table[table["corpus"] != "chance"]
    columns = [c for c in (*ABILITIES, "average") if c in table.columns]
    # ours on the left, the paper's rows (1.5B dense, 400B tokens) on the right: a corpus and its paper
    # analogue in the same colour
    fig, (ax, theirs) = plt.subplots(1, 2, figsize=(13, 3.6), gridspec_kw={"width_ratios": [3, 2]})
    colour = {corpus: f"C{i}" for i, corpus in enumerate(shown["corpus"])}
    width = 0.8 / max(len(shown), 1)
    x = np.arange(len(columns))
    for i, (_, row) in enumerate(shown.iterrows()):
        ax.bar(x + i * width, [row[c] for c in columns], width, yerr=[row[f"{c}_sd"] for c in columns],
               capsize=2, label=row["corpus"], color=colour[row["corpus"]])
    chance = table[table["corpus"] == "chance"]
    if not chance.empty:
        for j, c in enumerate(columns):
            ax.hlines(chance.iloc[0][c], j - 0.1, j + 0.9, colors="black", linestyles="dotted", linewidth=1)
    ax.set_xticks(x + width * (len(shown) - 1) / 2, columns)
    ax.set_ylabel("score (%), mean ± sd over seeds")
    ax.set_title("this run: DATAMASK Table 2 at tiny scale (dotted: chance)", fontsize=9)
    ax.legend(fontsize=7, ncol=3)
    ours_of = {ANALOGUE.get(c): c for c in shown["corpus"] if ANALOGUE.get(c)}
    paper_columns = [c for c in columns if c in PAPER.columns]
    pwidth = 0.8 / len(PAPER)
    for i, (_, row) in enumerate(PAPER.iterrows()):
        mine = ours_of.get(row["corpus"])
        theirs.bar(np.arange(len(paper_columns)) + i * pwidth, [row[c] for c in paper_columns], pwidth,
                   label=row["corpus"] + (f" (~ {mine})" if mine else ""),
                   color=colour.get(mine, "lightgrey"), edgecolor="black", linewidth=0.4)
    theirs.set_gid(PAPER_GID)
    theirs.set_xticks(np.arange(len(paper_columns)) + pwidth * (len(PAPER) - 1) / 2, paper_columns)
    theirs.set_ylim(30, 60)
    theirs.set_ylabel("accuracy (%)")
    theirs.set_title("paper: 1.5B dense, 400B tokens per corpus (seeds/000 Table 2)", fontsize=9)
    theirs.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    figures["table2_abilities"] = fig

    curves = []
    for _, run in runs.iterrows():
        frame = histories.get(run["run_id"], {}).get("loss")
        if frame is not None and not frame.empty:
            curves.append(frame.assign(corpus=run[CORPUS_PARAM]))
    if curves:
        fig, ax = plt.subplots(figsize=(6, 3.2))
        loss = pd.concat(curves).groupby(["corpus", "step"])["value"].mean().unstack("corpus")
        for corpus in _order(list(loss.columns)):
            ax.plot(loss.index, loss[corpus], label=corpus, linewidth=1)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("training loss (nats/token), seed mean")
        ax.set_title("Pre-training loss per corpus (each on its own data)", fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        figures["table2_loss"] = fig
    return figures


def build_table2(runs: pd.DataFrame, histories: Histories, tables: Tables) -> Report:
    missing = [c for c in (CORPUS_PARAM, SEED_PARAM) if c not in runs]
    if missing:
        raise ValueError(f"the runs lack {missing}: they are not table2 cells (curate experiment={NAME})")
    table, per_task, notes = table2(runs)
    task_lines = ["Per task (seed mean, %): " + "; ".join(
        f"{row['task']}: " + ", ".join(f"{c} {row[c]:.1f}" for c in per_task.columns[2:] if pd.notna(row[c]))
        for _, row in per_task.iterrows())]
    n_seeds = int(runs[SEED_PARAM].nunique())
    decided, sd, decision_notes = table2_decisions(runs)
    figures = _figures(table, histories, runs)
    if not decided.empty and REFERENCE in set(decided["corpus_a"]) | set(decided["corpus_b"]):
        from curation.reporting.decisions import heatmap

        shown = [m for m in ("average", *ABILITIES, *CONTINUOUS) if m in set(decided["metric"])]
        figures["table2_decisions"] = heatmap(decided, REFERENCE, shown, "Table 2 (tiny): corpus - raw")
    sd_line = ["Seed sd per metric (mean over corpora): " + "; ".join(
        f"{r['metric']} {r['sd_mean']:.3g}" for _, r in sd.iterrows()
        if r["metric"] in ("average", *CONTINUOUS))]
    return Report(f"DATAMASK Table 2 at tiny scale (tiny LM, equal token budgets, {n_seeds} seeds)", table.round(2),
                  figures, PAPER, notes + decision_notes + sd_line + task_lines, decisions=decided)


ARTEFACTS = {NAME: Artefact("DATAMASK Table 2 (tiny)", build_table2, ("loss",))}
