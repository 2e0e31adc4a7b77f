"""Verification nodes: Ultra-FineWeb's efficient verification (seeds/002 Sec. 2.2, App. A, Table 8).

candidates -> packed default mix and candidates -> WSD base model -> one annealing
run per (candidate, ratio) plus the default-mix-only annealing per ratio, each
evaluated -> the Table 8 analogue. Training runs and evaluations are cached by
content like the pretrain pipeline's, so a sweep over ``verification.ratios``
trains the base model once.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np
import pandas as pd
import tokenizers

from curation.cache import config_key
from curation.datasets.lm import LMCheckpoint
from curation.lm import PackedDataset, annealing_steps, loader_from, mixed_loader, parse_config
from curation.lm.config import PretrainConfig
from curation.nodes.evaluate import run_evaluation
from curation.nodes.pretrain import pack_texts, packed_digest, select_corpus_documents, train_cached
from curation.pretraining.corpora import SELECTION
from curation.pretraining.verification import (
    BASE,
    BASELINE,
    DEFAULT_MIX,
    format_table8,
    parse_verification_config,
    ratio_label,
    verification_table,
)
from curation.reporting.plots import plt

log = logging.getLogger(__name__)


def select_verification_candidates(
    documents: pd.DataFrame,
    scores: pd.DataFrame,
    embeddings: np.ndarray,
    pruned_scores: pd.DataFrame,
    pruned_embeddings: np.ndarray,
    selected_documents: pd.DataFrame,
    verification: dict[str, Any],
    budget: dict[str, Any],
    run: dict[str, Any],
    cache: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``verification_candidates`` (columns ``candidate``, ``id``: every candidate corpus and the default
    mix) and ``verification_candidates_table`` (documents and characters per corpus)."""
    cfg = parse_verification_config(verification)
    parts, rows = [], []
    for name, spec in cfg.candidates.items():
        if spec.method == SELECTION:
            chosen = selected_documents
        else:
            chosen, _ = select_corpus_documents(documents, scores, embeddings, pruned_scores, pruned_embeddings,
                                                spec, budget, int(run["seed"]), cache)
        parts.append(pd.DataFrame({"candidate": name, "id": chosen["id"].to_numpy()}))
        rows.append({"corpus": name, "method": spec.method, "pool": spec.pool, "score": spec.score,
                     "docs": len(chosen), "chars": int(chosen["text"].str.len().sum())})
    mix = documents if cfg.default_docs is None or cfg.default_docs >= len(documents) else documents.sample(
        n=cfg.default_docs, random_state=cfg.seed).sort_index()
    parts.append(pd.DataFrame({"candidate": DEFAULT_MIX, "id": mix["id"].to_numpy()}))
    rows.append({"corpus": DEFAULT_MIX, "method": "all" if cfg.default_docs is None else "random", "pool": "raw",
                 "score": "", "docs": len(mix), "chars": int(mix["text"].str.len().sum())})
    return pd.concat(parts, ignore_index=True), pd.DataFrame(rows)


def tokenize_verification_corpora(
    documents: pd.DataFrame, verification_candidates: pd.DataFrame, verification_tokenizer: tokenizers.Tokenizer,
    pretrain: dict[str, Any]
) -> tuple[dict[str, PackedDataset], dict[str, float]]:
    """Pack the default mix and each candidate (``{name: PackedDataset}``), documents in corpus order."""
    seq_len = parse_config(pretrain).train.seq_len
    text = documents.set_index("id")["text"]
    packed, metrics = {}, {}
    for name, group in verification_candidates.groupby("candidate", sort=False):
        packed[name] = pack_texts(text.loc[group["id"]].tolist(), verification_tokenizer, seq_len)
        metrics[f"{name}_tokens"] = float(packed[name].n_tokens)
    return packed, metrics


def _base_config(pretrain: dict[str, Any], cfg) -> PretrainConfig:
    base = parse_config(pretrain)
    base.train = dataclasses.replace(base.train, schedule="wsd", decay_fraction=cfg.base_decay_fraction,
                                     max_tokens=cfg.base_tokens, max_steps=None, seed=cfg.seed)
    return base.validate()


def train_verification_base(
    verification_tokens: dict[str, PackedDataset], verification_tokenizer: tokenizers.Tokenizer,
    pretrain: dict[str, Any], verification: dict[str, Any], cache: dict[str, Any]
) -> tuple[LMCheckpoint, pd.DataFrame, dict[str, float]]:
    """The base model: ``pretrain.model`` trained on the default mix with a WSD schedule (stable, then an
    exponential decay over the last ``base_decay_fraction`` of ``base_tokens``), Ultra-FineWeb Sec. 2.2."""
    cfg = parse_verification_config(verification)
    base_cfg = _base_config(pretrain, cfg)
    default = verification_tokens[DEFAULT_MIX]
    data = PackedDataset(default.path, seq_len=base_cfg.train.seq_len)
    trained = train_cached(base_cfg, loader_from(data, base_cfg.train.batch_size, cfg.seed), cache=cache,
                           data_key=config_key("verification-base", packed_digest(data), base_cfg.train.seq_len))
    metrics = {f"base_{k}": v for k, v in trained.metrics.items()}
    metrics["base_cache_hit"] = float(trained.cache_hit)
    checkpoint = LMCheckpoint(trained.model, verification_tokenizer, dataclasses.asdict(base_cfg))
    history = trained.history.rename(columns=lambda c: c if c == "step" else f"base_{c}")
    return checkpoint, history, metrics


