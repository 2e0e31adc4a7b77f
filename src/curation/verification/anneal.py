"""The efficient-verification experiment (Ultra-FineWeb seeds/002 Sec. 2.2, App. A, Table 8).

candidates -> packed default mix and candidates -> WSD base model -> one annealing
run per (candidate, ratio) plus the default-mix-only annealing per ratio, each
evaluated -> the Table 8 analogue. Training runs and evaluations are cached by
content (:mod:`curation.lm.cached`, :mod:`curation.evaluation.runs`), so a sweep
over ``verification.ratios`` trains the base model once.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from typing import Any, Mapping, Optional

import numpy as np
import pandas as pd
import tokenizers

from curation.cache import config_key
from curation.errors import UserError
from curation.evaluation.runs import run_evaluation
from curation.lm import PackedDataset, annealing_steps, loader_from, mixed_loader
from curation.lm.cached import pack_texts, packed_digest, train_cached
from curation.lm.checkpoint import LMCheckpoint
from curation.lm.config import PretrainConfig
from curation.selection.corpus import SELECTION, corpus_documents
from curation.verification.config import BASE, BASELINE, DEFAULT_MIX, VerificationConfig, ratio_label
from curation.verification.config import verification_table

log = logging.getLogger(__name__)


def select_candidates(
    documents: pd.DataFrame,
    scores: pd.DataFrame,
    embeddings: np.ndarray,
    pruned_scores: pd.DataFrame,
    pruned_embeddings: np.ndarray,
    selected_documents: pd.DataFrame,
    cfg: VerificationConfig,
    budget: Mapping[str, Any],
    seed: int,
    cache: Mapping[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every candidate corpus (:func:`curation.selection.corpus.corpus_documents`; ``selection`` is the
    run's ``selected_documents``) and the default mix, as (``candidate``, ``id``) rows, with a table of
    documents and characters per corpus."""
    parts, rows = [], []
    for name, spec in cfg.candidates.items():
        if spec.method == SELECTION:
            chosen = selected_documents
        else:
            chosen, _ = corpus_documents(documents, scores, embeddings, pruned_scores, pruned_embeddings,
                                         spec, budget, seed, cache)
        parts.append(pd.DataFrame({"candidate": name, "id": chosen["id"].to_numpy()}))
        rows.append({"corpus": name, "method": spec.method, "pool": spec.pool, "score": spec.score,
                     "docs": len(chosen), "chars": int(chosen["text"].str.len().sum())})
    mix = documents if cfg.default_docs is None or cfg.default_docs >= len(documents) else documents.sample(
        n=cfg.default_docs, random_state=cfg.seed).sort_index()
    parts.append(pd.DataFrame({"candidate": DEFAULT_MIX, "id": mix["id"].to_numpy()}))
    rows.append({"corpus": DEFAULT_MIX, "method": "all" if cfg.default_docs is None else "random", "pool": "raw",
                 "score": "", "docs": len(mix), "chars": int(mix["text"].str.len().sum())})
    return pd.concat(parts, ignore_index=True), pd.DataFrame(rows)


def sample_tokens(texts: list[str], tokenizer: tokenizers.Tokenizer, max_tokens: int, seed: int) -> list[str]:
    """A seeded sample of whole documents holding at most ``max_tokens`` tokens (each + its EOS), kept in
    the given order: the candidate's verification data (Ultra-FineWeb App. A's "smaller datasets", whose
    size sets the annealing length). Documents are drawn in a seeded random order; one that no longer fits
    is skipped (so the sample leans to short documents once the budget is nearly full); when no document
    fits at all, the first drawn is kept alone."""
    order = np.random.default_rng(seed).permutation(len(texts))
    chosen: list[int] = []
    used = 0
    for start in range(0, len(order), 256):
        block = order[start:start + 256]
        for i, enc in zip(block, tokenizer.encode_batch([texts[i] for i in block], add_special_tokens=False)):
            n = len(enc.ids) + 1
            if used + n <= max_tokens:
                chosen.append(int(i))
                used += n
        if max_tokens - used < 16:
            break
    return [texts[i] for i in sorted(chosen)] if chosen else [texts[int(order[0])]]


def pack_candidates(documents: pd.DataFrame, candidates: pd.DataFrame, tokenizer: tokenizers.Tokenizer,
                    seq_len: int, candidate_tokens: Optional[int] = None,
                    seed: int = 0) -> tuple[dict[str, PackedDataset], dict[str, float]]:
    """Pack the default mix and each candidate (``{name: PackedDataset}``), documents in corpus order; each
    candidate (not the default mix) is first cut to a seeded sample of at most ``candidate_tokens``
    (:func:`sample_tokens`; None keeps it whole)."""
    text = documents.set_index("id")["text"]
    packed, metrics = {}, {}
    for name, group in candidates.groupby("candidate", sort=False):
        texts = text.loc[group["id"]].tolist()
        if name != DEFAULT_MIX and candidate_tokens is not None:
            texts = sample_tokens(texts, tokenizer, candidate_tokens, seed)
        packed[name] = pack_texts(texts, tokenizer, seq_len)
        metrics[f"{name}_tokens"] = float(packed[name].n_tokens)
        metrics[f"{name}_verification_docs"] = float(len(texts))
    return packed, metrics


