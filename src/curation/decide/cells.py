"""The cells of a data decision (issue #38): every candidate corpus x model size x training seed, trained on
the same tokens with no document repeated and evaluated on the same items (``curate experiment=decide``).

Plain Python over the cached stages (:mod:`curation.selection.corpus`, :mod:`curation.lm.cached`,
:mod:`curation.evaluation.runs`): each corpus pick, trained model and evaluation is cached by content, so a
killed run re-run loads its finished cells and resumes the unfinished one. ``on_cell`` (the node passes
MLflow child runs) and ``on_progress`` are called after each cell. No Kedro or MLflow here.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Callable, Mapping, Optional

import numpy as np
import pandas as pd

from curation.errors import UserError
from curation.lm.config import PretrainConfig, get_config

log = logging.getLogger(__name__)

OnCell = Callable[[str, dict[str, Any], dict[str, float]], None]  # (run name, params, metrics)


class TooSmallForBudget(UserError, ValueError):
    """A candidate holds fewer LM tokens than a cell trains on: it would be repeated (> 1 epoch)."""


# A candidate's LM tokens per reference token vary with what it selects (on the bundled corpus at one reference
# budget: 804k-890k LM tokens, +-5% around the corpus's ratio): the check before any selection asks this much
# room, so that the exact check after the selections (_check_one_epoch) does not fail late.
FIT_MARGIN = 1.15


def check_fits(documents: pd.DataFrame, budget: Mapping[str, Any], pretrain: PretrainConfig,
               rungs: Optional[list[int]], cache: Mapping[str, Any], seed: int = 0,
               sample_docs: int = 2000) -> dict[str, float]:
    """Before scoring and selection: will every candidate hold the top rung's training tokens (<= 1 epoch)?

    The corpus's reference tokens are counted (the cached count the budget uses), its LM tokens per
    reference token measured on up to ``sample_docs`` documents with the cells' own tokenizer (cached, the one
    the cells use), so a candidate of ``budget`` holds about ``budget x ratio`` LM tokens, less the validation
    windows a cell holds out. Raises :class:`TooSmallForBudget` with the numbers and the settings that work
    when that falls short of ``FIT_MARGIN`` x the top rung; returns the numbers as metrics otherwise."""
    from curation.lm.cached import cached_tokenizer
    from curation.selection.corpus import document_tokens, resolve_token_budget

    top = max(rungs or [pretrain.train.max_tokens])
    tokens = resolve_token_budget(documents, budget, cache)
    if tokens is None:
        raise TooSmallForBudget("decide: set a token budget (budget.token_ratio or budget.tokens): candidates are "
                                "compared at equal tokens, not equal documents")
    ref_total = float(tokens.n_tokens.sum())
    tokenizer, _ = cached_tokenizer(documents, pretrain.tokenizer, cache)
    sample = documents if len(documents) <= sample_docs else documents.sample(sample_docs, random_state=seed)
    lm_sample = sum(len(e.ids) + 1 for e in tokenizer.encode_batch(sample["text"].astype(str).tolist()))  # + EOS
    ref_sample = float(document_tokens(sample, cache).sum())
    ratio = lm_sample / max(ref_sample, 1.0)
    train = pretrain.train
    held_out = train.val_batches * train.batch_size * train.seq_len
    expected = tokens.budget * ratio - held_out
    need = FIT_MARGIN * top
    numbers = {"decide_corpus_reference_tokens": ref_total, "decide_lm_per_reference_token": ratio,
               "decide_candidate_lm_tokens_expected": expected, "decide_top_rung_tokens": float(top),
               "decide_epochs_expected": top / expected if expected > 0 else float("inf")}
    if expected >= need:
        log.info("decide: each candidate holds about %.0f LM training tokens; the top rung trains on %d (%.2f epochs)",
                 expected, top, numbers["decide_epochs_expected"])
        return numbers
    whole = ref_total * ratio - held_out
    ratio_needed = (need + held_out) / (ratio * ref_total)
    fit_tokens = int(max(expected, 0) / FIT_MARGIN) // train.tokens_per_step * train.tokens_per_step
    where = "decide.rungs" if rungs else "pretrain.train.max_tokens"
    fixes = []
    if ratio_needed <= 1.0:
        fixes.append(f"budget.token_ratio={min(1.0, np.ceil(ratio_needed * 100) / 100):g}")
    if fit_tokens >= train.tokens_per_step:
        fixes.append(f"{'the top of decide.rungs' if rungs else where} to at most {fit_tokens:,}")
    if ratio_needed > 1.0:
        fixes.append(f"a larger corpus (all of this one holds about {max(whole, 0):,.0f} LM training tokens)")
    raise TooSmallForBudget(
        f"decide: each candidate would hold about {max(expected, 0):,.0f} LM training tokens ({tokens.budget:,} "
        f"reference tokens of the corpus's {ref_total:,.0f}), a cell trains on {top:,} ({where}), which needs "
        f"{need:,.0f} with the {FIT_MARGIN:g}x margin for <= 1 epoch: set " + " or ".join(fixes))


def size_config(base: PretrainConfig, size: str) -> PretrainConfig:
    """The model of ``size`` trained as ``base`` is (same tokenizer, tokens, schedule): ``tiny`` is
    ``base`` itself (the ``pretrain`` group as composed); any other name a preset's model
    (:data:`curation.lm.config.PRESETS`) with ``base``'s tokenizer and ``train`` block: the same tokens."""
    if size == "tiny":
        return base
    preset = get_config(size)
    model = dataclasses.replace(preset.model, vocab_size=base.model.vocab_size,
                                max_seq_len=max(preset.model.max_seq_len, base.train.seq_len))
    return dataclasses.replace(base, name=size, model=model).validate()


