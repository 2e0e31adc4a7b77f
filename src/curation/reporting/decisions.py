"""Decisions, not numbers: which corpus trains the better model, per metric, with standard errors.

For every pair of corpora and every metric, :func:`decisions` takes the
per-seed values of both, and reports the mean difference, its standard error
over seeds, the seed-level agreement, the t-test's p and a verdict only where
that p, Holm-corrected over the metric's K(K-1)/2 pairs, is below ``alpha``
(0.05); otherwise "no decision". This is the reading DataDecide (Magnusson et
al., ICML 2025, Sec. 3-4) makes of small-scale runs: a ranking is a set of
pairwise decisions, and the continuous likelihood metrics decide pairs that
accuracy at the same scale leaves to noise. With 3 seeds (2 degrees of
freedom) a decision needs |t| > 4.30 for one pair, more under Holm; the
2-standard-error rule this module used before decided a truly null pair 18%
of the time at 3 seeds.

What the error counts: the seeds only (initialisation and data order). The
evaluation items are the same for every corpus, so a decision here is about
these items; a decision that also counts item sampling needs per-item values
(``experiment=decide``: :mod:`curation.reporting.decide_stats`).

Paired or not: when both corpora were trained with the same seeds (the same
initialisation and data order seed, as the Table 2 sweep does), the
difference is taken seed by seed and its standard error is ``sd(d) / sqrt(n)``
(a paired comparison: the seed's own luck cancels). Otherwise the two means
are compared with Welch's standard error ``sqrt(s_a^2 / n_a + s_b^2 / n_b)``.
Agreement is the share of seeds whose difference has the sign of the mean
(paired) or, unpaired, the share of (seed of a, seed of b) pairs ordered as
the means are. A verdict needs at least 2 seeds on each side.

No Kedro or MLflow here: the Table 2, Ultra-FineWeb and Meta-rater reports
call it on the runs they fetched.
"""

from __future__ import annotations

from itertools import combinations
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np
import pandas as pd

# Metrics where lower is better (losses); every other metric is higher-is-better.
LOWER_IS_BETTER_SUFFIXES = ("loss", "bits_per_byte", "nats_per_token", "perplexity")
ALPHA = 0.05  # a decision needs its Holm-corrected p below this


def higher_is_better(metric: str) -> bool:
    return not metric.endswith(LOWER_IS_BETTER_SUFFIXES)


def _pair(a: pd.Series, b: pd.Series) -> tuple[float, float, int, float, bool, float]:
    """(mean diff a - b, its se, seeds, agreement, paired, degrees of freedom) from per-seed values
    indexed by seed; df is n - 1 paired, Welch-Satterthwaite's otherwise."""
    common = a.index.intersection(b.index)
    if len(common) >= 2 and len(common) == len(a) == len(b):
        d = (a.loc[common] - b.loc[common]).astype(float)
        mean = float(d.mean())
        se = float(d.std(ddof=1) / np.sqrt(len(d)))
        agree = float(np.mean(np.sign(d) == np.sign(mean))) if mean != 0 else 0.0
        return mean, se, len(d), agree, True, float(len(d) - 1)
    mean = float(a.mean() - b.mean())
    if len(a) < 2 or len(b) < 2:
        return mean, float("nan"), min(len(a), len(b)), float("nan"), False, float("nan")
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = float(np.sqrt(va + vb))
    df = float((va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))) if va + vb > 0 else float("nan")
    grid = np.subtract.outer(a.to_numpy(float), b.to_numpy(float))
    agree = float(np.mean(np.sign(grid) == np.sign(mean))) if mean != 0 else 0.0
    return mean, se, min(len(a), len(b)), agree, False, df


def p_value(mean: float, se: float, df: float) -> float:
    """Two-sided Student-t p-value of a mean difference with standard error ``se`` and ``df`` degrees of
    freedom (the paired or Welch test behind :func:`decisions`). With 3 seeds (df 2) ``p_value < 0.05``
    needs |t| > 4.30."""
    from scipy.stats import t as student_t

    if not (np.isfinite(se) and np.isfinite(df)) or df <= 0:
        return float("nan")
    if se == 0:
        return 0.0 if mean != 0 else 1.0
    return float(2.0 * student_t.sf(abs(mean) / se, df))