def base_config(pretrain: PretrainConfig, cfg: VerificationConfig) -> PretrainConfig:
    """``pretrain`` with a WSD schedule over ``base_tokens``: linear warmup over ``base_warmup_fraction`` of
    the steps (App. B: 1,000 of 26,000), stable at ``pretrain.train.lr``, exponential decay to
    ``pretrain.train.min_lr`` over the last ``base_decay_fraction`` (Sec. 2.2: 0.1T of 1.1T)."""
    base = copy.deepcopy(pretrain)
    steps = base_steps(pretrain, cfg)
    base.train = dataclasses.replace(pretrain.train, schedule="wsd", decay_fraction=cfg.base_decay_fraction,
                                     warmup_steps=round(cfg.base_warmup_fraction * steps),
                                     max_tokens=cfg.base_tokens, max_steps=None, seed=cfg.seed)
    return base.validate()


def base_steps(pretrain: PretrainConfig, cfg: VerificationConfig) -> int:
    """Optimizer steps of the base run: ``base_tokens`` counted as the run itself counts them
    (:meth:`curation.lm.config.TrainConfig.total_steps`, whole steps rounded up)."""
    return dataclasses.replace(pretrain.train, max_tokens=cfg.base_tokens, max_steps=None).total_steps()


MAX_BASE_EPOCHS = 1.0  # the base model is pre-trained, not memorising: at most one pass over the default mix


class BaseTooLargeError(UserError, ValueError):
    """The default mix holds fewer tokens than ``verification.base_tokens`` asks the base model to train on."""


def check_base_fits(mix_tokens: int, base_tokens: int, tokens_per_step: int) -> None:
    """Refuse, before the base model trains, a ``verification.base_tokens`` above :data:`MAX_BASE_EPOCHS` passes
    over the default mix's ``mix_tokens`` LM tokens (e.g. 1,048,576 tokens on a 20-document corpus of ~20k
    tokens: ~50 passes, hours of training that measure memorisation), naming the numbers and the settings that fit."""
    allowed = MAX_BASE_EPOCHS * mix_tokens
    if base_tokens <= allowed:
        return
    fit = int(allowed) // tokens_per_step * tokens_per_step
    raise BaseTooLargeError(
        f"verification.base_tokens={base_tokens}: the base model would train {base_tokens / max(mix_tokens, 1):.1f} "
        f"passes over the default mix's {mix_tokens:,} LM tokens (at most {MAX_BASE_EPOCHS:g}). Fix: ingest more "
        f"documents (data.max_docs, data.path) or set verification.base_tokens <= {fit} "
        f"({fit // tokens_per_step if tokens_per_step else 0} steps of {tokens_per_step:,} tokens)"
        + ("" if fit else ": too few for one step, so a larger corpus is the fix") + ".")


def train_base(tokens: dict[str, PackedDataset], tokenizer: tokenizers.Tokenizer, pretrain: PretrainConfig,
               cfg: VerificationConfig, cache: Mapping[str, Any]) -> tuple[LMCheckpoint, pd.DataFrame, dict]:
    """The base model: ``pretrain.model`` trained on the default mix with a WSD schedule (stable, then an
    exponential decay over the last ``base_decay_fraction`` of ``base_tokens``), Ultra-FineWeb Sec. 2.2.
    Refused first (:func:`check_base_fits`) when ``base_tokens`` is more than one pass over the default mix."""
    base_cfg = base_config(pretrain, cfg)
    data = PackedDataset(tokens[DEFAULT_MIX].path, seq_len=base_cfg.train.seq_len)
    check_base_fits(int(data.index.n_tokens), int(cfg.base_tokens), int(base_cfg.train.tokens_per_step))
    trained = train_cached(base_cfg, loader_from(data, base_cfg.train.batch_size, cfg.seed), cache=cache,
                           data_key=config_key("verification-base", packed_digest(data), base_cfg.train.seq_len))
    metrics = {f"base_{k}": v for k, v in trained.metrics.items()}
    metrics["base_cache_hit"] = float(trained.cache_hit)
    checkpoint = LMCheckpoint(trained.model, tokenizer, dataclasses.asdict(base_cfg))
    history = trained.history.rename(columns=lambda c: c if c == "step" else f"base_{c}")
    return checkpoint, history, metrics


