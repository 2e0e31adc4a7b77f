"""Selection to a token budget (issue #38): every method keeps ``budget_tokens`` tokens within 1%.

The papers compare corpora at equal *training tokens* (DATAMASK Sec. 4.1 trains every Table 2 corpus on
the same 400B tokens; Meta-rater Sec. 5.1 selects "a total of 30B tokens while maintaining a fixed domain
proportion"; QuaDMix samples to a token budget). A document budget is not one: the quality-selected
corpora of the bundled corpus hold 0.42-0.53M tokens for the 1,651 documents where a random 1,651 hold
1.68M, because the quality raters and the diversity terms prefer short documents (DATAMASK Fig. 8).

How each method honours the budget (:func:`select_tokens`):

- **ordered methods** (``topk_quality``, ``random``): the prefix of their order (quality, best first;
  a seeded permutation) whose tokens reach the budget, the last document kept when that lands nearer
  the target (:func:`prefix_to_tokens`, the rule Meta-rater's domain budget already used); when one long
  document at the boundary puts that outside 1%, the next documents in order that fit
  (:func:`fill_to_tokens`).
- **DataMask** (one block, the in-memory path): a pilot run (a tenth of the steps) sets the mask size
  S the policy is trained for; the full run's final mask is drawn from softmax(L) one document after
  another, as Algorithm 1's sequential Plackett-Luce draw, and the draw stops at the token budget instead
  of at S documents (:func:`_datamask_to_tokens`). Two runs' cost (1.1 full runs).
- **set methods** (``greedy``, ``semdedup``, ``dvrl``; DataMask on shards, where each solve runs its
  blocks): the method chooses a set of a given size S; the mask's tokens are ``sum n_tokens[mask]``, and S is solved so they meet the budget
  (:func:`fit_to_tokens`: a step along the power law tokens ~ a S^k through the two nearest runs, kept
  inside the bracket once there is one, re-running the method at each S, at most ``max_runs`` times). DataMask's policy itself is unchanged: it learns Plackett-Luce logits for a mask
  of S documents (Algorithm 1); the constraint is met by the size, not by a penalty in the reward, so
  the objective (Eq. 12) and its speed-ups stay the paper's. If the solve ends outside the tolerance
  (a few very long documents), the smallest over-budget mask is trimmed: its lowest-quality documents
  are dropped until the tokens are within the tolerance (``token_trimmed_docs`` counts them).
- **fixed domain proportions** (``groups``): each group gets ``proportions[g] x budget`` tokens
  (default: the pool's own token shares) and the method runs inside each group on its own
  (:func:`select_tokens` per group), as Meta-rater's rule does with top-k.

No Kedro or MLflow here.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Mapping, Optional

import numpy as np
import pandas as pd

from curation.errors import UserError
from curation.selection.budget import kept_by_min_quality

log = logging.getLogger(__name__)

ORDERED = ("topk_quality", "random")
TOLERANCE = 0.01  # |selected tokens - budget| <= 1% of the budget (a constant: there is no setting for it)

BUDGET_FIX = ("set budget.tokens (or budget.token_ratio) so the budget lies between the corpus's smallest "
              "document and its total, or count documents instead (budget.docs / budget.keep_ratio)")


class TokenBudgetError(UserError, ValueError):
    """A token budget the corpus cannot meet: above its tokens, below its smallest document, or not reachable
    within :data:`TOLERANCE` by any selection the method made (a pool of a few long documents)."""


def _budget_key(budget: Mapping[str, Any]) -> str:
    if budget.get("tokens") is not None:
        return f"budget.tokens={budget.get('tokens')}"
    return f"budget.token_ratio={budget.get('token_ratio')}"


def check_token_budget(wanted: float, n_tokens: Any, budget: Mapping[str, Any], what: str = "the corpus") -> None:
    """Refuse, before any selection runs, a token budget ``wanted`` that ``n_tokens`` (one count per
    document) cannot meet: not below their total (a selection must leave something out), or below the
    smallest document's tokens minus the tolerance (no non-empty selection is that small)."""
    counts = np.asarray(n_tokens, dtype="float64")
    if counts.size == 0:
        return
    total, smallest = float(counts.sum()), float(counts.min())
    key = _budget_key(budget)
    if wanted >= total:
        raise TokenBudgetError(
            f"{key}: a budget of {wanted:,.0f} tokens is not below the {total:,.0f} tokens of {what} "
            f"({counts.size:,} documents), so there is nothing to select. Fix: lower it below {total:,.0f} "
            f"(budget.token_ratio < 1), or {BUDGET_FIX}.")
    if wanted < smallest * (1 - TOLERANCE) and smallest / total >= 0.99995:  # one document, or one that is all
        raise TokenBudgetError(  # of them: no allowed token_ratio (< 1) holds it, so none is offered (issue #52)
            f"{key}: the smallest document of {what} holds {smallest:,.0f} of its {total:,.0f} tokens "
            f"({counts.size:,} documents), so no token budget below the whole (budget.token_ratio < 1) can hold a "
            "selection. Fix: a corpus of more documents (data.path, data.max_docs).")
    if wanted < smallest * (1 - TOLERANCE):
        raise TokenBudgetError(
            f"{key}: a budget of {wanted:,.0f} tokens is smaller than the smallest document of {what} "
            f"({smallest:,.0f} of its {total:,.0f} tokens), so no selection can hold it. Fix: raise it to at least "
            f"{smallest:,.0f} tokens (budget.token_ratio >= {smallest / total:.4f}), or {BUDGET_FIX}.")


