"""Which selection trains the better model on this corpus? (issues #38, #43; DataDecide, Magnusson et al. 2025)

``curate experiment=decide data.path=<corpus>`` trains K seeds of a small LM on each candidate selection,
every candidate cut to the same token budget and every cell trained on the same number of tokens with no
document repeated (<= 1 epoch), at one or more scales (model sizes, and training-token rungs: the compute
ladder), and evaluates each on the same items. This module turns those cells into the answer (no Kedro or
MLflow here):

- :func:`decision_table`: per scale, every (pair of candidates, metric) with the mean difference, its full
  standard error (seeds and evaluation items, :mod:`curation.reporting.decide_stats`), the test's p, the
  Holm-corrected p and whether it is decided;
- :func:`headline_metric`: the metric with the largest signal-to-noise ratio at the top scale, a rule fixed
  before any comparison; :func:`tasks_above_chance`: the tasks the multiple-choice metrics average (those above
  chance, when at least ``decide.min_tasks_above_chance`` are; else every task);
- :func:`ladder_agreement`: DataDecide's decision accuracy of every lower scale against the top one;
- :func:`item_vs_seed`: the two parts of a decision's error side by side, per metric;
- :func:`curation.reporting.decide_text.recommendation`: the answer a data team reads (metric disagreement
  first; a winner only where the evidence decides one; otherwise what would decide).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, Mapping, NamedTuple, Optional, Sequence

import numpy as np
import pandas as pd

from curation.reporting.decide_stats import ranking  # noqa: F401 - re-exported: decide's ranking lives with its stats

# The metrics a decision is made on: accuracy averaged over abilities, DataDecide's continuous likelihood
# metrics averaged over the multiple-choice tasks, and the held-out gold-text loss (lower is better).
DECISION_METRICS = ("average", "mc_correct_prob_per_char", "mc_norm_correct_prob_per_char", "mc_margin_per_char",
                    "mc_correct_logprob_per_char", "ref_bits_per_byte")
DEFAULT_HEADLINE = "mc_correct_prob_per_char"  # DataDecide's best small-scale predictor, until measured here
# Tasks that must be above chance at the top scale before the multiple-choice metrics average those tasks only
# (decide.min_tasks_above_chance): on the held-out web ladder (benchmarks/results/decide_ladder8_web/) one task of
# ten crossing chance turned the ten-task headline into that task's alone
MIN_TASKS_ABOVE_CHANCE = 3


@dataclass
class DecideConfig:
    """The ``decide`` block (``conf/experiment/decide.yaml``).

    candidates: name -> :class:`curation.selection.corpus.CorpusSpec` (the selections compared);
    sizes: model presets, each trained on the same tokens (``tiny`` = the ``pretrain`` group as composed;
    other names are :data:`curation.lm.config.PRESETS` with the composed tokenizer and ``train`` block);
    seeds: training seeds per (candidate, size); reference: the candidate the heat map compares with;
    headline: the metric the recommendation claims on, named before the run (default :data:`DEFAULT_HEADLINE`,
    chosen from the committed evidence: docs/pretraining.md#decide); ``auto``: the largest signal-to-noise on the
    run's own cells (:func:`headline_metric`), and then every metric's pairs are one multiple-comparison family;
    max_seeds: seeds a candidate may reach by the rounds that add seeds where the leader is undecided
    (:mod:`curation.decide.rounds`; None: the first seeds only, the fixed design); max_cells / max_hours: caps on
    the cells trained and the wall time the rounds may reach; spending: how the looks share the level
    (:mod:`curation.reporting.decide_sequential`); equivalence: a margin on the headline below which a runner-up
    whose 90% interval of the difference lies within +-margin stops receiving seeds (None: never);
    min_tasks_above_chance: how many tasks must be above chance in accuracy at the top scale before the
    multiple-choice metrics average those tasks only (fewer: every task; :func:`tasks_above_chance`).
    """

    candidates: dict[str, Any] = field(default_factory=dict)
    sizes: list[str] = field(default_factory=lambda: ["tiny"])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    reference: str = "random"
    headline: str = DEFAULT_HEADLINE
    rungs: Optional[list[int]] = None  # the compute ladder: training tokens per cell, one rung each (null: the
    # pretrain block's max_tokens, one rung); decision accuracy is measured against the top rung
    draws: str = "per_seed"  # per_seed: each training seed trains on its own selection draw (seed + training
    # seed), so a stochastic selection's own randomness is in the spread; one: one draw for every seed
    max_seeds: Optional[int] = None  # seeds a candidate may reach (rounds of one seed where the leader is undecided)
    max_cells: Optional[int] = None  # cap on the cells of the whole run (first round included)
    max_hours: Optional[float] = None  # cap on the wall time: no round starts that the last round's pace says ends later
    spending: str = "obf"  # alpha spending over the looks: obf (O'Brien-Fleming-like) or pocock
    equivalence: Optional[float] = None  # headline margin: a runner-up decided equal within it gets no more seeds
    min_tasks_above_chance: int = MIN_TASKS_ABOVE_CHANCE  # the multiple-choice metrics average only the tasks
    # above chance at the top scale when at least this many are; fewer: every task (0 or 1: the earlier rule, under
    # which one task above chance became the whole average; :func:`tasks_above_chance`)
    fresh_top: bool = False  # the top rung trained again on fresh seeds, fresh selection draws and a disjoint item
    # sample (scale "<top>-fresh"): the ladder's decision accuracy is measured against that independent replication
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
        check(self.draws in ("per_seed", "one"), "draws", self.draws, "per_seed or one")
        check(self.max_seeds is None or (isinstance(self.max_seeds, int) and self.max_seeds >= len(self.seeds)),
              "max_seeds", self.max_seeds, f"null or an integer >= the {len(self.seeds)} seeds of decide.seeds")
        check(self.max_cells is None or (isinstance(self.max_cells, int) and self.max_cells > 0), "max_cells",
              self.max_cells, "null or a positive number of cells")
        check(self.max_hours is None or float(self.max_hours) > 0, "max_hours", self.max_hours,
              "null or a positive number of hours")
        check(not (self.fresh_top and self.max_seeds is not None), "fresh_top", self.fresh_top,
              "false when decide.max_seeds is set (the replicate is a fixed design: set decide.max_seeds=null)")
        from curation.reporting.decide_sequential import SPENDING

        check(self.spending in SPENDING, "spending", self.spending, f"one of {list(SPENDING)}")
        check(self.equivalence is None or float(self.equivalence) > 0, "equivalence", self.equivalence,
              "null or a positive margin on the headline metric")
        check(isinstance(self.min_tasks_above_chance, int) and not isinstance(self.min_tasks_above_chance, bool)
              and self.min_tasks_above_chance >= 0, "min_tasks_above_chance", self.min_tasks_above_chance,
              "an integer >= 0 (0 or 1: restrict to the tasks above chance whenever any is)")
        if self.rungs is not None:
            check(len(self.rungs) >= 1 and all(isinstance(r, int) and r > 0 for r in self.rungs)
                  and len(set(self.rungs)) == len(self.rungs), "rungs", self.rungs,
                  "null or distinct positive training-token counts")


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
    ids = [c for c in ("scale", "size", "candidate", "seed") if c in cells.columns]
    long = cells.melt(id_vars=ids, value_vars=present, var_name="metric", value_name="value")
    return long.rename(columns={"candidate": "corpus"}).dropna(subset=["value"])


def scales(cells: pd.DataFrame) -> list[str]:
    """The cells' scales, cheapest first (by training FLOPs, 6 x parameters x tokens, where known); the last
    is the top rung every other scale's decisions are checked against."""
    col = "scale" if "scale" in cells.columns else "size"
    names = list(dict.fromkeys(cells[col].astype(str)))
    if {"parameters", "train_tokens"} <= set(cells.columns):
        flops = (6.0 * cells["parameters"] * cells["train_tokens"]).groupby(cells[col].astype(str)).first()
        first_seen = {s: i for i, s in enumerate(names)}
        names.sort(key=lambda s: (flops.get(s, np.inf), first_seen[s]))
    return names


def decision_table(cells: pd.DataFrame, items: Optional[Mapping[tuple, Mapping]] = None,
                   order: Optional[Sequence[str]] = None, tasks: Optional[Mapping[str, Sequence[str]]] = None,
                   alpha: float = 0.05) -> pd.DataFrame:
    """Every (scale, pair, metric): the mean difference, its full standard error (``se_seed``, ``se_item``,
    ``se``), the Cochran-Cox p, the Holm-corrected p and ``decided``
    (:func:`curation.reporting.decide_stats.full_decisions`), with the scale's ``size`` and ``rung_tokens``.
    Without per-item values no pair is decided (the item part of the error would be missing)."""
    from curation.reporting.decide_stats import full_decisions

    metrics = [m for m in DECISION_METRICS if m in cells.columns]
    table = full_decisions(cells, items, metrics, order=order, tasks=tasks, alpha=alpha)
    col = "scale" if "scale" in cells.columns else "size"
    first = cells.drop_duplicates(col).set_index(cells.drop_duplicates(col)[col].astype(str))
    table.insert(1, "size", [first["size"].get(str(s), s) if "size" in first else s for s in table["scale"]])
    table.insert(2, "rung_tokens", [first["train_tokens"].get(str(s), np.nan) if "train_tokens" in first else np.nan
                                    for s in table["scale"]])
    return table


def size_agreement(table: pd.DataFrame, small: str, large: str) -> pd.DataFrame:
    """DataDecide's decision accuracy between two scales (model sizes or training-token rungs), per metric:
    ``sign_agreement_all``, the share of all pairs with the same sign of the mean difference at both
    (DataDecide's definition, the larger scale taken as the truth); ``decided_small`` pairs decided at the
    smaller scale, of which ``sign_holds`` keep their sign at the larger (``share_holds``);
    ``decided_large``, ``decided_both`` and ``agree_both``; ``agreement_on_decided_large``, the share of the
    pairs decided at the larger scale that the smaller orders the same way."""
    col = "scale" if "scale" in table.columns else "size"
    a = table[table[col].astype(str) == str(small)].set_index(["corpus_a", "corpus_b", "metric"])
    b = table[table[col].astype(str) == str(large)].set_index(["corpus_a", "corpus_b", "metric"])
    common = a.index.intersection(b.index)
    rows = []
    for metric in dict.fromkeys(m for _, _, m in common):
        keys = [k for k in common if k[2] == metric]
        da, db = a.loc[keys], b.loc[keys]
        same = np.sign(da["mean_diff"].to_numpy()) == np.sign(db["mean_diff"].to_numpy())
        dec = da["decided"].to_numpy(bool)
        dec_large = db["decided"].to_numpy(bool)
        both = dec & dec_large
        rows.append({"metric": metric, "pairs": len(keys), "decided_small": int(dec.sum()),
                     "sign_holds": int((dec & same).sum()),
                     "share_holds": float((dec & same).sum() / dec.sum()) if dec.sum() else float("nan"),
                     "decided_large": int(dec_large.sum()), "decided_both": int(both.sum()),
                     "agree_both": int((both & same).sum()), "sign_agreement_all": float(same.mean()),
                     "agreement_on_decided_large": float((dec_large & same).sum() / dec_large.sum())
                     if dec_large.sum() else float("nan"),
                     "small": small, "large": large})
    return pd.DataFrame(rows)


def ladder_agreement(table: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """:func:`size_agreement` of every scale against the top one (:func:`scales`), with each scale's training
    FLOPs (6 x parameters x tokens) and the top's: DataDecide's decision accuracy along the compute ladder."""
    names = scales(cells)
    if len(names) < 2:
        return pd.DataFrame()
    col = "scale" if "scale" in cells.columns else "size"
    flops = (6.0 * cells["parameters"] * cells["train_tokens"]).groupby(cells[col].astype(str)).first() \
        if {"parameters", "train_tokens"} <= set(cells.columns) else pd.Series(dtype=float)
    frames = []
    for lower in names[:-1]:
        part = size_agreement(table, lower, names[-1])
        part["flops_small"] = float(flops.get(lower, np.nan))
        part["flops_large"] = float(flops.get(names[-1], np.nan))
        frames.append(part)
    return pd.concat(frames, ignore_index=True)


def headline_metric(snr: Optional[pd.DataFrame], requested: str = "auto",
                    scale: Optional[str] = None) -> tuple[str, str]:
    """(metric, why): ``requested`` when it names a metric; else the rule declared before any comparison: the
    metric with the largest signal-to-noise ratio at the top scale (:func:`curation.reporting.decide_stats.
    signal_to_noise`; exact ties keep DataDecide's choice, then DECISION_METRICS' order); else
    :data:`DEFAULT_HEADLINE`."""
    if requested != "auto":
        why = ("named before the run from the committed evidence: decide.headline, docs/pretraining.md#decide"
               if requested == DEFAULT_HEADLINE else "named before the run by decide.headline")
        return requested, why
    if snr is None or snr.empty:
        return DEFAULT_HEADLINE, "DataDecide's choice: no signal-to-noise could be measured"
    part = snr[snr["scale"].astype(str) == str(scale)] if scale is not None else snr
    part = part[np.isfinite(part["snr"])]
    if part.empty:
        return DEFAULT_HEADLINE, "DataDecide's choice: no signal-to-noise could be measured"
    part = part.assign(_default=part["metric"] == DEFAULT_HEADLINE,
                       _order=[DECISION_METRICS.index(m) if m in DECISION_METRICS else len(DECISION_METRICS)
                               for m in part["metric"]])
    part = part.sort_values(["snr", "_default", "_order"], ascending=[False, False, True], kind="stable")
    best = part.iloc[0]
    runner = part.iloc[1] if len(part) > 1 else None
    why = (f"the largest signal-to-noise ratio at {best['scale']}: {best['snr']:.1f} (the candidates' spread over "
           "the seed-and-item error of a difference)")
    if runner is not None:
        why += f"; next `{runner['metric']}` at {runner['snr']:.1f}"
    return str(best["metric"]), why


def item_vs_seed(cells: pd.DataFrame, items: Mapping[tuple, Mapping], n_items: int) -> pd.DataFrame:
    """Per (scale, metric): the seeds' error and the items' error of a difference between two candidates
    (same seeds, same items), the two parts of a decision's standard error.

    ``seed_sd_diff``: sd over seeds of a paired difference, mean over pairs; ``seed_se_diff``: that over
    sqrt(seeds), the seed part of a decision's SE; ``item_se_diff``: the item part (the item error of the
    seed-averaged difference), mean over pairs; ``enough``: ``item_se_diff <= seed_se_diff`` (the items add no
    more error than the seeds); ``items_needed``: items per task at which the item part equals the seed part
    (1/sqrt(n) scaling). ``seed_sd``, ``item_se``: one candidate's own errors, for reference.
    items: (scale, candidate, seed) -> the cell's per-item values.
    """
    from curation.evaluation.items import item_se, items_for
    from curation.reporting.decide_stats import item_variance

    rows = []
    values = cell_values(cells)
    col = "scale" if "scale" in cells.columns else "size"
    for scale in dict.fromkeys(cells[col]):
        part = values[values[col] == scale]
        names = list(dict.fromkeys(part["corpus"]))
        seeds = sorted(set(part["seed"]))
        for metric in [m for m in DECISION_METRICS if m in set(part["metric"])]:
            wide = part[part["metric"] == metric].pivot_table(index="seed", columns="corpus", values="value")
            sd_diff = [float((wide[a] - wide[b]).std(ddof=1)) for a, b in combinations(wide.columns, 2)]
            cell_se = [item_se(items[(scale, c, s)], metric) for c in names for s in seeds if (scale, c, s) in items]
            pair_se = []
            for a, b in combinations(names, 2):
                ka = [items.get((scale, a, s)) for s in seeds]
                kb = [items.get((scale, b, s)) for s in seeds]
                if all(ka) and all(kb):
                    pair_se.append(float(np.sqrt(item_variance(ka, kb, metric)[0])))
            seed_sd_diff = float(np.nanmean(sd_diff)) if sd_diff else float("nan")
            row = {"scale": scale, "metric": metric, "seeds": len(seeds),
                   "seed_sd": float(wide.std(ddof=1).mean()), "seed_sd_diff": seed_sd_diff,
                   "seed_se_diff": seed_sd_diff / np.sqrt(len(seeds)) if seeds else float("nan"),
                   "item_se": float(np.nanmean(cell_se)) if cell_se else float("nan"),
                   "item_se_diff": float(np.nanmean(pair_se)) if pair_se else float("nan"),
                   "items_per_task": int(n_items)}
            row["enough"] = bool(row["item_se_diff"] <= row["seed_se_diff"])
            row["items_needed"] = items_for(row["item_se_diff"], n_items, row["seed_se_diff"])
            rows.append(row)
    return pd.DataFrame(rows)


class ChanceRule(NamedTuple):
    """What :func:`tasks_above_chance` decided at the top scale (every reader of the rule takes it from there)."""

    tasks: pd.DataFrame  # task_chance at the top scale, with ``in_mc_average``
    headline_tasks: Optional[list[str]]  # the tasks the multiple-choice metrics average (None: every task)
    restrict: Optional[dict[str, list[str]]]  # metric -> those tasks (None: no metric restricted)
    above: list[str]  # the tasks above chance in accuracy
    minimum: int  # decide.min_tasks_above_chance

    @property
    def minimum_unmet(self) -> bool:
        """Some but not every task is above chance, fewer than the minimum: every task is averaged."""
        return bool(self.above) and len(self.above) < len(self.tasks) and len(self.above) < self.minimum

    def note(self, scale: str, headline: str = "") -> str:
        """The report's sentence when the minimum is not met ("" otherwise)."""
        if not self.minimum_unmet:
            return ""
        k, n = len(self.above), len(self.tasks)
        which = f"the headline `{headline}` among them" if headline.startswith("mc_") else "`mc_*`"
        return (f"{k} of {n} tasks {'is' if k == 1 else 'are'} above chance in accuracy at {scale}, fewer than "
                f"decide.min_tasks_above_chance = {self.minimum}, so the minimum is not met and the multiple-choice "
                f"metrics ({which}) average all {n} tasks.")


def tasks_above_chance(items: Mapping[tuple, Mapping], top: str, chance: Optional[Mapping[str, float]],
                       minimum: int = MIN_TASKS_ABOVE_CHANCE) -> ChanceRule:
    """The tasks the multiple-choice (``mc_*``) metrics average at ``top``: the one rule the seed rounds
    (:func:`curation.decide.rounds.state`), the report's decisions, the ladder's intervals and the
    recommendation's text all read, so the stopping rule and the report agree.

    A task is above chance when its accuracy pooled over every cell at ``top`` is above its chance level by 2 item
    SEs (:func:`curation.reporting.decide_stats.task_chance`). When at least ``minimum``
    (``decide.min_tasks_above_chance``) tasks are, and not every task, the ``mc_*`` metrics average those only;
    fewer (one task crossing chance, plausibly by a bias of its choices, would otherwise become the whole
    average): every task, and :meth:`ChanceRule.note` says so. None above chance: every task (the continuous
    metrics read as a likelihood, not as ability; said in the text). ``minimum`` 0 or 1 is the earlier rule (any
    task above chance restricts). The gold-text loss and ``average`` keep every task.

    The rule is fixed before any cell is seen: it depends on ``minimum`` (the config) and on the level of
    accuracy pooled over every candidate, not on the candidates' differences, so choosing the tasks is no look at
    the comparisons the tests would have to pay for."""
    from curation.reporting.decide_stats import task_chance

    tasks = task_chance(items, top, chance) if chance else pd.DataFrame()
    above = tasks.loc[~tasks["at_chance"], "task"].tolist() if not tasks.empty else []
    headline_tasks = above if above and len(above) < len(tasks) and len(above) >= int(minimum) else None
    restrict = {m: headline_tasks for m in DECISION_METRICS if m.startswith("mc_")} if headline_tasks else None
    if not tasks.empty:
        tasks = tasks.assign(in_mc_average=tasks["task"].isin(headline_tasks) if headline_tasks else True)
    return ChanceRule(tasks, headline_tasks, restrict, above, int(minimum))


def _top_scale_sequential(table: pd.DataFrame, cells: pd.DataFrame, items: Optional[Mapping[tuple, Mapping]],
                          cfg: DecideConfig, top: str, order: Sequence[str],
                          restrict: Optional[Mapping[str, Sequence[str]]]) -> pd.DataFrame:
    """The top scale's rows decided over the rounds' looks and the family the headline rule asks for
    (:func:`curation.reporting.decide_sequential.sequential_decisions`): with one round, ``max_seeds`` unset and
    a named headline this is the fixed design, the table as it was; the lower scales keep one look each (the
    rounds add seeds at the top scale only)."""
    from curation.reporting.decide_sequential import relabel, sequential_decisions

    family = "all" if cfg.headline == "auto" else "metric"
    at_top = cells[cells["scale"].astype(str) == str(top)]
    rounds = sorted(set(at_top["round"].astype(int))) if "round" in at_top else [1]
    table = table.assign(p_seq=table["p"], looks=1, decided_at_seeds=np.where(table["decided"], table["seeds"], 0),
                         family=table["metric"])
    if len(rounds) == 1 and cfg.max_seeds is None and family == "metric":
        return table
    per_round = [decision_table(at_top[at_top["round"].astype(int) <= r] if "round" in at_top else at_top, items,
                                order=order, tasks=restrict) for r in rounds]
    seq = relabel(sequential_decisions(per_round, cfg.max_seeds, family, kind=cfg.spending))
    rest = table[table["scale"].astype(str) != str(top)]
    return pd.concat([rest, seq[table.columns]], ignore_index=True)


def _stop(cells: pd.DataFrame, items: Optional[Mapping[tuple, Mapping]], table: pd.DataFrame, cfg: DecideConfig,
          headline: str, top: str, restrict: Optional[Mapping[str, Sequence[str]]]) -> str:
    from curation.reporting.decide_stats import cell_metric

    at_top = cells[cells["scale"].astype(str) == str(top)]
    values = cell_metric(at_top, items, headline, (restrict or {}).get(headline))
    rows = table[(table["scale"].astype(str) == str(top)) & (table["metric"] == headline)]
    return stop_reason(at_top, values, rows, cfg, headline)


def round_state(at_top: pd.DataFrame, values: pd.Series, rows: pd.DataFrame,
                equivalence: Optional[float]) -> tuple[dict[str, float], dict, dict]:
    """(means, decided, equal) on the headline at the top scale, what the seed rounds' rule reads
    (:func:`curation.reporting.decide_sequential.next_round`): each candidate's seed mean over all its cells
    (``values``: the cells' headline values), each pair's decision (``rows``: the headline's decision rows) and
    each pair decided equal within ``equivalence`` (its 90% interval, mean +- 1.645 se, inside +-margin: two
    one-sided tests at 5%)."""
    means = values.groupby(at_top["candidate"]).mean().to_dict()
    decided = {frozenset((r["corpus_a"], r["corpus_b"])): bool(r["decided"]) for _, r in rows.iterrows()}
    equal = {}
    if equivalence is not None:
        from curation.reporting.decide_stats import equal_within

        equal = {frozenset((r["corpus_a"], r["corpus_b"])): equal_within(r, equivalence)
                 for _, r in rows.iterrows() if np.isfinite(r["se"])}
    return means, decided, equal


def stop_reason(at_top: pd.DataFrame, values: pd.Series, rows: pd.DataFrame, cfg: DecideConfig,
                headline: str) -> str:
    """Why the seed rounds stopped, read from the finished cells (the rounds' rule is a function of them:
    :func:`curation.decide.rounds.add_seed_rounds`); a rule that still wanted seeds means a cap stopped it."""
    from curation.reporting.decide_sequential import next_round
    from curation.reporting.decisions import higher_is_better

    if cfg.max_seeds is None:
        return "decide.max_seeds is unset: one look at the first seeds (the fixed design)"
    means, decided, equal = round_state(at_top, values, rows, cfg.equivalence)
    seeds = at_top.groupby("candidate")["seed"].nunique().to_dict()
    want, why = next_round(means, decided, seeds, int(cfg.max_seeds), higher_is_better(headline), equal)
    if not want:
        return why
    caps = [f"decide.max_cells={cfg.max_cells}" if cfg.max_cells else "",
            f"decide.max_hours={cfg.max_hours}" if cfg.max_hours else ""]
    return f"a cap ({' or '.join(c for c in caps if c) or 'the run was cut short'}) stopped it while {why}"


@dataclass
class DecideReport:
    table: pd.DataFrame  # decision_table
    agreement: pd.DataFrame  # ladder_agreement (every scale against the top; empty with one scale)
    errors: pd.DataFrame  # item_vs_seed
    figure: Any  # the heat map against cfg.reference at the top scale
    text: str  # recommendation.md
    metrics: dict[str, float]
    snr: pd.DataFrame = field(default_factory=pd.DataFrame)  # signal_to_noise per scale and metric
    tasks: pd.DataFrame = field(default_factory=pd.DataFrame)  # task_chance at the top scale
    ladder_figure: Any = None  # decision accuracy against FLOPs (None with one scale)


def build_report(cells: pd.DataFrame, items: Mapping[tuple, Mapping], cfg: DecideConfig, n_items: int,
                 corpus: str = "", chance: Optional[Mapping[str, float]] = None) -> DecideReport:
    """Everything ``experiment=decide`` writes from its cells: the decisions with the full SE, signal-to-noise
    and the headline metric it picks, the tasks at chance (left out of the ``mc_*`` metrics when enough tasks are
    above chance: :func:`tasks_above_chance`), the ladder's decision
    accuracy, the item errors, the heat map and the recommendation at the top scale."""
    from curation.reporting.decide_stats import signal_to_noise
    from curation.reporting.decide_text import ladder_plot, recommendation
    from curation.reporting.decisions import heatmap

    order = list(cfg.candidates)
    names = scales(cells)
    top = names[-1]
    if "scale" not in cells.columns:
        cells = cells.assign(scale=cells["size"].astype(str))
    rule = tasks_above_chance(items, top, chance, cfg.min_tasks_above_chance)
    tasks, headline_tasks, restrict = rule.tasks, rule.headline_tasks, rule.restrict
    table = _top_scale_sequential(decision_table(cells, items, order=order, tasks=restrict), cells, items, cfg, top,
                                  order, restrict)
    snr = signal_to_noise(table)
    headline, why = headline_metric(snr, cfg.headline, scale=top)
    from curation.reporting.decide_accuracy import with_intervals

    agreement = with_intervals(ladder_agreement(table, cells), cells, items, restrict)
    errors = item_vs_seed(cells, items, n_items) if items else pd.DataFrame()
    params = cells.groupby("scale")["parameters"].first().to_dict() if "parameters" in cells else {}
    text = recommendation(cells, table, headline, why, scale=top, items=items, snr=snr, tasks=tasks,
                          headline_tasks=headline_tasks, tasks_note=rule.note(top, headline),
                          budget_tokens=float(cells["budget_tokens"].iloc[0]) if "budget_tokens" in cells
                          else float("nan"),
                          parameters=params, agreement=agreement, errors=errors, corpus=corpus,
                          stop=_stop(cells, items, table, cfg, headline, top, restrict),
                          equivalence=cfg.equivalence)
    shown = table[table["scale"].astype(str) == str(top)].rename(columns={"p": "p_value"})
    if cfg.paper == "table2":
        from curation.reporting.table2 import paper_verdict

        lines = paper_verdict(shown, [m for m in DECISION_METRICS if m in set(shown["metric"])], order)
        text += "\nAgainst DATAMASK Table 2 (the 1.5B averages of each corpus's analogue):\n\n" + "".join(
            f"- {line}\n" for line in lines)
    figure = heatmap(shown, cfg.reference, [m for m in DECISION_METRICS if m in set(shown["metric"])],
                     f"decide ({top}): candidate - {cfg.reference}")
    metrics = {"decide_decided_pairs": float(table["decided"].sum()), "decide_pairs": float(len(table)),
               "decide_scales": float(len(names))}
    if not tasks.empty:
        metrics["decide_tasks_above_chance"] = float(len(rule.above))
        metrics["decide_mc_tasks"] = float(len(headline_tasks) if headline_tasks else len(tasks))
    for _, r in agreement.iterrows():
        if r["large"] == top and r["small"] == names[0]:
            metrics[f"decide_sign_agreement_{r['metric']}"] = float(r["sign_agreement_all"])
    for _, r in snr[snr["scale"].astype(str) == str(top)].iterrows():
        metrics[f"decide_snr_{r['metric']}"] = float(r["snr"])
    return DecideReport(table, agreement, errors, figure, text, metrics, snr, tasks,
                        ladder_plot(agreement) if not agreement.empty else None)
