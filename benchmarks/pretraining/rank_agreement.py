"""Does annealing verification rank corpora as from-scratch training does? (issue #21 item 4)

Reads two MLflow experiments of this project -- the Table 2 sweep (`curate experiment=table2_tiny`:
each corpus trained from scratch, 3 seeds) and the verification sweep over the same six corpora
(`curate -m experiment=ufw_rank_agreement`: 3 verification seeds, each its own base model) -- and
sets the two protocols' rankings side by side per metric (:func:`curation.reporting.decisions.rank_agreement`):
Kendall tau of the corpus means, sign agreement of every pair, and how many pairs each protocol decides
(> 2 SE over seeds) and whether the decided ones agree. Also the decisions of the verification alone,
and the compute of each protocol (training tokens and wall seconds, from the runs).

    PYTHONPATH=src python benchmarks/pretraining/rank_agreement.py
writes benchmarks/results/ufw_rank_agreement.csv, ufw_rank_agreement_decisions.csv, ufw_rank_agreement.png.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
SEED = "params.verification.seed"
METRICS = ("average", "mc_correct_prob_per_char", "mc_norm_correct_prob_per_char", "mc_margin_per_char",
           "mc_correct_logprob_per_char", "ref_bits_per_byte")


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


def main() -> None:
    import matplotlib.pyplot as plt

    from curation.config_loader import compose_config
    from curation.reporting.decisions import decisions, rank_agreement
    from curation.reporting.table2 import ORDER, decision_values
    from curation.tracking.report_runs import fetch_runs
    from curation.tracking.store import resolve_uri

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-experiment", default="table2_tiny")
    parser.add_argument("--verify-experiment", default="ufw_rank_agreement")
    parser.add_argument("--ratio", default="r0.30")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args()
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

    fig, axes = plt.subplots(1, len(METRICS), figsize=(3.0 * len(METRICS), 3.0))
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
    fig.tight_layout()
    fig.savefig(out / "ufw_rank_agreement.png", dpi=120)


if __name__ == "__main__":
    main()
