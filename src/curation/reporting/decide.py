"""Which selection trains the better model on this corpus? (issue #38; DataDecide, Magnusson et al. 2025)

``curate experiment=decide data.path=<corpus>`` trains K seeds of a small LM on each candidate selection,
every candidate cut to the same token budget and every cell trained on the same number of tokens with no
document repeated (<= 1 epoch), at one or more model sizes, and evaluates each on the same items. This
module turns those cells into the answer (no Kedro or MLflow here):

- :func:`decision_table`: per model size, every (pair of candidates, metric) with the mean difference,
  its standard error over seeds (paired by seed), the t-test p-value and whether it is decided (> 2 SE;
  :func:`curation.reporting.decisions.decisions`);
- :func:`size_agreement`: DataDecide's decision accuracy between two sizes: of the pairs decided at the
  smaller size, the share whose sign holds at the larger, per metric; :func:`headline_metric` names the
  metric that holds best;
- :func:`item_vs_seed`: the evaluation items' sampling error next to the seeds' spread, per metric;
- :func:`recommendation`: the paragraph a data team reads (best candidate on the headline metric, by
  how much with its SE, what stays undecided, at which token budget and model size).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import pandas as pd

# The metrics a decision is made on: accuracy averaged over abilities, DataDecide's continuous likelihood
# metrics averaged over the multiple-choice tasks, and the held-out gold-text loss (lower is better).
DECISION_METRICS = ("average", "mc_correct_prob_per_char", "mc_norm_correct_prob_per_char", "mc_margin_per_char",
                    "mc_correct_logprob_per_char", "ref_bits_per_byte")
DEFAULT_HEADLINE = "mc_correct_prob_per_char"  # DataDecide's best small-scale predictor, until measured here


@dataclass
class DecideConfig:
    """The ``decide`` block (``conf/experiment/decide.yaml``).

    candidates: name -> :class:`curation.selection.corpus.CorpusSpec` (the selections compared);
    sizes: model presets, each trained on the same tokens (``tiny`` = the ``pretrain`` group as composed;
    other names are :data:`curation.lm.config.PRESETS` with the composed tokenizer and ``train`` block);
    seeds: training seeds per (candidate, size); reference: the candidate the heat map compares with;
    headline: the metric the recommendation ranks on (``auto``: the one whose decisions hold best across
    sizes, :func:`headline_metric`, else :data:`DEFAULT_HEADLINE`).
    """

    candidates: dict[str, Any] = field(default_factory=dict)
    sizes: list[str] = field(default_factory=lambda: ["tiny"])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    reference: str = "random"
    headline: str = "auto"
    paper: Optional[str] = None  # "table2": also set the decisions against DATAMASK Table 2's order (candidate
    # names as table2_tiny's corpora: raw, semdedup, edu, ultrafineweb, dclm, datamask_paper, ...)

    def __post_init__(self) -> None:
        from curation.configuration import check

        check(len(self.candidates) >= 2, "candidates", sorted(self.candidates), "at least two candidate selections")
        check(len(self.seeds) >= 2 and len(set(self.seeds)) == len(self.seeds), "seeds", self.seeds,
              "at least two distinct seeds (a decision needs a standard error)")
        check(len(self.sizes) >= 1 and len(set(self.sizes)) == len(self.sizes), "sizes", self.sizes,
              "one or more distinct model presets")
        check(self.reference in self.candidates, "reference", self.reference, f"one of {sorted(self.candidates)}")
        check(self.headline == "auto" or self.headline in DECISION_METRICS, "headline", self.headline,
              f"auto or one of {list(DECISION_METRICS)}")
        check(self.paper in (None, "table2"), "paper", self.paper, "null or table2")


def parse_decide(node: Mapping[str, Any]) -> DecideConfig:
    """A validated :class:`DecideConfig`; each candidate is checked as a CorpusSpec (key named on error)."""
    from curation.configuration import parse_dataclass
    from curation.lm.config import PRESETS
    from curation.selection.corpus import CorpusSpec

    cfg = parse_dataclass(DecideConfig, node, path="decide")
    specs = {name: parse_dataclass(CorpusSpec, spec, path=f"decide.candidates.{name}").validate(
        f"decide.candidates.{name}") for name, spec in cfg.candidates.items()}
    unknown = [s for s in cfg.sizes if s != "tiny" and s not in PRESETS]
    if unknown:
        from curation.configuration import ConfigError

        raise ConfigError("decide.sizes", f"must be model presets ({sorted(PRESETS)})", unknown)
    cfg.candidates = specs
    return cfg


def cell_values(cells: pd.DataFrame, metrics: Sequence[str] = DECISION_METRICS) -> pd.DataFrame:
    """Long (size, corpus, seed, metric, value) from the wide cell table (one row per cell, a column per
    metric)."""
    present = [m for m in metrics if m in cells.columns]
    long = cells.melt(id_vars=["size", "candidate", "seed"], value_vars=present, var_name="metric", value_name="value")
    return long.rename(columns={"candidate": "corpus"}).dropna(subset=["value"])


def decision_table(cells: pd.DataFrame, order: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """Every (size, pair, metric): mean_a, mean_b, mean_diff (a - b), se (paired by seed), p (two-sided
    t-test), decided (> 2 SE), winner, verdict, seeds and the seed sd of each side."""
    from curation.reporting.decisions import decisions

    values = cell_values(cells)
    frames = []
    for size in dict.fromkeys(cells["size"]):
        part = values[values["size"] == size]
        table = decisions(part[["corpus", "seed", "metric", "value"]], metrics=[m for m in DECISION_METRICS
                                                                                if m in set(part["metric"])],
                          order=order)
        sd = part.groupby(["corpus", "metric"])["value"].std(ddof=1)
        table["sd_a"] = [sd.get((a, m), np.nan) for a, m in zip(table["corpus_a"], table["metric"])]
        table["sd_b"] = [sd.get((b, m), np.nan) for b, m in zip(table["corpus_b"], table["metric"])]
        table.insert(0, "size", size)
        frames.append(table)
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return table.rename(columns={"p_value": "p"})


def size_agreement(table: pd.DataFrame, small: str, large: str) -> pd.DataFrame:
    """DataDecide's decision accuracy between two model sizes, per metric: ``decided_small`` pairs, of
    which ``sign_holds`` have the same sign of the mean difference at ``large`` (``share_holds``), and
    ``decided_both`` / ``agree_both`` among the pairs both sizes decide; ``sign_agreement_all`` is the
    share of all pairs with the same sign at both sizes."""
    a = table[table["size"] == small].set_index(["corpus_a", "corpus_b", "metric"])
    b = table[table["size"] == large].set_index(["corpus_a", "corpus_b", "metric"])
    common = a.index.intersection(b.index)
    rows = []
    for metric in dict.fromkeys(m for _, _, m in common):
        keys = [k for k in common if k[2] == metric]
        da, db = a.loc[keys], b.loc[keys]
        same = np.sign(da["mean_diff"].to_numpy()) == np.sign(db["mean_diff"].to_numpy())
        dec = da["decided"].to_numpy(bool)
        both = dec & db["decided"].to_numpy(bool)
        rows.append({"metric": metric, "pairs": len(keys), "decided_small": int(dec.sum()),
                     "sign_holds": int((dec & same).sum()),
                     "share_holds": float((dec & same).sum() / dec.sum()) if dec.sum() else float("nan"),
                     "decided_large": int(db["decided"].sum()), "decided_both": int(both.sum()),
                     "agree_both": int((both & same).sum()), "sign_agreement_all": float(same.mean()),
                     "small": small, "large": large})
    return pd.DataFrame(rows)


def headline_metric(agreement: Optional[pd.DataFrame], requested: str = "auto") -> tuple[str, str]:
    """(metric, why): ``requested`` when it names a metric; else the metric whose small-size decisions
    hold best at the larger size (ties: more decided pairs), else :data:`DEFAULT_HEADLINE`."""
    if requested != "auto":
        return requested, "set by decide.headline"
    if agreement is None or agreement.empty or not (agreement["decided_small"] > 0).any():
        return DEFAULT_HEADLINE, ("DataDecide's choice: no two-size agreement was measured in this run "
                                  "(decide.sizes has one size)")
    ranked = agreement[agreement["decided_small"] > 0].copy()
    # an exact tie keeps DataDecide's choice where it is among the tied, then DECISION_METRICS' order
    ranked["_default"] = ranked["metric"] == DEFAULT_HEADLINE
    ranked["_order"] = [DECISION_METRICS.index(m) if m in DECISION_METRICS else len(DECISION_METRICS)
                        for m in ranked["metric"]]
    ranked = ranked.sort_values(["share_holds", "sign_holds", "_default", "_order"],
                                ascending=[False, False, False, True], kind="stable")
    best = ranked.iloc[0]
    tied = ranked[(ranked["share_holds"] == best["share_holds"]) & (ranked["sign_holds"] == best["sign_holds"])]
    why = (f"its decisions at {best['small']} hold best at {best['large']}: "
           f"{int(best['sign_holds'])} of {int(best['decided_small'])} keep their sign")
    if len(tied) > 1:
        others = ", ".join(f"`{m}`" for m in tied["metric"].iloc[1:])
        why += f" (tied with {others}; " + (
            "DataDecide's choice among them)" if best["_default"] else "the first of them in DECISION_METRICS)")
    return str(best["metric"]), why


def item_vs_seed(cells: pd.DataFrame, items: Mapping[tuple, Mapping], n_items: int) -> pd.DataFrame:
    """Per (size, metric): the seeds' spread and the items' sampling error, for one model and for a
    difference between two candidates (same seed and size, same items).

    ``seed_sd``: sd over seeds of a candidate's metric, mean over candidates; ``seed_sd_diff``: sd over
    seeds of a paired difference, mean over pairs; ``item_se``: a cell's item error, mean over cells;
    ``item_se_diff``: the item error of a paired difference, mean over pairs and seeds; ``enough``:
    ``item_se_diff < seed_sd_diff`` (the items add less error to a decision than the seeds);
    ``items_needed``: items per task for item_se_diff to equal seed_sd_diff (1/sqrt(n) scaling).
    items: (size, candidate, seed) -> the cell's per-item values.
    """
    from curation.evaluation.items import item_se, items_for, paired_item_se

    rows = []
    values = cell_values(cells)
    for size in dict.fromkeys(cells["size"]):
        part = values[values["size"] == size]
        names = list(dict.fromkeys(part["corpus"]))
        seeds = sorted(set(part["seed"]))
        for metric in [m for m in DECISION_METRICS if m in set(part["metric"])]:
            wide = part[part["metric"] == metric].pivot_table(index="seed", columns="corpus", values="value")
            seed_sd = float(wide.std(ddof=1).mean())
            sd_diff = [float((wide[a] - wide[b]).std(ddof=1)) for a, b in combinations(wide.columns, 2)]
            cell_se = [item_se(items[(size, c, s)], metric) for c in names for s in seeds if (size, c, s) in items]
            pair_se = [paired_item_se(items[(size, a, s)], items[(size, b, s)], metric)
                       for a, b in combinations(names, 2) for s in seeds
                       if (size, a, s) in items and (size, b, s) in items]
            row = {"size": size, "metric": metric, "seed_sd": seed_sd,
                   "seed_sd_diff": float(np.nanmean(sd_diff)) if sd_diff else float("nan"),
                   "item_se": float(np.nanmean(cell_se)) if cell_se else float("nan"),
                   "item_se_diff": float(np.nanmean(pair_se)) if pair_se else float("nan"),
                   "items_per_task": int(n_items)}
            row["enough"] = bool(row["item_se_diff"] < row["seed_sd_diff"])
            row["items_needed"] = items_for(row["item_se_diff"], n_items, row["seed_sd_diff"])
            rows.append(row)
    return pd.DataFrame(rows)


def ranking(cells: pd.DataFrame, metric: str, size: str) -> pd.DataFrame:
    """Candidates by the seed mean of ``metric`` at ``size``, best first (losses ascending)."""
    from curation.reporting.decisions import higher_is_better

    part = cells[cells["size"] == size]
    stats = part.groupby("candidate")[metric].agg(["mean", "std", "count"]).reset_index()
    return stats.sort_values("mean", ascending=not higher_is_better(metric), kind="stable").reset_index(drop=True)


def recommendation(cells: pd.DataFrame, table: pd.DataFrame, headline: str, why: str, *, size: str,
                   budget_tokens: float, train_tokens: float, parameters: Mapping[str, float],
                   agreement: Optional[pd.DataFrame] = None, corpus: str = "") -> str:
    """The Markdown answer: which selection is best on the headline metric at ``size``, by how much
    (± SE over seeds) against each other candidate, which pairs stay undecided, and the scale it holds at."""
    order = ranking(cells, headline, size)
    best = str(order.iloc[0]["candidate"])
    rows = table[(table["size"] == size) & (table["metric"] == headline)]
    lines = [f"# Which selection trains the better model{' on ' + corpus if corpus else ''}?", "",
             f"**Headline metric: `{headline}`** ({why}).", "",
             f"At a token budget of {budget_tokens:,.0f} reference tokens per candidate, a "
             f"{parameters.get(size, float('nan')):,.0f}-parameter model ({size}) trained on "
             f"{train_tokens:,.0f} tokens per cell (<= 1 epoch, no document repeated), "
             f"{int(cells['seed'].nunique())} seeds:", ""]
    lines.append(f"| rank | candidate | {headline} (mean ± sd over seeds) |")
    lines.append("|---:|---|---|")
    for i, r in order.iterrows():
        lines.append(f"| {i + 1} | {r['candidate']} | {r['mean']:.5g} ± {r['std']:.2g} |")
    lines += ["", f"**Recommendation: `{best}`** on `{headline}`."]
    beaten, undecided, lost = [], [], []
    for _, r in rows.iterrows():
        if best not in (r["corpus_a"], r["corpus_b"]):
            continue
        other = r["corpus_b"] if r["corpus_a"] == best else r["corpus_a"]
        diff = r["mean_diff"] if r["corpus_a"] == best else -r["mean_diff"]
        text = f"`{other}` by {diff:+.4g} ± {r['se']:.2g} (p = {r['p']:.2g})"
        if not r["decided"]:
            undecided.append(text)
        elif r["winner"] == best:
            beaten.append(text)
        else:
            lost.append(text)
    if beaten:
        lines.append(f"It beats {'; '.join(beaten)} (decided: > 2 SE over seeds).")
    if undecided:
        lines.append(f"Not decided against {'; '.join(undecided)}: on this evidence these are as good.")
    if lost:
        lines.append(f"Decided the other way against {'; '.join(lost)}.")
    others = rows[~rows["decided"] & (rows["corpus_a"] != best) & (rows["corpus_b"] != best)]
    if not others.empty:
        lines.append("Other undecided pairs on the headline metric: " + ", ".join(
            f"{a}-{b}" for a, b in zip(others["corpus_a"], others["corpus_b"])) + ".")
    lines.append("")
    for metric in [m for m in DECISION_METRICS if m != headline and m in set(table["metric"])]:
        top = ranking(cells, metric, size).iloc[0]
        part = table[(table["size"] == size) & (table["metric"] == metric)]
        lines.append(f"- `{metric}`: best `{top['candidate']}` ({top['mean']:.5g}); "
                     f"{int(part['decided'].sum())} of {len(part)} pairs decided.")
    if agreement is not None and not agreement.empty:
        lines += ["", "Does the decision hold as the model grows (DataDecide's decision accuracy)?", "",
                  f"| metric | decided at {agreement['small'].iloc[0]} | its sign holds at {agreement['large'].iloc[0]} "
                  "| share |", "|---|---:|---:|---:|"]
        for _, r in agreement.iterrows():
            lines.append(f"| {r['metric']} | {int(r['decided_small'])} | {int(r['sign_holds'])} | "
                         f"{r['share_holds']:.2f} |")
    from curation.reporting.decisions import null_decision_rate

    n_seeds = int(cells["seed"].nunique())
    lines += ["", f"Read with care: a 2-SE decision over {n_seeds} seeds is a screen (a null difference passes it "
              f"{100 * null_decision_rate(n_seeds - 1):.0f}% of the time; the p-values say more); it holds at this "
              "token budget and model size, and beyond them only as far as a two-size agreement shows."]
    return "\n".join(lines) + "\n"


@dataclass
class DecideReport:
    table: pd.DataFrame  # decision_table
    agreement: pd.DataFrame  # size_agreement (empty with one size)
    errors: pd.DataFrame  # item_vs_seed
    figure: Any  # the heat map against cfg.reference at the largest size
    text: str  # recommendation.md
    metrics: dict[str, float]


def build_report(cells: pd.DataFrame, items: Mapping[tuple, Mapping], cfg: DecideConfig, n_items: int,
                 corpus: str = "") -> DecideReport:
    """Everything ``experiment=decide`` writes from its cells: decisions, two-size agreement, item errors,
    heat map, the recommendation at the largest size (and, with ``cfg.paper``, the paper's order)."""
    from curation.reporting.decisions import heatmap

    order = list(cfg.candidates)
    table = decision_table(cells, order=order)
    sizes = list(dict.fromkeys(cells["size"]))
    agreement = size_agreement(table, sizes[0], sizes[-1]) if len(sizes) > 1 else pd.DataFrame()
    headline, why = headline_metric(agreement if len(sizes) > 1 else None, cfg.headline)
    errors = item_vs_seed(cells, items, n_items)
    size = sizes[-1]
    params = cells.groupby("size")["parameters"].first().to_dict() if "parameters" in cells else {}
    text = recommendation(cells, table, headline, why, size=size, budget_tokens=float(cells["budget_tokens"].iloc[0]),
                          train_tokens=float(cells["train_tokens"].iloc[0]), parameters=params, agreement=agreement,
                          corpus=corpus)
    if not errors.empty:
        text += ("\nItem sampling error next to the seed spread (a difference between two candidates):\n\n"
                 "| size | metric | seed sd of a difference | item SE of a difference | enough items | items needed |\n"
                 "|---|---|---:|---:|---|---:|\n")
        text += "".join(f"| {r['size']} | {r['metric']} | {r['seed_sd_diff']:.3g} | {r['item_se_diff']:.3g} | "
                        f"{'yes' if r['enough'] else 'no'} | {r['items_needed']} |\n" for _, r in errors.iterrows())
    shown = table[table["size"] == size].rename(columns={"p": "p_value"})
    if cfg.paper == "table2":
        from curation.reporting.table2 import paper_verdict

        lines = paper_verdict(shown, [m for m in DECISION_METRICS if m in set(shown["metric"])], order)
        text += "\nAgainst DATAMASK Table 2 (the 1.5B averages of each corpus's analogue):\n\n" + "".join(
            f"- {line}\n" for line in lines)
    figure = heatmap(shown, cfg.reference, [m for m in DECISION_METRICS if m in set(shown["metric"])],
                     f"decide ({size}): candidate - {cfg.reference}")
    metrics = {"decide_decided_pairs": float(table["decided"].sum()), "decide_pairs": float(len(table))}
    for _, r in agreement.iterrows():
        metrics[f"decide_share_holds_{r['metric']}"] = float(r["share_holds"])
    return DecideReport(table, agreement, errors, figure, text, metrics)