def _anneal_config(pretrain: dict[str, Any], cfg, steps: int) -> PretrainConfig:
    """App. A annealing: warmup over ``anneal_warmup_fraction`` of the steps, then exponential decay
    (WSD with no stable phase) from ``anneal_lr`` to ``anneal_min_lr``."""
    anneal = parse_config(pretrain)
    warmup = round(cfg.anneal_warmup_fraction * steps)
    anneal.train = dataclasses.replace(anneal.train, schedule="wsd", decay_shape="exp",
                                       decay_fraction=(steps - warmup) / steps, warmup_steps=warmup,
                                       lr=cfg.anneal_lr, min_lr=cfg.anneal_min_lr, max_steps=steps, seed=cfg.seed)
    return anneal.validate()


def annealing_length(cfg, candidates: dict[str, PackedDataset], ratios: list[float], batch_size: int,
                     seq_len: int) -> int:
    """Steps of every annealing run: ``anneal_steps``, else App. A's formula for the candidate and ratio
    that need the most, capped at ``anneal_max_steps`` (one length, so every delta compares like with like)."""
    if cfg.anneal_steps is not None:
        return cfg.anneal_steps
    return max(annealing_steps(packed.n_tokens, ratio, batch_size, seq_len, cfg.anneal_epochs, cfg.anneal_max_steps)
               for packed in candidates.values() for ratio in ratios)


def anneal_candidates(
    verification_base: LMCheckpoint,
    verification_tokens: dict[str, PackedDataset],
    pretrain: dict[str, Any],
    verification: dict[str, Any],
    eval: dict[str, Any],
    cache: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, float]]:
    """Anneal the base model per (candidate, ratio) and on the default mix alone per ratio; evaluate
    them and the base model. Returns ``verification_results`` (run, dataset, ratio, task, metric,
    value), ``verification_anneal_history`` (step + one loss column per run) and metrics."""
    cfg = parse_verification_config(verification)
    eval_cfg = dict(eval)
    if cfg.tasks is not None:
        eval_cfg["tasks"] = cfg.tasks
    if cfg.limit is not None:
        eval_cfg["limit"] = cfg.limit
    train_cfg = parse_config(pretrain).train
    seq_len, batch = train_cfg.seq_len, train_cfg.batch_size
    default = PackedDataset(verification_tokens[DEFAULT_MIX].path, seq_len=seq_len)
    candidates = {name: PackedDataset(p.path, seq_len=seq_len)
                  for name, p in verification_tokens.items() if name != DEFAULT_MIX}
    steps = annealing_length(cfg, candidates, cfg.ratios, batch * train_cfg.accumulate_grad_batches, seq_len)
    anneal_cfg = _anneal_config(pretrain, cfg, steps)
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

    record(BASE, BASE, float("nan"), verification_base)
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
        trained = train_cached(anneal_cfg, loader, data_key, cache, init_from=verification_base.model)
        metrics[f"{run}_final_loss"] = trained.metrics["final_loss"]
        metrics[f"{run}_cache_hit"] = float(trained.cache_hit)
        if "loss" in trained.history:
            histories.append(trained.history.set_index("step")["loss"].rename(f"{run}_loss"))
        record(run, dataset, ratio, LMCheckpoint(trained.model, verification_base.tokenizer))
    history = pd.concat(histories, axis=1).reset_index() if histories else pd.DataFrame({"step": []})
    return pd.DataFrame(records), history, metrics


def tabulate_verification(verification_results: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, float], Any]:
    """``verification_table`` (Table 8 analogue, percent; ``delta_*`` in points vs the default-mix-only
    annealing at the same ratio), ``verification_metrics`` (``<candidate>_<ratio>_delta_average`` ...)
    and ``verification_plot`` (per-task deltas). Averages and deltas are in percent / points."""
    table = verification_table(verification_results)
    log.info("efficient verification (Table 8 analogue):\n%s", format_table8(table))
    tasks = [c[len("delta_"):] for c in table.columns if c.startswith("delta_")]
    metrics: dict[str, float] = {}
    for _, row in table.iterrows():  # percent, like the table
        prefix = BASE if row["dataset"] == BASE else f"{row['dataset']}_{ratio_label(row['ratio'])}"
        metrics[f"{prefix}_average"] = row["average"]
        if row["dataset"] not in (BASE, BASELINE):
            metrics.update({f"{prefix}_delta_{t}": row[f"delta_{t}"] for t in tasks})
    candidates = table[~table["dataset"].isin([BASE, BASELINE])]
    return table, metrics, _delta_plot(candidates, tasks)


def _delta_plot(candidates: pd.DataFrame, tasks: list[str]):
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(tasks), 3.6))
    width = 0.8 / max(len(candidates), 1)
    x = np.arange(len(tasks))
    for i, (_, row) in enumerate(candidates.iterrows()):
        ax.bar(x + i * width, [row[f"delta_{t}"] for t in tasks], width,
               label=f"{row['dataset']} ({row['ratio']:.0%})")
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xticks(x + width * (len(candidates) - 1) / 2, tasks, rotation=30, ha="right")
    ax.set_ylabel("delta vs default-only annealing (points)")
    ax.set_title("Efficient verification (Ultra-FineWeb Table 8 analogue)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
