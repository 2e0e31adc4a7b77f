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
from typing import Any, Mapping

import numpy as np
import pandas as pd
import tokenizers

from curation.cache import config_key
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


def pack_candidates(documents: pd.DataFrame, candidates: pd.DataFrame, tokenizer: tokenizers.Tokenizer,
                    seq_len: int) -> tuple[dict[str, PackedDataset], dict[str, float]]:
    """Pack the default mix and each candidate (``{name: PackedDataset}``), documents in corpus order."""
    text = documents.set_index("id")["text"]
    packed, metrics = {}, {}
    for name, group in candidates.groupby("candidate", sort=False):
        packed[name] = pack_texts(text.loc[group["id"]].tolist(), tokenizer, seq_len)
        metrics[f"{name}_tokens"] = float(packed[name].n_tokens)
    return packed, metrics


def base_config(pretrain: PretrainConfig, cfg: VerificationConfig) -> PretrainConfig:
    """``pretrain`` with a WSD schedule over ``base_tokens``, decaying over ``base_decay_fraction``."""
    base = copy.deepcopy(pretrain)
    base.train = dataclasses.replace(pretrain.train, schedule="wsd", decay_fraction=cfg.base_decay_fraction,
                                     max_tokens=cfg.base_tokens, max_steps=None, seed=cfg.seed)
    return base.validate()


def train_base(tokens: dict[str, PackedDataset], tokenizer: tokenizers.Tokenizer, pretrain: PretrainConfig,
               cfg: VerificationConfig, cache: Mapping[str, Any]) -> tuple[LMCheckpoint, pd.DataFrame, dict]:
    """The base model: ``pretrain.model`` trained on the default mix with a WSD schedule (stable, then an
    exponential decay over the last ``base_decay_fraction`` of ``base_tokens``), Ultra-FineWeb Sec. 2.2."""
    base_cfg = base_config(pretrain, cfg)
    data = PackedDataset(tokens[DEFAULT_MIX].path, seq_len=base_cfg.train.seq_len)
    trained = train_cached(base_cfg, loader_from(data, base_cfg.train.batch_size, cfg.seed), cache=cache,
                           data_key=config_key("verification-base", packed_digest(data), base_cfg.train.seq_len))
    metrics = {f"base_{k}": v for k, v in trained.metrics.items()}
    metrics["base_cache_hit"] = float(trained.cache_hit)
    checkpoint = LMCheckpoint(trained.model, tokenizer, dataclasses.asdict(base_cfg))
    history = trained.history.rename(columns=lambda c: c if c == "step" else f"base_{c}")
    return checkpoint, history, metrics


def anneal_config(pretrain: PretrainConfig, cfg: VerificationConfig, steps: int) -> PretrainConfig:
    """App. A annealing: warmup over ``anneal_warmup_fraction`` of the steps, then exponential decay
    (WSD with no stable phase) from ``anneal_lr`` to ``anneal_min_lr``."""
    anneal = copy.deepcopy(pretrain)
    warmup = round(cfg.anneal_warmup_fraction * steps)
    anneal.train = dataclasses.replace(pretrain.train, schedule="wsd", decay_shape="exp",
                                       decay_fraction=(steps - warmup) / steps, warmup_steps=warmup,
                                       lr=cfg.anneal_lr, min_lr=cfg.anneal_min_lr, max_steps=steps, seed=cfg.seed)
    return anneal.validate()


def annealing_length(cfg: VerificationConfig, candidates: dict[str, PackedDataset], ratios: list[float],
                     batch_size: int, seq_len: int) -> int:
    """Steps of every annealing run: ``anneal_steps``, else App. A's formula for the candidate and ratio
    that need the most, capped at ``anneal_max_steps`` (one length, so every delta compares like with like)."""
    if cfg.anneal_steps is not None:
        return cfg.anneal_steps
    return max(annealing_steps(packed.n_tokens, ratio, batch_size, seq_len, cfg.anneal_epochs, cfg.anneal_max_steps)
               for packed in candidates.values() for ratio in ratios)


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
    steps = annealing_length(cfg, candidates, cfg.ratios, batch * train_cfg.accumulate_grad_batches, seq_len)
    anneal_cfg = anneal_config(pretrain, cfg, steps)
    micro_batches = steps * anneal_cfg.train.accumulate_grad_batches

    records, histories = [], []
    metrics: dict[str, float] = {"anneal_steps": float(steps),
                                 "anneal_tokens": float(steps * anneal_cfg.train.tokens_per_step)}

    def record(run: str, dataset: str, ratio: float, checkpoint: LMCheckpoint) -> None:
        scores, table = run_evaluation(checkpoint, eval_cfg, cache)
        for _, row in table[table["available"]].iterrows():
            records.append({"run": run, "dataset": dataset, "ratio": ratio, "task": row["task"],
                            "metric": row["metric"], "value": row["value"], "n_items": row["n_items"]})
        metrics[f"{run}_eval_cache_hit"] = scores["eval_cache_hit"]

    record(BASE, BASE, float("nan"), base)
    runs = [(BASELINE, None, ratio) for ratio in cfg.ratios]
    runs += [(name, name, ratio) for ratio in cfg.ratios for name in candidates]
    for dataset, candidate, ratio in runs:
        run = f"{dataset}_{ratio_label(ratio)}"
        # The default-only run draws with ratio 0, through the same sampler, so only the mix differs.
        source = candidates[candidate] if candidate is not None else default
        share = ratio if candidate is not None else 0.0
        loader = mixed_loader(source, default, share, batch, micro_batches, seed=cfg.seed)
        data_key = config_key("anneal", packed_digest(source), packed_digest(default), share, seq_len, micro_batches,
                              cfg.seed)
        log.info("annealing %s: %d steps, candidate share %.2f", run, steps, share)
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