def holm(p: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (NaN stays NaN and does not count in the family)."""
    p = np.asarray(p, dtype=float)
    out = np.full_like(p, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = len(ok)
    running = 0.0
    for rank, i in enumerate(ok[np.argsort(p[ok], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def decisions(values: pd.DataFrame, metrics: Optional[Sequence[str]] = None, order: Optional[Sequence[str]] = None,
              labels: Optional[Mapping[str, str]] = None, alpha: float = ALPHA) -> pd.DataFrame:
    """One row per (pair of corpora, metric).

    values: long frame with columns ``corpus``, ``seed``, ``metric``, ``value`` (one value per
        corpus, seed and metric; duplicates are averaged).
    metrics: which metrics (default: all, in order of appearance); order: corpus order (pairs are
        (earlier, later)); labels: readable metric names for the verdicts.

    Columns: corpus_a, corpus_b, metric, mean_a, mean_b, mean_diff (a - b), se, seeds, paired,
    agreement, df, p_value (two-sided t-test, :func:`p_value`), p_holm (Holm-corrected over the metric's
    pairs), decided (p_holm < ``alpha``, the rule the verdicts follow), winner, verdict.
    """

    frame = values.groupby(["corpus", "seed", "metric"], as_index=False)["value"].mean()
    metrics = list(metrics) if metrics is not None else list(dict.fromkeys(frame["metric"]))
    corpora = list(dict.fromkeys(frame["corpus"]))
    if order is not None:
        corpora = [c for c in order if c in corpora] + [c for c in corpora if c not in order]
    rows = []
    for metric in metrics:
        per = frame[frame["metric"] == metric]
        series = {c: per[per["corpus"] == c].set_index("seed")["value"] for c in corpora}
        family = []
        for a, b in combinations(corpora, 2):
            sa, sb = series[a].dropna(), series[b].dropna()
            if sa.empty or sb.empty:
                continue
            mean, se, n, agree, paired, df = _pair(sa, sb)
            family.append({"corpus_a": a, "corpus_b": b, "metric": metric, "mean_a": float(sa.mean()),
                           "mean_b": float(sb.mean()), "mean_diff": mean, "se": se, "seeds": n, "paired": paired,
                           "agreement": agree, "df": df, "p_value": p_value(mean, se, df)})
        name = (labels or {}).get(metric, metric)
        for r, p_holm in zip(family, holm([r["p_value"] for r in family])):
            a, b, mean, se = r["corpus_a"], r["corpus_b"], r["mean_diff"], r["se"]
            decided = bool(np.isfinite(p_holm) and p_holm < alpha and mean != 0)
            winner = (a if (mean > 0) == higher_is_better(metric) else b) if decided else ""
            if decided:
                verdict = (f"{winner} beats {b if winner == a else a} on {name} by {abs(mean):.4g} ± {se:.2g} "
                           f"(Holm p {p_holm:.2g})")
            else:
                verdict = (f"no decision on {name}: {mean:+.4g} ± {se:.2g} (Holm p {p_holm:.2g})"
                           if np.isfinite(p_holm) else f"no decision on {name}: fewer than 2 seeds")
            rows.append({**r, "p_holm": p_holm, "decided": decided, "winner": winner, "verdict": verdict})
    columns = ["corpus_a", "corpus_b", "metric", "mean_a", "mean_b", "mean_diff", "se", "seeds", "paired",
               "agreement", "df", "p_value", "p_holm", "decided", "winner", "verdict"]
    return pd.DataFrame(rows, columns=columns)


def seed_sd(values: pd.DataFrame) -> pd.DataFrame:
    """Seed-to-seed standard deviation of each metric within each corpus, and its mean over corpora
    (the noise a difference must beat): columns metric, sd_mean, sd_max, corpora, seeds."""
    sd = values.groupby(["metric", "corpus"])["value"].agg(["std", "count"]).reset_index()
    out = sd.groupby("metric").agg(sd_mean=("std", "mean"), sd_max=("std", "max"), corpora=("corpus", "nunique"),
                                   seeds=("count", "min"))
    return out.reset_index()


def against(table: pd.DataFrame, reference: str) -> pd.DataFrame:
    """The rows of ``table`` that compare a corpus with ``reference``, as (corpus, metric, diff vs reference,
    se, decided): the difference is corpus - reference whichever side of the pair it was on."""
    rows = []
    for _, r in table.iterrows():
        if reference not in (r["corpus_a"], r["corpus_b"]):
            continue
        sign = -1.0 if r["corpus_a"] == reference else 1.0
        corpus = r["corpus_b"] if r["corpus_a"] == reference else r["corpus_a"]
        rows.append({"corpus": corpus, "metric": r["metric"], "diff": sign * r["mean_diff"], "se": r["se"],
                     "decided": bool(r["decided"])})
    return pd.DataFrame(rows, columns=["corpus", "metric", "diff", "se", "decided"])


def heatmap(table: pd.DataFrame, reference: str, metrics: Optional[Iterable[str]] = None,
            title: str = "difference vs reference, in standard errors"):
    """Corpora x metrics heat map of (corpus - reference) / se, hatched where undecided (``decided``).

    Colour is the signed z-score with "better" positive (losses flipped), so one colour scale
    reads across metrics of different units; each cell prints the raw difference.
    """
    import matplotlib.pyplot as plt

    vs = against(table, reference)
    metrics = list(metrics) if metrics is not None else list(dict.fromkeys(vs["metric"]))
    corpora = list(dict.fromkeys(vs["corpus"]))
    z = np.full((len(corpora), len(metrics)), np.nan)
    raw = np.full_like(z, np.nan)
    decided = np.zeros_like(z, dtype=bool)
    for _, r in vs.iterrows():
        if r["metric"] not in metrics:
            continue
        i, j = corpora.index(r["corpus"]), metrics.index(r["metric"])
        better = r["diff"] if higher_is_better(r["metric"]) else -r["diff"]
        z[i, j] = better / r["se"] if r["se"] and np.isfinite(r["se"]) else np.nan
        raw[i, j], decided[i, j] = r["diff"], r["decided"]
    fig, ax = plt.subplots(figsize=(1.1 * len(metrics) + 2.5, 0.5 * len(corpora) + 1.8))
    limit = max(4.0, float(np.nanmax(np.abs(z))) if np.isfinite(z).any() else 4.0)
    image = ax.imshow(np.clip(z, -limit, limit), cmap="RdBu", vmin=-limit, vmax=limit, aspect="auto")
    for i in range(len(corpora)):
        for j in range(len(metrics)):
            if np.isnan(z[i, j]):
                continue
            if not decided[i, j]:
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", edgecolor="0.5",
                                           linewidth=0))
            ax.text(j, i, f"{raw[i, j]:+.3g}", ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(metrics)), metrics, rotation=40, ha="right", fontsize=7)
    ax.set_yticks(range(len(corpora)), corpora, fontsize=8)
    ax.set_title(f"{title} (vs {reference}; hatched: no decision)", fontsize=9)
    fig.colorbar(image, ax=ax, label="z = better-direction diff / se", shrink=0.8)
    fig.tight_layout()
    return fig


def rank_agreement(first: pd.DataFrame, second: pd.DataFrame, metrics: Optional[Sequence[str]] = None,
                   names: tuple[str, str] = ("first", "second")) -> pd.DataFrame:
    """Do two protocols rank the same corpora alike? (Ultra-FineWeb Sec. 3's claim that annealing
    verification stands in for training, tested as DataDecide Sec. 4 tests small-scale proxies.)

    first, second: long frames (``corpus``, ``seed``, ``metric``, ``value``), e.g. from-scratch training and
    annealing verification of the same corpora. Per metric found in both, over the corpora both have:

    - ``kendall_tau``: Kendall's tau-b between the two protocols' corpus means (higher-is-better or not
      does not matter: both protocols measure the same metric);
    - ``sign_agreement``: share of corpus pairs whose mean differences have the same sign in both;
    - ``decided_<name>``: pairs that protocol decides (:func:`decisions`: the t-test over seeds, Holm-corrected);
      ``decided_both``, ``agree_both`` (same winner), ``disagree_both`` (opposite winners) among them.
    """
    from scipy.stats import kendalltau

    a_name, b_name = names
    metrics = list(metrics) if metrics is not None else [m for m in dict.fromkeys(first["metric"])
                                                          if m in set(second["metric"])]
    rows = []
    for metric in metrics:
        fa, fb = first[first["metric"] == metric], second[second["metric"] == metric]
        corpora = [c for c in dict.fromkeys(fa["corpus"]) if c in set(fb["corpus"])]
        if len(corpora) < 2:
            continue
        ma = fa.groupby("corpus")["value"].mean().loc[corpora]
        mb = fb.groupby("corpus")["value"].mean().loc[corpora]
        tau = float(kendalltau(ma.to_numpy(), mb.to_numpy()).statistic) if len(corpora) > 2 else float("nan")
        da = decisions(fa[fa["corpus"].isin(corpora)], [metric], order=corpora).set_index(["corpus_a", "corpus_b"])
        db = decisions(fb[fb["corpus"].isin(corpora)], [metric], order=corpora).set_index(["corpus_a", "corpus_b"])
        common = da.index.intersection(db.index)
        da, db = da.loc[common], db.loc[common]
        both = da["decided"] & db["decided"]
        rows.append({
            "metric": metric, "corpora": len(corpora), "pairs": len(common), "kendall_tau": tau,
            "sign_agreement": float(np.mean(np.sign(da["mean_diff"]) == np.sign(db["mean_diff"]))),
            f"decided_{a_name}": int(da["decided"].sum()), f"decided_{b_name}": int(db["decided"].sum()),
            "decided_both": int(both.sum()), "agree_both": int((both & (da["winner"] == db["winner"])).sum()),
            "disagree_both": int((both & (da["winner"] != db["winner"])).sum()),
        })
    return pd.DataFrame(rows)


def paper_agreement(table: pd.DataFrame, paper: Mapping[str, float], higher_better: bool = True) -> pd.DataFrame:
    """Do the decided pairs order the corpora as a paper's table does?

    table: :func:`decisions` output; paper: corpus -> the paper's score (e.g. DATAMASK Table 2's average for
    each corpus's analogue), ``higher_better`` for that score. Per metric, over the pairs of corpora that both
    have a paper score and differ in it: ``pairs``, ``decided``, ``agree`` (our winner is the paper's),
    ``disagree`` (our winner is the paper's loser) and ``agree_pairs`` / ``disagree_pairs`` ("a>b; ...", our
    winner first). An undecided pair counts for neither: a small run that decides nothing neither supports
    nor refutes the paper.
    """
    rows = []
    for metric, group in table.groupby("metric", sort=False):
        pairs = decided = 0
        agree, disagree = [], []
        for _, r in group.iterrows():
            a, b = r["corpus_a"], r["corpus_b"]
            if a not in paper or b not in paper or paper[a] == paper[b]:
                continue
            pairs += 1
            if not r["decided"]:
                continue
            decided += 1
            paper_winner = a if (paper[a] > paper[b]) == higher_better else b
            loser = b if r["winner"] == a else a
            (agree if r["winner"] == paper_winner else disagree).append(f"{r['winner']}>{loser}")
        rows.append({"metric": metric, "pairs": pairs, "decided": decided, "agree": len(agree),
                     "disagree": len(disagree), "agree_pairs": "; ".join(agree), "disagree_pairs": "; ".join(disagree)})
    return pd.DataFrame(rows, columns=["metric", "pairs", "decided", "agree", "disagree", "agree_pairs",
                                       "disagree_pairs"])