def _unreachable(method: str, selected: float, budget_tokens: float, counts: np.ndarray) -> TokenBudgetError:
    return TokenBudgetError(
        f"token budget of {budget_tokens:,.0f} (budget.tokens / budget.token_ratio): {method} selected "
        f"{selected:,.0f} tokens, outside the {TOLERANCE:.0%} token tolerance (TOLERANCE in "
        f"curation/selection/tokens.py, not a setting), because the pool's {len(counts):,} documents are too few "
        f"or too long (smallest {float(counts.min()) if len(counts) else 0:,.0f}, largest "
        f"{float(counts.max()) if len(counts) else 0:,.0f} tokens) to land within "
        f"{budget_tokens * TOLERANCE:,.0f} tokens of it. Fix: raise the budget to many times the largest document, "
        f"ingest more documents (data.max_docs), or count documents instead (budget.docs / budget.keep_ratio).")


def prefix_to_tokens(order: np.ndarray, n_tokens: np.ndarray, target: float) -> int:
    """How many of ``order`` (positions, best first) to keep so that their tokens reach ``target``: the
    shortest prefix at or above it, or one document less when that lands nearer the target."""
    cum = np.cumsum(np.asarray(n_tokens, dtype="float64")[np.asarray(order, dtype=np.int64)])
    take = int(np.searchsorted(cum, target, side="left"))  # first prefix with cum >= target
    if take >= len(cum):
        return len(cum)
    if take > 0 and target - cum[take - 1] <= cum[take] - target:
        return take  # the prefix just below the target is at least as near
    return take + 1


def fill_to_tokens(order: np.ndarray, n_tokens: np.ndarray, target: float, tolerance: float = TOLERANCE
                   ) -> np.ndarray:
    """The documents an ordered method keeps: :func:`prefix_to_tokens`' prefix when it lands within
    ``tolerance`` of ``target``; otherwise the prefix below the target, then the next documents in order
    that still fit under ``target x (1 + tolerance)`` until the tokens reach ``target x (1 - tolerance)``
    (a long document at the boundary is passed over for the next that fits)."""
    order = np.asarray(order, dtype=np.int64)
    counts = np.asarray(n_tokens, dtype="float64")
    lo, hi = target * (1 - tolerance), target * (1 + tolerance)
    take = prefix_to_tokens(order, counts, target)
    tokens = float(counts[order[:take]].sum())
    if lo <= tokens <= hi:
        return order[:take]
    if tokens > hi:
        take -= 1
        tokens -= float(counts[order[take]])
    chosen = list(order[:take])
    for j in order[take:]:
        if tokens >= lo:
            break
        if tokens + counts[j] <= hi:
            chosen.append(j)
            tokens += float(counts[j])
    return np.asarray(chosen, dtype=np.int64)


