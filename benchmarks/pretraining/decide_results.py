"""Decision results rebuilt from a run's files or MLflow records (issues #21, #38 and #43).

    # the report of a namespace's outputs, finished cells from the content cache (an interim report of a long
    # ladder, or a run reported with today's statistics): what the job's report node writes, into --out
    PYTHONPATH=src .venv/bin/python benchmarks/pretraining/decide_results.py report --namespace ladder_B1 \
        --out benchmarks/results/decide_ladder_B1 --overrides experiment=decide_ladder [overrides...]
    # a committed run's report remade from its own decide_cells.csv and decide_items.parquet under today's rule
    # (issue #51: the headline named before the run, the family, the looks), written over the folder's report files
    .venv/bin/python benchmarks/pretraining/decide_results.py rereport --folder benchmarks/results/decide_ladder_B1 \
        --overrides experiment=decide_ladder data.path=data/01_raw/corpus
    # Markdown tables of a run's files, for REPRODUCING.md
    .venv/bin/python benchmarks/pretraining/decide_results.py tables --folder benchmarks/results/decide_A3
    # the issue-38 decisions re-checked with the full SE: decide_B1_sizes/full_se_recheck.csv
    .venv/bin/python benchmarks/pretraining/decide_results.py recheck
    # what evaluating every item a task ships would cost per cell, measured: eval_cost.csv beside the log
    .venv/bin/python benchmarks/pretraining/decide_results.py eval_cost \
        --log benchmarks/results/decide_ladder_B1/run.log
    # training vs annealing verification per metric (issue #21 item 4), from the MLflow runs of `curate
    # experiment=table2_tiny` and `curate -m experiment=ufw_rank_agreement`: ufw_rank_agreement*.csv and .png
    PYTHONPATH=src .venv/bin/python benchmarks/pretraining/decide_results.py rank_agreement
    # a second corpus (issue #43 item 6): the bundled corpus's web documents in the half that
    # scoring.training.holdout_fraction=0.5 keeps from every rater, as an id + text corpus, and its provenance
    .venv/bin/python benchmarks/pretraining/decide_results.py heldout_web --out data/01_raw/heldout_web
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402
from _driver import METRICS, ROOT  # noqa: E402
from gpu_cells import compose  # noqa: E402


def report(args) -> None:
    """The config composed as ``curate`` would, :func:`curation.decide.cells.run_cells` on the namespace's
    outputs, and the report node's files (decide_cells.csv, decisions.csv, ..., recommendation.md)."""
    from curation.decide.cells import run_cells
    from curation.lm import parse_config
    from curation.reporting.decide import build_report, parse_decide
    from curation.reporting.decide_items import items_frame
    from curation.reporting.decide_stats import chance_levels

    cfg, frames, cache = compose([*args.overrides, f"run.namespace={args.namespace}"], args.namespace)
    decide = parse_decide(cfg["decide"])
    cells, items = run_cells(frames, decide.candidates, decide.sizes, decide.seeds, cfg["budget"],
                             parse_config(cfg["pretrain"]), cfg["eval"], int(cfg["run"]["seed"]), cache,
                             rungs=decide.rungs, draws=decide.draws)
    result = build_report(cells, items, decide, int(cfg["eval"].get("limit") or 0),
                          corpus=str(cfg["data"].get("path") or ""), chance=chance_levels(cfg["eval"]))
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    cells.to_csv(out / "decide_cells.csv", index=False)
    items_frame(items).to_parquet(out / "decide_items.parquet", index=False)
    _write(result, out)
    print(f"cached cells: {int(cells['pretrain_cache_hit'].sum())} of {len(cells)} trained models, "
          f"{int(cells['eval_cache_hit'].sum())} evaluations", file=sys.stderr)


def rereport(args) -> None:
    """A committed run's report files remade from its cells and items (no training) under today's rule."""
    from curation.config_loader import compose_config
    from curation.reporting.decide import build_report, parse_decide
    from curation.reporting.decide_items import items_from_frame
    from curation.reporting.decide_stats import chance_levels

    cfg = compose_config(ROOT / "conf", list(args.overrides))
    cells = pd.read_csv(args.folder / "decide_cells.csv")
    items = items_from_frame(pd.read_parquet(args.folder / "decide_items.parquet"))
    result = build_report(cells, items, parse_decide(cfg["decide"]), int(cfg["eval"].get("limit") or 0),
                          corpus=str(cfg["data"].get("path") or ""), chance=chance_levels(cfg["eval"]))
    _write(result, args.folder)


def _write(result, out: Path) -> None:
    for name, table in (("decisions", result.table), ("size_agreement", result.agreement),
                        ("item_vs_seed", result.errors), ("snr", result.snr), ("tasks", result.tasks)):
        table.to_csv(out / f"{name}.csv", index=False)
    result.figure.savefig(out / "decisions.png", dpi=110)
    if result.ladder_figure is not None:
        result.ladder_figure.savefig(out / "ladder.png", dpi=110)
    (out / "recommendation.md").write_text(result.text)
    print(result.text)


