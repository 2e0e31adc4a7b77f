"""The answer a data team reads from a decide run (issue #43): ``recommendation.md`` and the ladder plot.

Its order is the evidence's: when two metrics decide a pair opposite ways that comes first, with both sides'
numbers and what each metric measures; then the headline metric (chosen by signal-to-noise before any
comparison) and its verdict. A winner is named only when it is decided against every other candidate;
otherwise the text names the group that cannot be separated, or says there is no winner and what would decide
(seeds, items or training tokens, estimated from the two parts of the error). No Kedro or MLflow here.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from curation.paths import relative

# What each decision metric measures, said beside a disagreement (a reader has to pick which matters to them).
MEANING = {
    "average": "accuracy averaged over the abilities (near chance for models this small)",
    "mc_correct_prob_per_char": "the probability the model puts on the correct answer (per character), averaged "
                                "over the multiple-choice tasks",
    "mc_norm_correct_prob_per_char": "the correct answer's share of the probability over all the choices (how much "
                                     "it prefers the right answer to the wrong ones)",
    "mc_margin_per_char": "the correct answer's log-probability margin over the best wrong answer (per character)",
    "mc_correct_logprob_per_char": "the correct answer's log-probability (per character)",
    "ref_bits_per_byte": "the loss on the tasks' gold texts, in bits per byte (lower is better): how well the "
                         "model predicts that text, not how it chooses between answers",
}



def _fmt(x: float) -> str:
    return f"{x:.4g}" if np.isfinite(x) else "n/a"


def _pair_text(r: pd.Series, winner: str) -> str:
    diff = r["mean_diff"] if r["corpus_a"] == winner else -r["mean_diff"]
    return (f"{diff:+.4g} ± {r['se']:.2g} (seeds {r['se_seed']:.2g}, items {r['se_item']:.2g}; "
            f"p = {r['p']:.2g}, Holm {r['p_holm']:.2g})")


def disagreements(table: pd.DataFrame, scale: str) -> list[tuple[str, str, list[tuple[str, str, pd.Series]]]]:
    """Pairs that two metrics decide opposite ways at ``scale``: (a, b, [(metric, winner, row), ...])."""
    part = table[(table["scale"].astype(str) == str(scale)) & table["decided"]]
    out = []
    for (a, b), group in part.groupby(["corpus_a", "corpus_b"], sort=False):
        if group["winner"].nunique() > 1:
            out.append((a, b, [(r["metric"], r["winner"], r) for _, r in group.iterrows()]))
    return out


def recommendation(cells: pd.DataFrame, table: pd.DataFrame, headline: str, why: str, *, scale: str,
                   items: Optional[Mapping] = None, snr: Optional[pd.DataFrame] = None,
                   tasks: Optional[pd.DataFrame] = None, headline_tasks: Optional[Sequence[str]] = None,
                   tasks_note: str = "",
                   budget_tokens: float = float("nan"), parameters: Optional[Mapping[str, float]] = None,
                   agreement: Optional[pd.DataFrame] = None, errors: Optional[pd.DataFrame] = None,
                   corpus: str = "", stop: str = "", equivalence: Optional[float] = None) -> str:
    """The Markdown answer at ``scale`` (the top rung): disagreement between metrics first, then the headline
    metric's verdict, the ranking, signal-to-noise per metric, tasks at chance, the ladder and the errors.
    ``tasks`` / ``headline_tasks`` / ``tasks_note``: what :func:`curation.reporting.decide.tasks_above_chance`
    decided (the table, the tasks the multiple-choice metrics average, the sentence when its minimum is not met).
    ``equivalence``: ``decide.equivalence``, the headline margin within which a pair counts as equal (None: no
    equivalence test; an undecided pair is then said to be undecided, never equal)."""
    from curation.reporting.decide_stats import cell_metric, ranking, seeds_and_items_needed

    parameters = parameters or {}
    part = table[table["scale"].astype(str) == str(scale)]
    rows = part[part["metric"] == headline]
    col = "scale" if "scale" in cells.columns else "size"
    at = cells[cells[col].astype(str) == str(scale)]
    # the corpus's name in the title, its path (inside the project: relative) on a line of its own: a title that
    # spelt out /home/<user>/... read badly and said where a user keeps their data (issue #53)
    name = PurePath(corpus.rstrip("/")).name if corpus else ""
    lines = [f"# Which selection trains the better model{' on ' + name if name else ''}?", ""]
    if corpus:
        lines += [f"Corpus: `{relative(corpus)}`.", ""]
    family_all = "family" in part and (part["family"] == "all").any()
    n_family = int(len(part)) if family_all else int(len(rows))

    conflicts = disagreements(table, scale)
    if conflicts:
        scope = ("every metric's pairs are one Holm family here" if family_all else
                 f"each metric Holm-corrected on its own; only `{headline}` is claimed, the others are shown and "
                 "described")
        lines += [f"**Metrics disagree at {scale}** ({scope}): on {len(conflicts)} pair(s) one metric decides one "
                  "way and another the other way. Which selection is better depends on what you measure:", ""]
        used = []
        for a, b, verdicts in conflicts:
            said = "; ".join(f"`{m}` says `{w}` {_pair_text(r, w)}" for m, w, r in verdicts)
            lines.append(f"- `{a}` vs `{b}`: {said}")
            used += [m for m, _, _ in verdicts]
        lines += ["", "What each measures:", ""]
        lines += [f"- `{m}`: {MEANING.get(m, m)}" for m in dict.fromkeys(used)]
        lines.append("")

    n_seeds = int(at["seed"].nunique()) if not at.empty else 0
    train_tokens = float(at["train_tokens"].iloc[0]) if "train_tokens" in at and not at.empty else float("nan")
    family_text = (f"The multiple-comparison family spans every metric the rule could have picked: {n_family} "
                   "comparisons at this scale, Holm-corrected together." if family_all else
                   f"The claims below are on this metric alone: its {n_family} pairs are the Holm family; the "
                   "other metrics are shown and described, not claimed.")
    lines += [f"**Headline metric: `{headline}`** ({why}). It measures {MEANING.get(headline, headline)}. "
              f"{family_text}", "",
              f"At {budget_tokens:,.0f} reference tokens per candidate, a "
              f"{parameters.get(scale, float('nan')):,.0f}-parameter model trained on {train_tokens:,.0f} tokens per "
              f"cell (<= 1 epoch, no document repeated), {n_seeds} seeds:", ""]
    restricted = headline_tasks is not None and headline.startswith("mc_")
    values = cell_metric(at, items, headline, headline_tasks) if restricted else None
    order = ranking(at, headline, scale, values)
    draws = at.groupby("candidate")["corpus_digest"].nunique() if "corpus_digest" in at else pd.Series(dtype=int)
    lines += [f"| rank | candidate | {headline} (mean ± sd over seeds) | seeds | selection draws |",
              "|---:|---|---|---:|---:|"]
    for i, r in order.iterrows():
        n_draws = int(draws.get(r["candidate"], 1))
        lines.append(f"| {i + 1} | {r['candidate']} | {r['mean']:.5g} ± {r['std']:.2g} | {int(r['count'])} | "
                     f"{n_draws} |")
    lines.append("")
    lines += _verdict(order, rows, headline, scale, seeds_and_items_needed, errors, equivalence)
    lines.append("")
    if stop:
        rounds = int(at["round"].max()) if "round" in at else 1
        lines += [f"Seeds: {', '.join(f'`{r.candidate}` {int(r.count)}' for r in order.itertuples())}; "
                  f"{rounds} round(s). Why the run stopped: {stop}.", ""]

    if snr is not None and not snr.empty:
        top = snr[snr["scale"].astype(str) == str(scale)]
        lines += ["Signal and noise per metric at this scale" + (" (the headline is the largest ratio):" if
                  "signal-to-noise" in why else " (shown, not used to pick the headline):"), "",
                  "| metric | signal (sd of the candidates' means) | noise (error of one mean vs the others) | "
                  "SNR | pairs decided | best |", "|---|---:|---:|---:|---:|---|"]
        for _, r in top.iterrows():
            dec = part[part["metric"] == r["metric"]]
            best = _best(dec, r["metric"])
            lines.append(f"| {r['metric']} | {r['signal']:.3g} | {r['noise']:.3g} | {r['snr']:.2f} | "
                         f"{int(dec['decided'].sum())} of {len(dec)} | {best} |")
        lines.append("")
    if tasks is not None and not tasks.empty:
        lines += _task_lines(tasks, scale, headline_tasks, tasks_note)
    if agreement is not None and not agreement.empty:
        lines += _ladder_lines(agreement)
    if errors is not None and not errors.empty:
        e = errors[errors["scale"].astype(str) == str(scale)]
        lines += ["The two parts of a difference's error at this scale (items per task: "
                  f"{int(e['items_per_task'].iloc[0]) if len(e) else 0}):", "",
                  "| metric | seed SE | item SE | items enough | items for item SE = seed SE |",
                  "|---|---:|---:|---|---:|"]
        lines += [f"| {r['metric']} | {r['seed_se_diff']:.3g} | {r['item_se_diff']:.3g} | "
                  f"{'yes' if r['enough'] else 'no'} | {r['items_needed']} |" for _, r in e.iterrows()]
        lines.append("")
    n_items = int(rows["items"].max()) if "items" in rows and len(rows) else 0
    looks = int(rows["looks"].max()) if "looks" in rows and len(rows) else 1
    lines.append("How this was decided: each difference's standard error counts the training seeds (each seed on "
                 "its own selection draw for a stochastic selection) and the evaluation items; a pair is decided "
                 "when Cochran-Cox's test on that error, Holm-corrected over "
                 f"{'every metric' if family_all else 'its metric'}'s pairs at this scale"
                 + (f" and spent over the {looks} looks the seed rounds made (alpha spending)" if looks > 1 else "")
                 + ", is below 0.05 (docs/pretraining.md#decide). What a decision shows: on these "
                 f"{n_items} evaluation items of these tasks, at {budget_tokens:,.0f} reference tokens per candidate, "
                 f"for this {parameters.get(scale, float('nan')):,.0f}-parameter model trained on "
                 f"{train_tokens:,.0f} tokens, the difference is not seed or item noise; other items, budgets or "
                 "model sizes are beyond it except as far as the ladder shows.")
    return "\n".join(lines) + "\n"


def _verdict(order: pd.DataFrame, rows: pd.DataFrame, headline: str, scale: str, needed: Any,
             errors: Optional[pd.DataFrame], equivalence: Optional[float] = None) -> list[str]:
    """The answer line (``**Answer: ...**``) and what it rests on. No decided pair is a test that found no
    difference at these seeds, not evidence that the candidates are equal: only ``equivalence`` (a margin, its
    90% interval inside it) can say a pair is equal, and the answer says which pairs it does."""
    if order.empty or rows.empty:
        return ["**Answer: no winner**: no pair could be compared on the headline metric."]
    leader = str(order.iloc[0]["candidate"])
    tied = order[order["mean"] == order.iloc[0]["mean"]]
    others = [str(c) for c in order["candidate"] if c != leader]
    beaten, undecided = [], []
    for _, r in rows.iterrows():
        if leader not in (r["corpus_a"], r["corpus_b"]):
            continue
        other = r["corpus_b"] if r["corpus_a"] == leader else r["corpus_a"]
        (beaten if r["decided"] and r["winner"] == leader else undecided).append((other, r))
    out = []
    if len(tied) > 1:
        names = ", ".join(f"`{c}`" for c in tied["candidate"])
        out.append(f"**Answer: no winner**: {names} tie exactly on `{headline}`.")
    elif len(beaten) == len(others):
        out.append(f"**Answer: `{leader}`** on `{headline}` at {scale}: decided better than every other candidate.")
    elif beaten:
        group = [leader] + [o for o, _ in undecided]
        out.append(f"**Answer: no single winner**: `{leader}` leads on `{headline}` but is not separated from "
                   f"{', '.join(f'`{o}`' for o, _ in undecided)}; the top group is "
                   f"{', '.join(f'`{g}`' for g in group)}.")
    elif rows["decided"].any():
        out.append(f"**Answer: no winner**: `{leader}` leads on `{headline}` but is decided against no other "
                   "candidate; only pairs below it are decided.")
    else:
        out.append(_no_decision(rows, headline, scale, equivalence))
    if beaten:
        out.append(f"`{leader}` beats " + "; ".join(f"`{o}` by {_pair_text(r, leader)}" for o, r in beaten) + ".")
    if undecided:
        out.append("Not decided against " + "; ".join(f"`{o}` ({_pair_text(r, leader)})" for o, r in undecided)
                   + ".")
        second = str(order.iloc[1]["candidate"])
        other, r = next(((o, x) for o, x in undecided if o == second), undecided[0])
        if not (np.isfinite(r["se_seed"]) and np.isfinite(r["se_item"])):
            why = ("no item values were recorded: a run that keeps them sizes it" if not np.isfinite(r["se_item"])
                   else "the seed part needs a second seed")
            out.append(f"What would decide `{leader}` vs `{other}`: not estimated, since part of the error is "
                       f"unknown ({why}).")
            return out
        from curation.reporting.decide_stats import seeds_needed_interval

        k = len(order)
        seeds, n_items = needed(r["mean_diff"], r["se_seed"], r["se_item"], int(r["seeds"]),
                                _items_per_task(errors, scale), family=k * (k - 1) // 2,
                                total_items=int(r.get("items", 0) or 0))
        low, _, high = seeds_needed_interval(r["mean_diff"], r["se_seed"], r["se_item"], int(r["seeds"]),
                                             family=k * (k - 1) // 2, total_items=int(r.get("items", 0) or 0))
        what = []
        if seeds > 0:
            span = f"{low if low > 0 else '?'} to {high if high > 0 else 'over 64'}"
            what.append(f"about {seeds} seeds at today's items (95% range {span}: the seed variance rests on "
                        f"{int(r['seeds']) - 1} degrees of freedom)")
        if n_items > 0:
            what.append(f"about {n_items} items per task at today's seeds")
        if not what:
            what.append("neither up to 64 seeds nor 100x the items alone: both, or more training tokens")
        out.append(f"What would decide `{leader}` vs `{other}` (a difference of {abs(r['mean_diff']):.3g}, if it is "
                   f"real; 80% power at the Holm level): {' or '.join(what)}; more training tokens may widen it "
                   "(the ladder says whether differences grow with compute).")
    return out


def _seeds_text(rows: pd.DataFrame) -> str:
    """The seeds the pairs were compared at: "3 seeds", or "3 to 5 seeds" where the pairs had different ones."""
    n = sorted({int(s) for s in rows["seeds"]}) if "seeds" in rows else []
    if not n:
        return "these seeds"
    return f"{n[0]} seeds" if len(n) == 1 else f"{n[0]} to {n[-1]} seeds (pairs differ)"


def _no_decision(rows: pd.DataFrame, headline: str, scale: str, equivalence: Optional[float]) -> str:
    """The answer when no pair is decided: what was measured (no pair separated at these seeds: every difference
    within what noise produces there) and what that does not show (that they are equal)."""
    at = _seeds_text(rows)
    if not np.isfinite(rows["se"].astype(float)).any():
        return (f"**Answer: no winner**: no pair of candidates could be decided on `{headline}` at {scale} with {at}: "
                "the run kept no item values, so the item part of each difference's error is unknown.")
    # noise in the test's sense, not one SE: a difference of 2 SE at 3 seeds is not decided (Cochran-Cox's critical
    # value on 2 seed degrees of freedom is larger), so "within the error bars" (read as +-1 SE) would be false
    text = (f"**Answer: no winner**: no pair of candidates is separated on `{headline}` at {scale} with {at}: "
            "every difference is one that seed and item noise can produce at this many seeds (Cochran-Cox, "
            "Holm-corrected p not below 0.05). This is not evidence that they are equal: ")
    if equivalence is None:
        return text + ("no equivalence test was run (`decide.equivalence` is unset), and a real difference of the "
                       "size seen is not ruled out.")
    from curation.reporting.decide_stats import equal_within

    inside = [f"`{r['corpus_a']}` and `{r['corpus_b']}`" for _, r in rows.iterrows()
              if equal_within(r, equivalence)]
    if not inside:
        return text + (f"no pair's 90% interval lies inside the equivalence margin ±{equivalence:g} "
                       "(`decide.equivalence`), so none is shown equal either.")
    return text + (f"only the equivalence test can show that, and it does for {'; '.join(inside)} (90% interval "
                   f"inside ±{equivalence:g}, `decide.equivalence`); no other pair is shown equal.")


def _task_lines(tasks: pd.DataFrame, scale: str, headline_tasks: Optional[Sequence[str]],
                note: str = "") -> list[str]:
    """Tasks above, at and below chance in accuracy, named apart (below chance is a bias of the task's choices
    that the models follow, not an absence of signal)."""
    status = tasks["status"] if "status" in tasks else np.where(tasks["at_chance"], "at", "above")
    named = {k: ", ".join(f"{t} ({v:.3f} vs {c:.3f})" for t, v, c, s in zip(tasks["task"], tasks["value"],
                                                                            tasks["chance"], status) if s == k)
             for k in ("above", "at", "below")}
    out = []
    if named["above"]:
        out.append(f"Above chance in accuracy at {scale} (by more than 2 item SE): {named['above']}.")
    else:
        out.append(f"No task is above chance in accuracy at {scale}.")
    if named["at"]:
        out.append(f"At chance: {named['at']}.")
    if named["below"]:
        out.append(f"Below chance by more than 2 item SE: {named['below']}: the models prefer the wrong answers "
                   "(a bias of the choices, such as their length or frequency, that the models follow).")
    if headline_tasks is None and not named["above"]:
        out.append("The multiple-choice metrics average every task: they read as a likelihood of the right answer, "
                   "not as ability.")
    elif headline_tasks is not None:
        out.append(f"The multiple-choice metrics (the headline's among them) average the tasks above chance: "
                   f"{', '.join(headline_tasks)}.")
    elif note:
        out.append(note)
    return [" ".join(out), ""]


def _best(rows: pd.DataFrame, metric: str) -> str:
    """The candidate with the best mean in a metric's decision rows (the means the decisions used)."""
    from curation.reporting.decisions import higher_is_better

    if rows.empty:
        return ""
    means = pd.concat([rows.set_index("corpus_a")["mean_a"], rows.set_index("corpus_b")["mean_b"]])
    means = means[~means.index.duplicated()]
    return str(means.idxmax() if higher_is_better(metric) else means.idxmin())