@dataclasses.dataclass
class Frames:
    """The default job's outputs a candidate is cut from (aligned as the selection stage leaves them)."""

    documents: pd.DataFrame
    scores: pd.DataFrame
    embeddings: np.ndarray
    pruned_scores: pd.DataFrame
    pruned_embeddings: np.ndarray


def candidate_corpora(frames: Frames, candidates: Mapping[str, Any], budget: Mapping[str, Any], seed: int,
             tokenizer: Any, seq_len: int, cache: Mapping[str, Any]) -> dict[str, tuple[Any, dict[str, float]]]:
    """Every candidate's pick (first: a bad budget fails before any training), packed for the LM."""
    from curation.cache import text_digest
    from curation.lm.cached import tokenize_texts
    from curation.selection.corpus import corpus_documents

    out = {}
    for name, spec in candidates.items():
        chosen, metrics = corpus_documents(frames.documents, frames.scores, frames.embeddings, frames.pruned_scores,
                                           frames.pruned_embeddings, spec, budget, seed, cache)
        packed, packing = tokenize_texts(chosen["text"].tolist(), tokenizer, seq_len)
        digest = text_digest("\n".join(sorted(chosen["id"].astype(str))))[:16]
        out[name] = (packed, {**metrics, "lm_tokens": packing["tokens_total"], "corpus_digest": digest})
        log.info("decide: %s holds %d documents, %.0f reference tokens, %.0f LM tokens", name,
                 metrics["corpus_docs"], metrics["corpus_tokens"], packing["tokens_total"])
    return out


def _check_one_epoch(name: str, packed: Any, cfg: PretrainConfig) -> int:
    from curation.lm.cached import split_validation

    train_part, _ = split_validation(packed, cfg.train.batch_size, cfg.train.val_batches)
    available = len(train_part) * cfg.train.seq_len
    wanted = cfg.train.total_steps() * cfg.train.tokens_per_step
    if wanted > available:
        raise TooSmallForBudget(
            f"decide: candidate {name!r} holds {available:,} LM training tokens, a cell trains on {wanted:,}: it "
            "would repeat documents (> 1 epoch). Raise budget.tokens / budget.token_ratio or lower "
            "pretrain.train.max_tokens")
    return wanted


def scale_label(size: str, tokens: int) -> str:
    """``<size>@<training tokens>``: one rung of the compute ladder (the same selections trained longer)."""
    return f"{size}@{int(tokens)}"


def rung_config(cfg: PretrainConfig, tokens: int) -> PretrainConfig:
    """``cfg`` trained on ``tokens`` tokens (a rung of the ladder: same model, batch and schedule shape)."""
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, max_tokens=int(tokens), max_steps=None))


def draw_seeds(seed: int, seeds: list[int], draws: str) -> dict[int, int]:
    """Training seed -> selection seed. ``per_seed``: each training seed gets its own selection draw
    (``seed + training seed``), so a stochastic candidate's seed-to-seed spread includes its selection's own
    randomness; ``one``: every training seed trains on the one draw made with ``seed``."""
    return {int(s): (int(seed) + int(s) if draws == "per_seed" else int(seed)) for s in seeds}