def token_budget(budget: Mapping[str, Any], corpus_tokens: Optional[float]) -> Optional[int]:
    """``budget.tokens``, or ``budget.token_ratio`` x ``corpus_tokens`` (the ingested corpus's reference
    tokens), or None when the budget is in documents."""
    tokens, ratio = budget.get("tokens"), budget.get("token_ratio")
    if tokens is not None and ratio is not None:
        raise ValueError("budget.tokens and budget.token_ratio are both set: keep one")
    if budget.get("docs") is not None and (tokens is not None or ratio is not None):
        raise ValueError(f"budget.docs and budget.{'tokens' if tokens is not None else 'token_ratio'} are both "
                         f"set: keep one (a budget counts documents or tokens)")
    if tokens is not None:
        if int(tokens) < 1:
            raise ValueError(f"budget.tokens must be >= 1, got {tokens}")
        return int(tokens)
    if ratio is not None:
        if not 0 < float(ratio) < 1:
            raise ValueError(f"budget.token_ratio must be in (0, 1), got {ratio}")
        if corpus_tokens is None:
            raise ValueError("budget.token_ratio needs the corpus's token count")
        return int(round(float(ratio) * float(corpus_tokens)))
    return None


def _check_tokens(n_tokens: Any, n: int, budget_tokens: float) -> np.ndarray:
    counts = np.asarray(n_tokens)
    if counts.shape != (n,):
        raise ValueError(f"n_tokens has shape {counts.shape}, expected ({n},): one count per candidate")
    if not np.issubdtype(counts.dtype, np.number) or not np.isfinite(counts).all() or (counts < 0).any():
        raise ValueError("n_tokens must be finite non-negative counts")
    total = float(counts.sum())
    if not 0 < budget_tokens < total:
        raise TokenBudgetError(f"token budget of {budget_tokens:,.0f} (budget.tokens / budget.token_ratio) must be in "
                               f"(0, {total:,.0f}): the {n:,} candidates hold {total:,.0f} tokens. Fix: lower "
                               f"budget.tokens / budget.token_ratio, or {BUDGET_FIX}.")
    return counts.astype("float64")


def ordered_positions(method: str, quality: np.ndarray, seed: int) -> np.ndarray:
    """The order an ordered method fills a budget in: quality best first (ties: lower position first)
    for ``topk_quality``; a seeded permutation for ``random`` (the same stream as
    :func:`curation.selection.baselines.select_random`)."""
    if method == "topk_quality":
        return np.argsort(-np.asarray(quality, dtype=np.float64), kind="stable").astype(np.int64)
    from curation.selection.objectives import derive_seed

    return np.random.default_rng(derive_seed(seed, 30)).permutation(len(quality)).astype(np.int64)