def _items_per_task(errors: Optional[pd.DataFrame], scale: str) -> int:
    if errors is None or errors.empty:
        return 0
    e = errors[errors["scale"].astype(str) == str(scale)]
    return int(e["items_per_task"].iloc[0]) if len(e) else 0


def _ladder_lines(agreement: pd.DataFrame) -> list[str]:
    top = str(agreement["large"].iloc[0])
    fresh = top.endswith("-fresh")
    what = ("an independent replicate of the top rung (fresh seeds, fresh selection draws, items disjoint from "
            "the ladder's)" if fresh else "the top rung, which re-uses the lower rungs' seeds, draws and items (a "
            "re-training of the same experiment, not an independent replication: decide.fresh_top adds one)")
    has_ci = "acc_low" in agreement
    lines = [f"Does a decision made on less compute hold at {top}, {what}? DataDecide's decision accuracy: the "
             "share of all pairs ordered as there" + (" (95% interval: a hierarchical bootstrap over tasks, items "
                                                      "and seeds with their draws)" if has_ci else "")
             + "; and of the pairs decided at the lower scale, how many keep their sign (exact binomial interval).",
             "", "| metric | scale | FLOPs | pairs ordered as at the top | decided there | of those, sign holds |",
             "|---|---|---:|---:|---:|---:|"]
    for _, r in agreement.iterrows():
        acc = f"{r['sign_agreement_all']:.2f} of {int(r['pairs'])}"
        if has_ci and np.isfinite(r.get("acc_low", np.nan)):
            acc += f" [{r['acc_low']:.2f}, {r['acc_high']:.2f}]"
        holds = f"{int(r['sign_holds'])}"
        if "holds_low" in r and np.isfinite(r["holds_low"]):
            holds += f" [{r['holds_low']:.2f}, {r['holds_high']:.2f}]"
        lines.append(f"| {r['metric']} | {r['small']} | {r.get('flops_small', float('nan')):.2g} | {acc} | "
                     f"{int(r['decided_small'])} | {holds} |")
    return lines + [""]


def ladder_plot(agreement: pd.DataFrame):
    """DataDecide's Fig. 1 shape: decision accuracy (share of pairs ordered as at the top scale) against the
    lower scale's training FLOPs, one line per metric."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.0))
    for metric, part in agreement.groupby("metric", sort=False):
        part = part.sort_values("flops_small")
        line, = ax.plot(part["flops_small"], part["sign_agreement_all"], marker="o", label=metric)
        if "acc_low" in part and part["acc_low"].notna().any():  # the bootstrap interval as a band
            ax.fill_between(part["flops_small"], part["acc_low"], part["acc_high"], color=line.get_color(),
                            alpha=0.12, linewidth=0)
    ax.set_xscale("log")
    ax.set_ylim(-0.05, 1.05)
    ax.axhline(0.5, color="0.6", linestyle=":", linewidth=1)
    ax.set_xlabel("training FLOPs of the lower rung (6 x parameters x tokens)")
    ax.set_ylabel(f"pairs ordered as at {agreement['large'].iloc[0]}")
    ax.set_title("decision accuracy along the compute ladder", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