def run_cells(frames: Frames, candidates: Mapping[str, Any], sizes: list[str], seeds: list[int],
              budget: Mapping[str, Any], pretrain: PretrainConfig, eval_config: Any, seed: int,
              cache: Mapping[str, Any], on_cell: Optional[OnCell] = None,
              on_progress: Optional[Callable[[int, int, str], None]] = None, rungs: Optional[list[int]] = None,
              draws: str = "one") -> tuple[pd.DataFrame, dict]:
    """Train and evaluate every (candidate, size, rung, seed) cell: one row per cell (the evaluation's metrics and
    what the cell was made from: ``scale``, ``draw_seed``, ``corpus_digest``) and each cell's per-item values
    ((scale, candidate, seed) -> items). ``rungs``: training tokens per cell, cheapest first (default: the
    ``pretrain`` block's ``max_tokens``); ``draws``: :func:`draw_seeds`.
    Refuses a candidate whose corpus is smaller than the largest rung's training tokens before any cell trains
    (:class:`TooSmallForBudget`)."""
    from curation.evaluation.runs import run_evaluation
    from curation.lm.cached import cached_tokenizer, pretrain as pretrain_lm

    rungs = sorted(int(r) for r in (rungs or [pretrain.train.max_tokens]))
    tokenizer, _ = cached_tokenizer(frames.documents, pretrain.tokenizer, cache)
    by_seed = draw_seeds(seed, seeds, draws)
    picks: dict[int, dict] = {}
    for draw in dict.fromkeys(by_seed.values()):
        picks[draw] = candidate_corpora(frames, candidates, budget, draw, tokenizer, pretrain.train.seq_len, cache)
    for size in sizes:  # every candidate and draw against the top rung: fail before any cell trains
        top = rung_config(size_config(pretrain, size), rungs[-1])
        for draw, corpora in picks.items():
            for name, (packed, _) in corpora.items():
                _check_one_epoch(name, packed, top)
    rows, items, done, total = [], {}, 0, len(candidates) * len(sizes) * len(seeds) * len(rungs)
    for tokens in rungs:
        for size in sizes:
            size_cfg = rung_config(size_config(pretrain, size), tokens)
            scale = scale_label(size, tokens)
            for name in candidates:
                for train_seed in seeds:
                    draw = by_seed[int(train_seed)]
                    packed, corpus_metrics = picks[draw][name]
                    cell_cfg = dataclasses.replace(size_cfg, train=dataclasses.replace(size_cfg.train,
                                                                                       seed=int(train_seed)))
                    checkpoint, _, train_metrics = pretrain_lm(packed, tokenizer, cell_cfg, cache)
                    cell_items: dict = {}
                    eval_metrics, _ = run_evaluation(checkpoint, eval_config, cache, items_out=cell_items)
                    row = {"candidate": name, "size": size, "scale": scale, "rung_tokens": int(tokens),
                           "seed": int(train_seed), "draw_seed": draw,
                           "corpus_digest": corpus_metrics.get("corpus_digest", ""),
                           **{k: v for k, v in corpus_metrics.items() if k != "corpus_digest"}, **train_metrics,
                           **eval_metrics}
                    rows.append(row)
                    items[(scale, name, int(train_seed))] = cell_items
                    if on_cell is not None:
                        on_cell(f"{name} / {scale} / seed {train_seed}",
                                {"candidate": name, "size": size, "rung_tokens": tokens, "seed": train_seed,
                                 "draw_seed": draw}, row)
                    done += 1
                    if on_progress is not None:
                        on_progress(done, total, f"{name}, {scale}, seed {train_seed}: " + ", ".join(
                            f"{m} {row[m]:.4g}" for m in ("mc_correct_prob_per_char", "ref_bits_per_byte")
                            if m in row))
    return pd.DataFrame(rows), items


def progress_printer(started: Optional[float] = None) -> Callable[[int, int, str], None]:
    """``[decide] cell k/n: <what> (elapsed, ~left)`` on stdout and in the log, after each cell."""
    t0 = time.perf_counter() if started is None else started
    first: list[float] = []

    def show(done: int, total: int, what: str) -> None:
        now = time.perf_counter()
        first.append(now)
        # the rate from the first finished cell on (the first cell also carries the corpus picks)
        rate = (now - first[0]) / (done - 1) if done > 1 else now - t0
        eta = rate * (total - done)
        log.info("decide: cell %d/%d done (%s); %.0f s so far, ~%.0f s left", done, total, what, now - t0, eta)
        print(f"[decide] cell {done}/{total}: {what} ({now - t0:.0f} s, ~{eta:.0f} s left)", flush=True)

    return show
