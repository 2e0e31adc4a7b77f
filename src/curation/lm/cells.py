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

from curation.lm.config import PretrainConfig, get_config

log = logging.getLogger(__name__)

OnCell = Callable[[str, dict[str, Any], dict[str, float]], None]  # (run name, params, metrics)


class TooSmallForBudget(ValueError):
    """A candidate holds fewer LM tokens than a cell trains on: it would be repeated (> 1 epoch)."""


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
    from curation.lm.cached import tokenize_texts
    from curation.selection.corpus import corpus_documents

    out = {}
    for name, spec in candidates.items():
        chosen, metrics = corpus_documents(frames.documents, frames.scores, frames.embeddings, frames.pruned_scores,
                                           frames.pruned_embeddings, spec, budget, seed, cache)
        packed, packing = tokenize_texts(chosen["text"].tolist(), tokenizer, seq_len)
        out[name] = (packed, {**metrics, "lm_tokens": packing["tokens_total"]})
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


def run_cells(frames: Frames, candidates: Mapping[str, Any], sizes: list[str], seeds: list[int],
              budget: Mapping[str, Any], pretrain: PretrainConfig, eval_config: Any, seed: int,
              cache: Mapping[str, Any], on_cell: Optional[OnCell] = None,
              on_progress: Optional[Callable[[int, int, str], None]] = None) -> tuple[pd.DataFrame, dict]:
    """Train and evaluate every (candidate, size, seed) cell: one row per cell (the evaluation's metrics and
    what the cell was made from) and each cell's per-item values ((size, candidate, seed) -> items).
    Refuses a candidate whose corpus is smaller than a cell's training tokens (:class:`TooSmallForBudget`)."""
    from curation.evaluation.runs import run_evaluation
    from curation.lm.cached import cached_tokenizer, pretrain as pretrain_lm

    tokenizer, _ = cached_tokenizer(frames.documents, pretrain.tokenizer, cache)
    corpora = candidate_corpora(frames, candidates, budget, seed, tokenizer, pretrain.train.seq_len, cache)
    rows, items, done, total = [], {}, 0, len(candidates) * len(sizes) * len(seeds)
    for size in sizes:
        size_cfg = size_config(pretrain, size)
        for name, (packed, corpus_metrics) in corpora.items():
            _check_one_epoch(name, packed, size_cfg)
            for train_seed in seeds:
                cell_cfg = dataclasses.replace(size_cfg, train=dataclasses.replace(size_cfg.train, seed=int(train_seed)))
                checkpoint, _, train_metrics = pretrain_lm(packed, tokenizer, cell_cfg, cache)
                cell_items: dict = {}
                eval_metrics, _ = run_evaluation(checkpoint, eval_config, cache, items_out=cell_items)
                row = {"candidate": name, "size": size, "seed": int(train_seed), **corpus_metrics, **train_metrics,
                       **eval_metrics}
                rows.append(row)
                items[(size, name, int(train_seed))] = cell_items
                if on_cell is not None:
                    on_cell(f"{name} / {size} / seed {train_seed}",
                            {"candidate": name, "size": size, "seed": train_seed}, row)
                done += 1
                if on_progress is not None:
                    on_progress(done, total, f"{name}, {size}, seed {train_seed}: " + ", ".join(
                        f"{m} {row[m]:.4g}" for m in ("mc_correct_prob_per_char", "ref_bits_per_byte") if m in row))
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
