"""Does annealing verification rank corpora as from-scratch training does? (issue #21 item 4)

Reads the Table 2 sweep (`curate experiment=table2_tiny`) and the verification sweep over the same corpora
(`curate -m experiment=ufw_rank_agreement`) from MLflow and sets the two rankings side by side per metric
(:func:`curation.reporting.decisions.rank_agreement`), with the verification's decisions and each protocol's
compute.

    PYTHONPATH=src python benchmarks/pretraining/rank_agreement.py
writes benchmarks/results/ufw_rank_agreement.csv, ufw_rank_agreement_decisions.csv, ufw_rank_agreement.png.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402
from _driver import METRICS, ROOT  # noqa: E402

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


def main() -> None:
    from curation.config_loader import compose_config
    from curation.reporting.decisions import decisions, rank_agreement
    from curation.reporting.table2 import ORDER, decision_values
    from curation.tracking.report_runs import fetch_runs
    from curation.tracking.store import resolve_uri

    args = bench.parser(__doc__, train_experiment="table2_tiny", verify_experiment="ufw_rank_agreement", ratio="r0.30",
                        out=bench.RESULTS).parse_args()
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

if __name__ == "__main__":
    main()