def anneal_config(pretrain: PretrainConfig, cfg: VerificationConfig, steps: int) -> PretrainConfig:
    """App. A annealing: warmup over ``anneal_warmup_fraction`` of the steps, then exponential decay
    (WSD with no stable phase) from the peak ``anneal_lr_scale`` x the base run's peak
    (``pretrain.train.lr``; App. A's 1e-3 after App. B's 1e-2) to ``anneal_min_lr_scale`` x that peak
    (5e-5 / 1e-3)."""
    anneal = copy.deepcopy(pretrain)
    warmup = round(cfg.anneal_warmup_fraction * steps)
    peak = cfg.anneal_lr_scale * pretrain.train.lr
    anneal.train = dataclasses.replace(pretrain.train, schedule="wsd", decay_shape="exp",
                                       decay_fraction=(steps - warmup) / steps, warmup_steps=warmup,
                                       lr=peak, min_lr=cfg.anneal_min_lr_scale * peak, max_steps=steps,
                                       seed=cfg.seed)
    return anneal.validate()


def annealing_length(cfg: VerificationConfig, candidates: dict[str, PackedDataset], ratios: list[float],
                     batch_size: int, seq_len: int) -> int:
    """Steps of the annealing runs at ``ratios``: ``anneal_steps``, else App. A's formula
    (``tokens x n_epoch / r`` in steps of ``batch x seq_len``) for the candidate that needs the most, capped
    at ``anneal_max_steps``. Called per ratio: every candidate and the default-only control at one ratio
    anneal equally long (App. A: "the training steps for the baseline experiments are also dynamically
    adjusted"), so each delta compares like with like."""
    if cfg.anneal_steps is not None:
        return cfg.anneal_steps
    return max(annealing_steps(packed.n_tokens, ratio, batch_size, seq_len, cfg.anneal_epochs, cfg.anneal_max_steps)
               for packed in candidates.values() for ratio in ratios)


def schedule_summary(pretrain: PretrainConfig, cfg: VerificationConfig,
                     candidate_tokens: Optional[int] = None) -> dict[str, float]:
    """The verification's schedule numbers for a candidate of ``candidate_tokens`` (default: a full
    ``cfg.candidate_tokens`` sample): base peak, steps, tokens; per ratio the annealing peak, steps, tokens,
    its share of the base run's tokens and whether App. A's formula or the cap set the length."""
    tokens = candidate_tokens if candidate_tokens is not None else cfg.candidate_tokens
    if tokens is None:
        raise ValueError("name candidate_tokens: the config keeps candidates whole")
    per_step = pretrain.train.tokens_per_step
    seq_len, batch = pretrain.train.seq_len, pretrain.train.batch_size * pretrain.train.accumulate_grad_batches
    out = {"base_peak_lr": pretrain.train.lr, "base_final_lr": pretrain.train.min_lr,
           "base_steps": float(base_steps(pretrain, cfg)), "base_tokens": float(base_steps(pretrain, cfg) * per_step),
           "base_warmup_steps": float(base_config(pretrain, cfg).train.warmup_steps),
           "anneal_peak_lr": cfg.anneal_lr_scale * pretrain.train.lr,
           "anneal_final_lr": cfg.anneal_min_lr_scale * cfg.anneal_lr_scale * pretrain.train.lr}
    for ratio in cfg.ratios:
        label = ratio_label(ratio)
        formula = annealing_steps(tokens, ratio, batch, seq_len, cfg.anneal_epochs, 10**12)
        steps = cfg.anneal_steps if cfg.anneal_steps is not None else min(formula, cfg.anneal_max_steps)
        out[f"anneal_steps_{label}"] = float(steps)
        out[f"anneal_tokens_{label}"] = float(steps * per_step)
        out[f"anneal_share_of_base_{label}"] = steps * per_step / out["base_tokens"]
        out[f"anneal_formula_governs_{label}"] = float(cfg.anneal_steps is None and formula <= cfg.anneal_max_steps)
    return out


CONTINUOUS_PREFIXES = ("mc_", "ref_")  # EvalReport.metrics(): task-averaged continuous metrics, reference loss
# (recorded per run with ``average``, the mean of the ability averages as in Table 2, as a fraction)


