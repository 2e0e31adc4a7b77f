"""Seeds until the leader is decided (issue #51): decide's test repeated as seeds are added, at a level that
holds across the looks.

A decide run with ``decide.max_seeds`` larger than its first seeds looks at the evidence after every round of
seeds, adds one seed (each on its own selection draw) to the candidates the answer rests on (the leader on the
headline metric and the runners-up it is not yet separated from) and stops when the leader is decided against
each of them, or a cap is reached. Looking after every round and stopping on what is seen is a multiple test
across the looks; this module makes it pay for them:

- **Alpha spending** (Lan & DeMets 1983). Each comparison's level ``alpha`` is spent over its looks by a spending
  function of the information fraction ``t = n / N`` (``n`` the seeds the pair has in common at the look, ``N`` =
  ``decide.max_seeds``): ``obf``, the O'Brien-Fleming-like ``2 - 2 Phi(z_{alpha/2} / sqrt t)`` (little spent at
  the early looks, where 2 degrees of freedom make the seed error least trustworthy; the default), or
  ``pocock``, ``alpha ln(1 + (e - 1) t)``. The boundaries (:func:`nominal_levels`) are the exact group-sequential
  ones for the canonical joint distribution of the looks' z-statistics (independent increments, ``corr(Z_j,
  Z_k) = sqrt(t_j / t_k)``), computed by recursive numerical integration on a grid (Armitage, McPherson & Rowe
  1969; Jennison & Turnbull 2000, ch. 19): deterministic, unlike a Monte-Carlo multivariate normal. Each look's
  Cochran-Cox p (:mod:`curation.reporting.decide_stats`) is turned into its z and compared with them.
- **Holm across the comparisons**, with each comparison's boundaries at its Holm level (Maurer & Bretz 2013,
  *Multiple testing in group sequential trials using graphical approaches*: the sequentially rejective Holm
  procedure with group-sequential tests, a rejected hypothesis' level passed on, earlier looks re-tested at the
  larger level). :func:`sequential_p` is each comparison's repeated p-value (the smallest level at which any of
  its looks crosses), and Holm's adjustment of those is exactly that procedure's decision (:func:`holm_decide`).

With one look at ``t = 1`` (``max_seeds`` unset: today's fixed design) the repeated p is the look's p and the
procedure is Holm's. A pair whose seeds stop before ``N`` keeps the alpha it did not spend unused
(conservative). The simulation in tests/reports/test_decide_sequential.py holds the whole rule (looks, the
adaptive choice of who gets seeds, Holm) at or below 5% false decisions in 2,000 null experiments.

No Kedro or MLflow here.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Mapping, Optional, Sequence

import numpy as np
from scipy.special import ndtr
from scipy.stats import norm

SPENDING = ("obf", "pocock")
_GRID = 401  # grid points (odd: Simpson) over a look's continuation region: boundaries within 1e-6 of a 4001-point grid


def _pdf(x: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * x * x) / np.sqrt(2.0 * np.pi)


def spent(t: float, alpha: float, kind: str = "obf") -> float:
    """The alpha spent by information fraction ``t`` (0 < t <= 1; at t >= 1 all of ``alpha``)."""
    t = min(max(float(t), 0.0), 1.0)
    if t <= 0:
        return 0.0
    if t >= 1:
        return float(alpha)
    if kind == "obf":
        return float(2.0 * norm.sf(norm.isf(alpha / 2.0) / np.sqrt(t)))
    if kind == "pocock":
        return float(alpha * np.log1p((np.e - 1.0) * t))
    raise ValueError(f"spending must be one of {SPENDING}, got {kind!r}")


@lru_cache(maxsize=4096)
def _boundaries(fractions: tuple[float, ...], alpha: float, kind: str) -> tuple[float, ...]:
    """Two-sided z boundaries c_1..c_k at ``fractions`` (increasing) for overall level ``alpha``."""
    from scipy.optimize import brentq

    out: list[float] = []
    # the sub-density of the score S_j = Z_j sqrt(t_j) on the continuation region, on a grid
    grid: Optional[np.ndarray] = None
    dens: Optional[np.ndarray] = None
    weights: Optional[np.ndarray] = None
    prev_t, spent_before = 0.0, 0.0
    for t in fractions:
        target = spent(t, alpha, kind) - spent_before  # the exit probability this look may add
        step = t - prev_t
        if grid is None:
            def exit_prob(b: float) -> float:
                return float(2.0 * ndtr(-b / np.sqrt(t)))
        else:
            def exit_prob(b: float, g=grid, d=dens, w=weights, s=step) -> float:
                sd = np.sqrt(s)
                return float(np.sum(w * d * (ndtr((-b - g) / sd) + ndtr((g - b) / sd))))
        if target <= 1e-15:
            b = np.inf
        else:
            hi = 40.0 * np.sqrt(t)
            if exit_prob(hi) >= target:
                b = hi
            elif exit_prob(1e-9) <= target:  # what continues is less than the look may spend: stop on anything
                b = 1e-9
            else:
                b = float(brentq(lambda x: exit_prob(x) - target, 1e-9, hi, xtol=1e-11, rtol=1e-11))
        out.append(b / np.sqrt(t))
        # the continuation region's sub-density at this look, for the next
        bound = b if np.isfinite(b) else 12.0 * np.sqrt(t)
        new = np.linspace(-bound, bound, _GRID)
        w = np.full(new.size, (new[1] - new[0]) / 3.0)  # Simpson's weights
        w[1:-1:2] *= 4.0
        w[2:-1:2] *= 2.0
        if grid is None:
            d = _pdf(new / np.sqrt(t)) / np.sqrt(t)
        else:
            sd = np.sqrt(step)
            d = (_pdf((new[:, None] - grid[None, :]) / sd) / sd) @ (weights * dens)
        grid, dens, weights = new, d, w
        prev_t, spent_before = t, spent_before + (exit_prob(b) if np.isfinite(b) else 0.0)
    return tuple(out)


def nominal_levels(fractions: Sequence[float], alpha: float, kind: str = "obf") -> np.ndarray:
    """The two-sided nominal p each look must reach, at information ``fractions`` (increasing, <= 1), for an
    overall false-positive rate ``alpha`` spent by ``kind`` (:func:`spent`). One look at t = 1: ``[alpha]``."""
    fr = tuple(round(float(f), 12) for f in fractions)
    if any(b <= a for a, b in zip(fr, fr[1:])) or not fr or fr[0] <= 0 or fr[-1] > 1:
        raise ValueError(f"information fractions must increase within (0, 1]: {list(fractions)}")
    return np.array(_nominal(fr, float(alpha), kind))


@lru_cache(maxsize=65536)
def _nominal(fr: tuple[float, ...], alpha: float, kind: str) -> tuple[float, ...]:
    if fr == (1.0,):
        return (alpha,)
    return tuple(float(2.0 * ndtr(-c)) if np.isfinite(c) else 0.0 for c in _boundaries(fr, alpha, kind))


def looks_of(seeds: Sequence[int], p: Sequence[float], max_seeds: int) -> tuple[list[float], list[float]]:
    """(fractions, p) of one comparison's looks: ``seeds[j]`` seeds in common and p ``p[j]`` at look j, in order;
    a look with no new seed is not a new look (its last p is kept)."""
    fractions, ps, last = [], [], -1
    for n, pj in zip(seeds, p):
        if int(n) <= last:
            continue
        last = int(n)
        fractions.append(min(int(n) / float(max_seeds), 1.0))
        ps.append(float(pj))
    return fractions, ps


def crosses(fractions: Sequence[float], p: Sequence[float], level: float, kind: str = "obf") -> int:
    """The first look (0-based) whose p reaches its group-sequential boundary at overall ``level``; -1 if none."""
    if level <= 0 or not fractions:
        return -1
    nominal = nominal_levels(fractions, level, kind)
    for j, (pj, nj) in enumerate(zip(p, nominal)):
        if np.isfinite(pj) and pj <= nj:
            return j
    return -1


def sequential_p(fractions: Sequence[float], p: Sequence[float], kind: str = "obf") -> float:
    """The repeated p-value: the smallest overall level at which one of the looks crosses its boundary (found by
    bisection on log10 of the level; the boundaries grow with the level). With one look at t = 1, ``p``."""
    if not fractions or not any(np.isfinite(x) for x in p):
        return float("nan")
    if len(fractions) == 1 and fractions[0] >= 1.0:
        return float(p[0])
    if crosses(fractions, p, 1.0, kind) < 0:
        return 1.0
    lo, hi = -12.0, 0.0  # log10 of the level
    if crosses(fractions, p, 10.0 ** lo, kind) >= 0:
        return 10.0 ** lo
    for _ in range(24):  # 12 decades to ~1e-6 of a decade: p to 6 digits
        mid = 0.5 * (lo + hi)
        if crosses(fractions, p, 10.0 ** mid, kind) >= 0:
            hi = mid
        else:
            lo = mid
    return float(10.0 ** hi)


def holm_decide(looks: Mapping[object, tuple[Sequence[float], Sequence[float]]], alpha: float,
                kind: str = "obf") -> dict[object, int]:
    """Maurer & Bretz's Holm procedure with group-sequential tests: ``looks``: hypothesis -> (fractions, p).
    Returns hypothesis -> the look (0-based) at which it is rejected at family level ``alpha``, or -1.

    While m hypotheses remain, each is tested on all its looks at level alpha / m; every one that crosses is
    rejected (rejecting them together is Holm's order: each would also cross at the larger level that follows),
    and the rest are tested again at alpha / (m - rejected)."""
    out = {h: -1 for h in looks}
    while True:
        open_ = [h for h in looks if out[h] < 0]
        if not open_:
            return out
        level = alpha / len(open_)
        newly = {h: crosses(*looks[h], level, kind) for h in open_}
        newly = {h: j for h, j in newly.items() if j >= 0}
        if not newly:
            return out
        out.update(newly)


def next_round(means: Mapping[str, float], decided: Mapping[frozenset, bool], seeds: Mapping[str, int],
               max_seeds: int, higher_better: bool = True,
               equal: Optional[Mapping[frozenset, bool]] = None) -> tuple[list[str], str]:
    """Who gets the next seed, and why the run stops if nobody does (``([], reason)``).

    ``means``: each candidate's seed mean on the headline metric; ``decided``: pair -> decided on the headline;
    ``seeds``: each candidate's seeds so far; ``equal``: pair -> decided equal within the equivalence margin.
    The leader is the best mean; the runners-up are the candidates it is not decided against (nor decided
    equal to). They and the leader get one more seed, unless one of them is at ``max_seeds``."""
    if len(means) < 2:
        return [], "fewer than two candidates"
    order = sorted(means, key=lambda c: means[c], reverse=higher_better)
    leader = order[0]
    equal = equal or {}
    open_ = [c for c in order[1:] if not decided.get(frozenset((leader, c)), False)]
    if not open_:
        return [], f"`{leader}` is decided against every other candidate"
    open_ = [c for c in open_ if not equal.get(frozenset((leader, c)), False)]
    if not open_:
        return [], f"`{leader}` is decided better than or equal (within the margin) to every other candidate"
    want = [leader] + open_
    full = [c for c in want if seeds.get(c, 0) >= max_seeds]
    if full:
        return [], (f"decide.max_seeds={max_seeds} reached by {', '.join(f'`{c}`' for c in full)} with `{leader}` "
                    f"not separated from {', '.join(f'`{c}`' for c in open_)}")
    return want, f"`{leader}` is not yet separated from {', '.join(f'`{c}`' for c in open_)}"


def sequential_decisions(rounds: Sequence, max_seeds: Optional[int], families: str = "metric", alpha: float = 0.05,
                         kind: str = "obf") -> "pd.DataFrame":
    """The decisions at one scale after the looks: ``rounds`` holds the scale's decision table (:func:`curation.
    reporting.decide_stats.full_decisions`) computed on the cells of rounds 1..r, for r = 1..R. Returns the last
    round's rows with ``p_seq`` (each comparison's repeated p over its looks), ``p_holm`` (Holm's adjustment of
    ``p_seq`` within its family), ``decided`` (:func:`holm_decide`, at ``alpha``), ``looks`` and
    ``decided_at_seeds`` (the seeds in common at the look that decided it, 0 if none), and ``family``.

    ``max_seeds``: N, the seeds a candidate may reach (None: the seeds the last round has, so that one round is
    one look at t = 1: the fixed design). ``families``: ``metric`` (each metric's pairs one family) or ``all``
    (every metric's pairs one family: the headline picked from the cells, ``decide.headline: auto``)."""
    import pandas as pd

    from curation.reporting.decide_stats import holm

    if not rounds:
        raise ValueError("no rounds")
    last = rounds[-1].copy()
    if last.empty:
        return last.assign(p_seq=[], looks=[], decided_at_seeds=[], family=[])
    key = ["corpus_a", "corpus_b", "metric"]
    history = pd.concat([r.assign(_round=i) for i, r in enumerate(rounds)], ignore_index=True)
    n_max = int(max_seeds or 0)
    n_max = max(n_max, int(history["seeds"].max()))
    looks: dict[tuple, tuple[list[float], list[float]]] = {}
    seeds_at: dict[tuple, list[int]] = {}
    for k, part in history.sort_values("_round").groupby(key, sort=False):
        n = part["seeds"].astype(int).tolist()
        fractions, ps = looks_of(n, part["p"].astype(float).tolist(), n_max)
        looks[k] = (fractions, ps)
        seeds_at[k] = sorted(set(n))
    last["family"] = "all" if families == "all" else last["metric"]
    out = []
    for fam, part in last.groupby("family", sort=False):
        keys = [tuple(r) for r in part[key].itertuples(index=False)]
        usable = {k: looks[k] for k in keys if looks[k][0] and np.isfinite(looks[k][1]).any()}
        at = holm_decide(usable, alpha, kind)
        p_seq = np.array([sequential_p(*looks[k], kind) if k in usable else np.nan for k in keys])
        part = part.assign(p_seq=p_seq, p_holm=holm(p_seq), looks=[len(looks[k][0]) for k in keys])
        part["decided"] = [bool(at.get(k, -1) >= 0) and float(d) != 0 for k, d in zip(keys, part["mean_diff"])]
        part["decided_at_seeds"] = [seeds_at[k][at[k]] if at.get(k, -1) >= 0 else 0 for k in keys]
        out.append(part)
    return pd.concat(out).loc[last.index]


def relabel(table: "pd.DataFrame", alpha: float = 0.05) -> "pd.DataFrame":
    """``winner`` and ``verdict`` of sequentially decided rows (their ``decided`` and ``p_holm`` came from the
    looks), worded by :func:`curation.reporting.decide_stats.verdict` (the one wording :func:`curation.reporting.
    decide_stats.full_decisions` uses too), with the looks, the seeds at the decision and the Holm family named."""
    from curation.reporting.decide_stats import verdict
    from curation.reporting.decisions import higher_is_better

    table = table.copy()
    better_a = np.array([(d > 0) == higher_is_better(m) for d, m in zip(table["mean_diff"], table["metric"])])
    table["winner"] = np.where(table["decided"], np.where(better_a, table["corpus_a"], table["corpus_b"]), "")
    verdicts = [verdict(r, r["metric"], alpha, looks=int(r["looks"]), decided_at_seeds=int(r["decided_at_seeds"]),
                        over="every metric's pairs" if r["family"] == "all" else "its metric's pairs")
                for _, r in table.iterrows()]
    table["verdict"] = verdicts
    return table