def fit_to_tokens(run: Callable[[int], np.ndarray], n_tokens: np.ndarray, budget_tokens: float, *,
                  quality: np.ndarray, tolerance: float = TOLERANCE, max_runs: int = 8,
                  start: Optional[int] = None) -> tuple[np.ndarray, dict[str, float]]:
    """Solve the set size S of ``run(S) -> indices`` so that ``sum n_tokens[indices]`` is within
    ``tolerance`` of ``budget_tokens`` (see the module docstring). Returns (sorted indices, info)."""
    n = len(n_tokens)
    lo_tol, hi_tol = budget_tokens * (1 - tolerance), budget_tokens * (1 + tolerance)
    size = start if start is not None else int(round(budget_tokens / max(float(n_tokens.mean()), 1e-9)))
    size = int(np.clip(size, 1, n - 1))
    tried: dict[int, tuple[np.ndarray, float]] = {}
    sides: list[bool] = []  # True: a run above the budget
    for _ in range(max_runs):
        idx = np.sort(np.asarray(run(size), dtype=np.int64))
        tokens = float(n_tokens[idx].sum())
        tried[size] = (idx, tokens)
        log.info("token budget: S=%d -> %.0f tokens (target %.0f)", size, tokens, budget_tokens)
        if abs(tokens - budget_tokens) <= budget_tokens * tolerance:
            break
        sides.append(tokens > budget_tokens)
        below = [s for s in tried if tried[s][1] < budget_tokens]
        above = [s for s in tried if tried[s][1] > budget_tokens]
        # tokens(S) ~ a S^k (k > 1 for DataMask, whose first picks are its shortest documents): step along the
        # power law through the two nearest runs, the bracketing pair when there is one (k = 1 from one run)
        pair = (max(below), min(above)) if below and above else tuple(sorted(tried, key=lambda z: abs(
            np.log(max(tried[z][1], 1.0) / budget_tokens)))[:2])
        k = 1.0
        if len(pair) == 2 and pair[0] != pair[1]:
            (s1, t1), (s2, t2) = ((z, max(tried[z][1], 1.0)) for z in pair)
            k = float(np.log(t2 / t1) / np.log(s2 / s1))
            k = k if np.isfinite(k) and k > 0.2 else 1.0
        near = min(tried, key=lambda z: abs(np.log(max(tried[z][1], 1.0) / budget_tokens)))
        nxt = int(round(near * (budget_tokens / max(tried[near][1], 1.0)) ** (1.0 / k)))
        if below and above:
            lo, hi = max(below), min(above)
            if len(sides) >= 2 and sides[-1] == sides[-2]:  # one end stuck twice: bisect (halves the bracket)
                nxt = (lo + hi) // 2
            nxt = min(max(nxt, lo + 1), hi - 1)
        nxt = int(np.clip(nxt, 1, n - 1))
        if nxt == size:
            nxt = int(np.clip(size + (1 if tokens < budget_tokens else -1), 1, n - 1))
        if nxt in tried or nxt < 1 or nxt > n - 1:
            break
        size = nxt
    best = min(tried, key=lambda s: abs(tried[s][1] - budget_tokens))
    idx, tokens = tried[best]
    trimmed = 0
    if not lo_tol <= tokens <= hi_tol:
        over = [s for s in tried if tried[s][1] > budget_tokens]
        if not over:  # every solve fell short: one run above the budget to trim from
            size = int(np.clip(round(max(tried) * budget_tokens / max(tried[max(tried)][1], 1.0) * 1.05) + 1, 1, n - 1))
            idx = np.sort(np.asarray(run(size), dtype=np.int64))
            tried[size] = (idx, float(n_tokens[idx].sum()))
            over = [size] if tried[size][1] > budget_tokens else []
        if not over:
            raise TokenBudgetError(f"token budget {budget_tokens:,.0f} (budget.tokens / budget.token_ratio): the "
                                   f"method's largest mask holds {max(t for _, t in tried.values()):,.0f} tokens. "
                                   f"Fix: lower the budget, or count documents instead (budget.docs / budget.keep_ratio).")
        idx, tokens = tried[min(over, key=lambda s: tried[s][1])]
        idx, tokens, trimmed = _trim(idx, n_tokens, quality, lo_tol, hi_tol)
    info = {"token_solve_runs": float(len(tried)), "token_trimmed_docs": float(trimmed), "token_solved_size": float(best)}
    return idx, info