def anneal_candidates(
    base: LMCheckpoint,
    tokens: dict[str, PackedDataset],
    pretrain: PretrainConfig,
    cfg: VerificationConfig,
    eval_config: Mapping[str, Any],
    cache: Mapping[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, float]]:
    """Anneal the base model per (candidate, ratio) and on the default mix alone per ratio; evaluate
    them and the base model. Returns the results (run, dataset, ratio, task, metric, value), the
    annealing history (step + one loss column per run) and metrics.

    ``eval_config``: the ``eval`` group; ``cfg.tasks`` / ``cfg.limit`` override its tasks and limit."""
    eval_cfg = dict(eval_config)
    if cfg.tasks is not None:
        eval_cfg["tasks"] = cfg.tasks
    if cfg.limit is not None:
        eval_cfg["limit"] = cfg.limit
    train_cfg = pretrain.train
    seq_len, batch = train_cfg.seq_len, train_cfg.batch_size
    default = PackedDataset(tokens[DEFAULT_MIX].path, seq_len=seq_len)
    candidates = {name: PackedDataset(p.path, seq_len=seq_len) for name, p in tokens.items() if name != DEFAULT_MIX}
    lengths = {ratio: annealing_length(cfg, candidates, [ratio], batch * train_cfg.accumulate_grad_batches, seq_len)
               for ratio in cfg.ratios}
    per_step = train_cfg.tokens_per_step
    base_tokens = base_steps(pretrain, cfg) * per_step
    records, histories = [], []
    metrics: dict[str, float] = {"anneal_steps": float(max(lengths.values())),
                                 "anneal_tokens": float(max(lengths.values()) * per_step),
                                 "anneal_peak_lr": cfg.anneal_lr_scale * train_cfg.lr, "base_peak_lr": train_cfg.lr}
    for ratio, steps in lengths.items():
        metrics[f"anneal_steps_{ratio_label(ratio)}"] = float(steps)
        metrics[f"anneal_share_of_base_{ratio_label(ratio)}"] = steps * per_step / base_tokens

    def record(run: str, dataset: str, ratio: float, checkpoint: LMCheckpoint) -> None:
        scores, table = run_evaluation(checkpoint, eval_cfg, cache)
        for _, row in table[table["available"]].iterrows():
            records.append({"run": run, "dataset": dataset, "ratio": ratio, "task": row["task"],
                            "metric": row["metric"], "value": row["value"], "n_items": row["n_items"]})
        metrics[f"{run}_eval_cache_hit"] = scores["eval_cache_hit"]
        # The task-averaged continuous metrics (DataDecide) and the gold-text loss, per run, so the
        # verification's ranking can be set against from-scratch training's on the same metrics.
        metrics.update({f"{run}_{k}": float(v) for k, v in scores.items() if k.startswith(CONTINUOUS_PREFIXES) or k == "average"})

    record(BASE, BASE, float("nan"), base)
    runs = [(BASELINE, None, ratio) for ratio in cfg.ratios]
    runs += [(name, name, ratio) for ratio in cfg.ratios for name in candidates]
    for dataset, candidate, ratio in runs:
        run = f"{dataset}_{ratio_label(ratio)}"
        anneal_cfg = anneal_config(pretrain, cfg, lengths[ratio])
        micro_batches = lengths[ratio] * anneal_cfg.train.accumulate_grad_batches
        # The default-only run draws with ratio 0, through the same sampler, so only the mix differs.
        source = candidates[candidate] if candidate is not None else default
        share = ratio if candidate is not None else 0.0
        loader = mixed_loader(source, default, share, batch, micro_batches, seed=cfg.seed)
        data_key = config_key("anneal", packed_digest(source), packed_digest(default), share, seq_len, micro_batches,
                              cfg.seed)
        log.info("annealing %s: %d steps, candidate share %.2f", run, lengths[ratio], share)
        trained = train_cached(anneal_cfg, loader, data_key, cache, init_from=base.model)
        metrics[f"{run}_final_loss"] = trained.metrics["final_loss"]
        metrics[f"{run}_cache_hit"] = float(trained.cache_hit)
        if "loss" in trained.history:
            histories.append(trained.history.set_index("step")["loss"].rename(f"{run}_loss"))
        record(run, dataset, ratio, LMCheckpoint(trained.model, base.tokenizer))
    history = pd.concat(histories, axis=1).reset_index() if histories else pd.DataFrame({"step": []})
    return pd.DataFrame(records), history, metrics


def tabulate(results: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, float], pd.DataFrame, list[str]]:
    """The Table 8 analogue (percent; ``delta_*`` in points vs the default-mix-only annealing at the same
    ratio), its metrics (``<candidate>_<ratio>_delta_<task>``, ``<run>_average``), the candidate rows
    and the task names."""
    table = verification_table(results)
    tasks = [c[len("delta_"):] for c in table.columns if c.startswith("delta_")]
    metrics: dict[str, float] = {}
    for _, row in table.iterrows():  # percent, like the table
        prefix = BASE if row["dataset"] == BASE else f"{row['dataset']}_{ratio_label(row['ratio'])}"
        metrics[f"{prefix}_average"] = row["average"]
        if row["dataset"] not in (BASE, BASELINE):
            metrics.update({f"{prefix}_delta_{t}": row[f"delta_{t}"] for t in tasks})
    return table, metrics, table[~table["dataset"].isin([BASE, BASELINE])], tasks