def tables(args) -> None:
    """decide_cells.csv, decisions.csv, item_vs_seed.csv and (two sizes or rungs) size_agreement.csv, snr.csv
    and tasks.csv as Markdown. Runs before issue #43 have no ``scale`` (grouped by size) and a seed-only ``se``."""
    folder = args.folder
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
    for name, title in (("item_vs_seed.csv", "items vs seeds"), ("size_agreement.csv", "agreement with the top scale"),
                        ("snr.csv", "signal and noise"), ("tasks.csv", "tasks against chance at the top scale")):
        path = folder / name
        if path.is_file() and path.stat().st_size > 1:
            print(f"\n### {title}\n")
            print(pd.read_csv(path).to_markdown(index=False, floatfmt=".3g"))


ITEMS = 1000  # recheck: 10 tasks x 100 items per cell in the issue-38 runs
BORROW = {"medium": "small"}  # recheck: the GPU size recorded no items


def recheck(args) -> None:
    """The issue-38 decisions (seed-only SE, "decided" at 2 SE) with the full SE of issue #43. Those runs kept
    per-cell means but no per-item scores, so each difference's item SE is the run's ``item_vs_seed.csv`` value
    (``item_se_diff``) at that size; the 29.4M GPU size borrows 12.6M's. The test is decide's own (Cochran-Cox on
    the seed and item parts, Holm over the size's pairs on each metric)."""
    from curation.reporting.decide_stats import cochran_cox_p, holm

    run = ROOT / "benchmarks" / "results" / "decide_B1_sizes"
    items = pd.read_csv(run / "item_vs_seed.csv").set_index(["size", "metric"])["item_se_diff"]
    cpu = pd.read_csv(run / "decisions.csv")
    gpu = pd.read_csv(run / "gpu" / "decisions.csv")
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
    bench.write_result(out, args.out)
    summary = out.groupby(["size", "metric"])[["decided_issue38", "decided_full"]].sum().astype(int)
    print(summary.to_string())
    print(f"decided, issue 38: {int(out['decided_issue38'].sum())} of {len(out)}; full SE + Holm: "
          f"{int(out['decided_full'].sum())}")


LINE = re.compile(r"INFO\s+(\w+): \w+=[\d.]+ on (\d+)\s+items\s+\(([\d.]+)s\)")


def eval_cost(args) -> None:
    """Per task, from the evaluation times a decide run logged (``<task>: <metric>=... on 100 items (<s>s)``) and
    the item counts the offline task files hold: the median seconds per item and the minutes of one cell at 100
    items and at every item."""
    from curation.evaluation.tasks import load_task

    # rich wraps a long record onto the next lines: join them before matching
    text = re.sub(r"\s+runs\.py:\d+\s*\n\s{20,}", " ", args.log.read_text())
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
    out = args.log.with_name("eval_cost.csv")
    table.to_csv(out, index=False, float_format="%.4g")
    print(table.to_string(index=False))
    print(f"wrote {out}")


# --- rank agreement: training vs verification (issue #21) ------------------------------------------------------

SEED = "params.verification.seed"


def verification_values(runs: pd.DataFrame, ratio_label: str, corpora) -> pd.DataFrame:
    """Long (corpus, seed, metric, value) of each candidate's annealed model; ``average`` in percent like Table 2."""
    rows = []
    for _, run in runs.iterrows():
        for corpus in corpora:
            for metric in METRICS:
                column = f"metrics.{corpus}_{ratio_label}_{metric}"
                if column in run and pd.notna(run[column]):
                    rows.append({"corpus": corpus, "seed": int(run[SEED]), "metric": metric,
                                 "value": float(run[column])})
    return pd.DataFrame(rows, columns=["corpus", "seed", "metric", "value"])