class _PilotHealthNote(logging.Filter):
    """The pilot's policy-health warning as an INFO note: its mask is never returned, it only sets the mask size
    (issue #53: every "returned (sampled) mask ... below the best top-S" warning of decide's runs, 1.8-14.0%, was a
    200-step pilot's, read by users as the selection's)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING:
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.msg = "token-budget pilot (sets the mask size only; its mask is not returned): " + str(record.msg)
        return True


def _datamask_to_tokens(quality: np.ndarray, embeddings: Any, counts: np.ndarray, budget_tokens: float, cfg: Any,
                        seed: int, tolerance: float, progress: Optional[Callable[[int, int], None]]
                        ) -> tuple[np.ndarray, pd.DataFrame, dict]:
    """DataMask (one block) to a token budget: a pilot run (a tenth of the steps) at S0 = budget / mean
    candidate tokens sets the mask size S the policy is trained for: the documents its final draw needs to
    reach the budget. The full run (Algorithm 1 at S) then draws its final mask from softmax(L) one
    document after another (a sequential Plackett-Luce draw, ``final=sample``; the logits' order with
    ``final=topk``) and stops when the tokens reach the budget (:func:`fill_to_tokens`), not at S documents."""
    import dataclasses

    from curation.selection.api import select

    n = len(quality)
    start = int(np.clip(round(budget_tokens / max(float(counts.mean()), 1e-9)), 1, n - 1))
    pilot_cfg = dataclasses.replace(cfg, steps=max(50, cfg.steps // 10), checkpoint_dir=None)
    datamask_log = logging.getLogger("curation.selection.datamask")
    pilot_note = _PilotHealthNote()
    datamask_log.addFilter(pilot_note)
    try:
        pilot = select("datamask", quality=quality, embeddings=embeddings, budget=start, config=pilot_cfg, seed=seed,
                       full_order=True)
    finally:
        datamask_log.removeFilter(pilot_note)
    size = int(np.clip(len(fill_to_tokens(pilot.info["order"], counts, budget_tokens, tolerance)), 1, n - 1))
    log.info("token budget: DataMask pilot at S=%d -> trained mask size S=%d", start, size)
    full = select("datamask", quality=quality, embeddings=embeddings, budget=size, config=cfg, seed=seed,
                  progress=progress, full_order=True)
    local = np.sort(fill_to_tokens(full.info["order"], counts, budget_tokens, tolerance))
    info = {k: v for k, v in full.info.items() if k not in ("budget", "wall_time_s", "config", "order", "blocks")}
    info.update({"token_solve_runs": 2.0, "token_trimmed_docs": 0.0, "token_pilot_size": float(start),
                 "token_solved_size": float(size)})
    return local, full.history, info


def _trim(idx: np.ndarray, n_tokens: np.ndarray, quality: np.ndarray, lo: float, hi: float
          ) -> tuple[np.ndarray, float, int]:
    """Drop the lowest-quality documents of ``idx`` (ties: the later position) until its tokens are <= hi,
    skipping any whose removal would go below lo."""
    keep = np.ones(len(idx), dtype=bool)
    tokens = float(n_tokens[idx].sum())
    order = np.lexsort((-idx, quality[idx]))  # lowest quality first
    dropped = 0
    for j in order:
        if tokens <= hi:
            break
        if tokens - n_tokens[idx[j]] >= lo:
            keep[j] = False
            tokens -= float(n_tokens[idx[j]])
            dropped += 1
    if tokens > hi:
        raise TokenBudgetError(
            f"token budget (budget.tokens / budget.token_ratio): cannot trim the selection to within "
            f"[{lo:,.0f}, {hi:,.0f}] tokens, the {TOLERANCE:.0%} token tolerance (TOLERANCE in "
            f"curation/selection/tokens.py, not a setting): its documents are too long for it. Fix: raise the "
            f"budget to many times the largest document, or count documents instead (budget.docs / budget.keep_ratio).")
    return idx[keep], tokens, dropped


def check_kept_tokens(budget_tokens: float, counts: np.ndarray) -> None:
    """Refuse a token budget the candidates left after ``selection.min_quality`` cannot exceed."""
    if not budget_tokens < counts.sum():
        raise TokenBudgetError(f"token budget {budget_tokens:,.0f} (budget.tokens / budget.token_ratio): the "
                               f"{len(counts)} candidates left after selection.min_quality hold {counts.sum():,.0f} "
                               "tokens. Fix: lower the budget or selection.min_quality.")


def select_tokens(method: str, *, quality: Any, embeddings: Any, n_tokens: Any, budget_tokens: float,
                  config: Mapping[str, Any] | Any = None, seed: int = 0, groups: Any = None,
                  proportions: Optional[Mapping[str, float]] = None, tolerance: float = TOLERANCE,
                  progress: Optional[Callable[[int, int], None]] = None) -> Any:
    """:func:`curation.selection.select` to a token budget: a
    :class:`~curation.selection.api.Selection` whose documents hold ``budget_tokens`` tokens within
    ``tolerance`` (its ``info`` has ``budget_tokens``, ``selected_tokens``, ``token_error`` and how the
    budget was met). ``groups`` (one label per candidate) with ``proportions`` (label -> share; default
    the pool's token shares) splits the budget into fixed domain proportions."""
    from curation.selection.api import Selection, select
    from curation.selection.config import parse_selection_config

    quality = np.asarray(quality, dtype=np.float64)
    n = len(quality)
    counts = _check_tokens(n_tokens, n, float(budget_tokens))
    started = time.perf_counter()
    if groups is not None:
        return _select_groups(method, quality, embeddings, counts, float(budget_tokens), config, seed,
                              np.asarray(groups).astype(str), proportions, tolerance, started)
    cfg = parse_selection_config(method, config)
    kept = kept_by_min_quality(quality, getattr(cfg, "min_quality", None))  # select()'s in-place pruning, first
    q, c = quality[kept], counts[kept]
    check_kept_tokens(budget_tokens, c)
    history, extra = pd.DataFrame(), {}
    if method in ORDERED:
        local = np.sort(fill_to_tokens(ordered_positions(method, q, seed), c, budget_tokens, tolerance))
        extra = {"token_solve_runs": 0.0, "token_trimmed_docs": 0.0}
    elif method == "datamask" and len(kept) <= cfg.block_size:
        local, history, extra = _datamask_to_tokens(q, embeddings if len(kept) == n else np.asarray(embeddings)[kept],
                                                    c, float(budget_tokens), cfg, seed, tolerance, progress)
    else:
        emb = np.asarray(embeddings)[kept] if len(kept) < n else embeddings
        runs: list[Any] = []

        def run(size: int) -> np.ndarray:
            result = select(method, quality=q, embeddings=emb, budget=size, config=cfg, seed=seed, progress=progress)
            runs.append(result)
            return result.indices

        local, extra = fit_to_tokens(run, c, float(budget_tokens), quality=q, tolerance=tolerance)
        chosen = next((r for r in reversed(runs) if set(local).issubset(set(r.indices))), runs[-1])
        history = chosen.history
        extra = {**{k: v for k, v in chosen.info.items() if k not in ("budget", "wall_time_s", "config")}, **extra}
    indices = np.sort(kept[local]).astype(np.int64)
    selected = float(counts[indices].sum())
    info = {"method": method, "seed": seed, "n_input": n, "budget": len(indices), "budget_tokens": float(budget_tokens),
            "selected_tokens": selected, "token_error": selected / float(budget_tokens) - 1.0,
            "wall_time_s": time.perf_counter() - started, **extra}
    if abs(info["token_error"]) > tolerance:  # the contract, checked rather than hoped for
        raise _unreachable(method, selected, float(budget_tokens), c)
    return Selection(indices=indices, history=history, info=info)


def _select_groups(method: str, quality: np.ndarray, embeddings: Any, counts: np.ndarray, budget_tokens: float,
                   config: Any, seed: int, groups: np.ndarray, proportions: Optional[Mapping[str, float]],
                   tolerance: float, started: float) -> Any:
    from curation.selection.api import Selection

    if proportions is None:
        totals = pd.Series(counts).groupby(groups).sum()
        proportions = {str(k): float(v / totals.sum()) for k, v in totals.items()}
    shares = {str(k): float(v) for k, v in dict(proportions).items() if float(v) > 0}
    unknown = sorted(set(shares) - set(groups))
    if unknown:
        raise KeyError(f"budget.domain_proportions: no candidate of domain {unknown[0]!r}; domains: {sorted(set(groups))}")
    total_share = sum(shares.values())
    if abs(total_share - 1.0) > 1e-6:
        raise ValueError(f"budget.domain_proportions must sum to 1, got {total_share:.6f}")
    emb = np.asarray(embeddings)
    chosen, info = [], {"method": method, "seed": seed, "domains": float(len(shares))}
    for name, share in shares.items():
        rows = np.flatnonzero(groups == name)
        target = share * budget_tokens
        have = counts[rows].sum()
        if have < target * (1 - tolerance):
            raise TokenBudgetError(f"budget.domain_proportions: domain {name!r} holds {have:,.0f} tokens, less than "
                                   f"its share {share:.3f} of the {budget_tokens:,.0f}-token budget. Fix: lower its "
                                   f"share or the budget.")
        if have <= target * (1 + tolerance) or len(rows) < 3:
            part = rows  # the whole domain is its share
        else:
            sub = select_tokens(method, quality=quality[rows], embeddings=emb[rows], n_tokens=counts[rows],
                                budget_tokens=target, config=config, seed=seed, tolerance=tolerance)
            part = rows[sub.indices]
        chosen.append(part)
        info[f"domain_tokens.{name}"] = float(counts[part].sum())
    indices = np.sort(np.concatenate(chosen)).astype(np.int64)
    selected = float(counts[indices].sum())
    info.update({"n_input": len(quality), "budget": len(indices), "budget_tokens": budget_tokens,
                 "selected_tokens": selected, "token_error": selected / budget_tokens - 1.0,
                 "wall_time_s": time.perf_counter() - started})
    if abs(info["token_error"]) > tolerance:
        raise _unreachable(method, selected, float(budget_tokens), counts)
    return Selection(indices=indices, history=pd.DataFrame(), info=info)
