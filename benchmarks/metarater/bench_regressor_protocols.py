"""Meta-rater regression protocols on a SYNTHETIC ground truth (issue #27, item 3).

How much of the possible gain over uniform weights does w* recover, for N proxies, under
``regression.protocol=official`` (step3 of the official Meta-rater code: first 80% train, last 20%
early-stop + test, 5 rounds) and the project's ``separate_early_stop`` (random 60/20/20, 3 rounds)?

Ground truth (synthetic, not data): 17 raters, proxy loss f(w) = a . w + (w - m)' diag(h) (w - m) plus proxy
seed noise; w* searched as in the pipeline; recovered = (f(u) - f(w*)) / (f(u) - f(w*_oracle)) on true losses
(1 = all the gain the search can give, 0 = no better than uniform).

    PYTHONPATH=src nice -n 10 python benchmarks/metarater/bench_regressor_protocols.py [--reps 10]

Writes benchmarks/results/metarater_regressor_protocols.csv (+ _runs.csv, one row per repetition) and .png.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from curation.metarater.core import RegressionConfig, dirichlet_weights, fit_regressor, search_weights

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402
from _driver import RESULTS  # noqa: E402

M = 17
NS = (32, 64, 128, 256)

SETTINGS = {
    # the official step3 exactly: first 80% train, last 20% early-stop (5 rounds) + test, LightGBM defaults
    "official_step3": RegressionConfig(protocol="official", early_stopping_rounds=5, min_child_samples=20),
    # metarater=paper: the same, min_child_samples chosen from N (auto; = 20 from N = 100)
    "paper": RegressionConfig(protocol="official", early_stopping_rounds=5, min_child_samples=None),
    # the project's earlier protocol: random 60/20/20 (separate early-stop split), 3 rounds, LightGBM's 20
    "separate_early_stop": RegressionConfig(protocol="separate_early_stop", early_stopping_rounds=3,
                                            min_child_samples=20),
    # the same with min_child_samples from N
    "separate_early_stop_auto": RegressionConfig(protocol="separate_early_stop", early_stopping_rounds=3,
                                                 min_child_samples=None),
}


class Truth:
    """The true f; with ``predict``, also the oracle "regressor"."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.a = rng.normal(size=M)
        self.m = rng.dirichlet(np.ones(M))
        self.h = rng.uniform(1.0, 10.0, size=M)

    def __call__(self, w: np.ndarray) -> np.ndarray:
        w = np.atleast_2d(w)
        return w @ self.a + ((w - self.m) ** 2 * self.h).sum(axis=1)

    predict = __call__


def run(reps: int, n_candidates: int, settings: list[str]) -> pd.DataFrame:
    rows = []
    uniform = np.full(M, 1.0 / M)
    for rep in range(reps):
        rng = np.random.default_rng(1000 + rep)
        truth = Truth(rng)
        spread = truth(rng.dirichlet(np.ones(M), size=4096)).std()
        weights = dirichlet_weights(max(NS), M, seed=rep)
        losses = truth(weights) + rng.normal(scale=0.3 * spread, size=len(weights))
        oracle, _ = search_weights(truth, M, n_candidates=n_candidates, top_k=128, seed=10_000 + rep)
        possible = float(truth(uniform)[0] - truth(oracle)[0])
        for name in settings:
            for n in NS:
                model, metrics = fit_regressor(weights[:n], losses[:n], SETTINGS[name])
                w_star, _ = search_weights(model, M, n_candidates=n_candidates, top_k=128, seed=10_000 + rep)
                gain = float(truth(uniform)[0] - truth(w_star)[0])
                rows.append({"setting": name, "protocol": SETTINGS[name].protocol, "num_proxies": n, "rep": rep,
                             "recovered": gain / possible, "best_iteration": metrics["best_iteration"],
                             "min_child_samples": metrics["min_child_samples"], "constant": metrics["constant"],
                             "spearman_test": metrics["spearman_test"]})
        print(f"rep {rep + 1}/{reps} done", flush=True)
    return pd.DataFrame(rows)


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    g = table.groupby(["setting", "num_proxies"])
    out = pd.DataFrame({"recovered_mean": g["recovered"].mean(),
                        "recovered_se": g["recovered"].std(ddof=1) / np.sqrt(g["recovered"].count()),
                        "constant_share": g["constant"].mean(), "best_iteration_median": g["best_iteration"].median(),
                        "min_child_samples": g["min_child_samples"].first(), "reps": g["recovered"].count()})
    return out.reset_index()


def plot(summary: pd.DataFrame, path: Path) -> None:
    with bench.figure(path, figsize=(6.4, 4.2), dpi=120) as (fig, ax):
        for name, part in summary.groupby("setting", sort=False):
            ax.errorbar(part["num_proxies"], part["recovered_mean"], yerr=part["recovered_se"], marker="o", capsize=3,
                        label=name)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(NS), [str(n) for n in NS])
        ax.set_xlabel("proxies N")
        ax.set_ylabel("share of the possible gain over uniform recovered")
        ax.set_title("Meta-rater regression protocols (synthetic ground truth, 17 raters)")
        ax.legend(fontsize=8)


def main() -> None:
    args = bench.parser(__doc__, reps=10, candidates=100_000,
                        settings={"nargs": "*", "default": list(SETTINGS)}).parse_args()
    started = time.perf_counter()
    table = run(args.reps, args.candidates, args.settings)
    summary = summarize(table)
    bench.write_result(table, RESULTS / "metarater_regressor_protocols_runs.csv")  # and makes the folder
    summary.to_csv(RESULTS / "metarater_regressor_protocols.csv", index=False, float_format="%.4f")
    plot(summary, RESULTS / "metarater_regressor_protocols.png")
    print(summary.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