def agreement(args) -> None:
    """Training vs verification rankings per metric (:func:`curation.reporting.decisions.rank_agreement`)."""
    from curation.config_loader import compose_config
    from curation.reporting.decisions import decisions, rank_agreement
    from curation.reporting.table2 import ORDER, decision_values
    from curation.tracking.report_runs import fetch_runs
    from curation.tracking.store import resolve_uri

    uri = resolve_uri(compose_config(ROOT / "conf")["tracking"]["uri"], ROOT)
    train_runs = fetch_runs(uri, args.train_experiment, "latest_sweep", [], []).runs
    verify_runs = fetch_runs(uri, args.verify_experiment, "latest_sweep", [], []).runs
    train = decision_values(train_runs)
    train = train[train["metric"].isin(METRICS)]
    verify = verification_values(verify_runs, args.ratio, ORDER)
    table = rank_agreement(train, verify, METRICS, names=("training", "verification"))
    # Compute per protocol from what the runs recorded (the sweeps' own wall clocks include content-cache
    # hits, seconds for a cell trained in an earlier sweep): training = each cell's train_seconds; verification
    # = each seed's whole pipeline (base model, every annealing run and every evaluation).
    def metric(runs: pd.DataFrame, name: str) -> pd.Series:
        return pd.to_numeric(runs.get(f"metrics.{name}", pd.Series(dtype=float)), errors="coerce")

    n_candidates = verify["corpus"].nunique()
    compute = pd.DataFrame([
        {"protocol": "training (from scratch)", "runs": len(train_runs),
         "tokens_per_corpus_and_seed": float(metric(train_runs, "train_tokens").mean()),
         "shared_tokens_per_seed": 0.0,
         "seconds_total": float(metric(train_runs, "train_seconds").sum()),
         "what_the_seconds_cover": "training only (evaluation excluded)"},
        {"protocol": "verification (annealing)", "runs": len(verify_runs),
         "tokens_per_corpus_and_seed": float(metric(verify_runs, "anneal_tokens").mean()),
         "shared_tokens_per_seed": float(metric(verify_runs, "base_train_tokens").mean()),
         "seconds_total": float(metric(verify_runs, "pipeline_seconds").sum()),
         "what_the_seconds_cover": f"base model, {n_candidates} annealed candidates + default mix, and every "
                                   "evaluation"},
    ])
    out = Path(args.out)
    table.to_csv(out / "ufw_rank_agreement.csv", index=False)
    compute.to_csv(out / "ufw_rank_agreement_compute.csv", index=False)
    verdicts = decisions(verify, METRICS, order=list(ORDER))
    verdicts.to_csv(out / "ufw_rank_agreement_decisions.csv", index=False)
    print(table.to_string(index=False))
    print(compute.to_string(index=False))
    print("\n".join(verdicts[verdicts["decided"]]["verdict"]))

    with bench.figure(out / "ufw_rank_agreement.png", 1, len(METRICS), figsize=(3.0 * len(METRICS), 3.0),
                      dpi=120) as (fig, axes):
        for ax, metric in zip(axes, METRICS):
            a = train[train["metric"] == metric].groupby("corpus")["value"].agg(["mean", "sem"])
            b = verify[verify["metric"] == metric].groupby("corpus")["value"].agg(["mean", "sem"])
            common = [c for c in ORDER if c in a.index and c in b.index]
            if not common:
                continue
            ax.errorbar(a.loc[common, "mean"], b.loc[common, "mean"], xerr=a.loc[common, "sem"],
                        yerr=b.loc[common, "sem"], fmt="o", markersize=4)
            for c in common:
                ax.annotate(c, (a.loc[c, "mean"], b.loc[c, "mean"]), fontsize=6, xytext=(2, 2), textcoords="offset points")
            row = table[table["metric"] == metric]
            tau = float(row["kendall_tau"].iloc[0]) if len(row) else np.nan
            ax.set_title(f"{metric}\ntau = {tau:.2f}", fontsize=7)
            ax.set_xlabel("from scratch", fontsize=7)
            ax.set_ylabel("verification (annealed)", fontsize=7)
            ax.tick_params(labelsize=6)
        fig.suptitle("Corpus means (± SE over 3 seeds): training from scratch vs annealing verification", fontsize=9)


def heldout_web(args) -> None:
    """The held-out web documents as ``<out>/heldout_web.parquet`` and their ``provenance.json``."""
    from curation.scoring.training_sets import TrainingSetConfig, category_of, holdout_rows

    fraction, df = 0.5, bench.bundled()
    held = holdout_rows(df["id"].tolist(), fraction, TrainingSetConfig.holdout_salt)
    web = (category_of(df["extra"]) == "web").to_numpy()
    keep = df.loc[held & web, ["id", "text"]].reset_index(drop=True)
    args.out.mkdir(parents=True, exist_ok=True)
    keep.to_parquet(args.out / "heldout_web.parquet", index=False)
    record = {
        "source": str(bench.CORPUS.relative_to(ROOT)),
        "rule": f"extra.category == 'web' and holdout_rows(id, {fraction}, '{TrainingSetConfig.holdout_salt}')",
        "documents": len(keep),
        "characters": int(keep["text"].str.len().sum()),
        "of_web": int(web.sum()),
        "of_all": len(df),
    }
    (args.out / "provenance.json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record))


def main() -> None:
    req = {"required": True, "type": Path}
    args = bench.commands(
        __doc__, report=dict(namespace={"required": True}, out=req,
                             overrides={"nargs": "*", "default": [], "help": "Hydra overrides, as for curate"}),
        tables=dict(folder=req), rereport=dict(folder=req, overrides={"nargs": "*", "default": [],
                                                                     "help": "Hydra overrides, as for curate"}), recheck=dict(out=bench.RESULTS / "decide_B1_sizes" / "full_se_recheck.csv"),
        eval_cost=dict(log=req), heldout_web=dict(out=req),
        rank_agreement=dict(train_experiment="table2_tiny", verify_experiment="ufw_rank_agreement", ratio="r0.30",
                            out=bench.RESULTS)).parse_args()
    {"report": report, "rereport": rereport, "tables": tables, "recheck": recheck, "eval_cost": eval_cost, "heldout_web": heldout_web,
     "rank_agreement": agreement}[args.command](args)


if __name__ == "__main__":
    main()
