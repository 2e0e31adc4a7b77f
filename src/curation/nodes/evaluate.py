"""Evaluation node: zero-shot tasks on a checkpoint (core: :mod:`curation.evaluation.runs`)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:  # torch: imported by the node when it runs, not when `curate` lists the pipelines
    from curation.lm.checkpoint import LMCheckpoint
else:  # Kedro reads every node's type hints when a run starts: they must resolve without torch
    LMCheckpoint = Any

log = logging.getLogger(__name__)


def evaluate_checkpoint(
    lm_checkpoint: LMCheckpoint, eval: dict[str, Any], cache: dict[str, Any]
) -> tuple[dict[str, float], pd.DataFrame]:
    """``eval_metrics`` (``<task>_<metric>``, ability averages, ``average``) and ``eval_table``
    (task, ability, metric, value, chance, items; unavailable tasks with the reason)."""
    from curation.evaluation.runs import run_evaluation

    metrics, table = run_evaluation(lm_checkpoint, eval, cache)
    log.info("average %.4f over %d tasks", metrics["average"], int(metrics["eval_tasks"]))
    return metrics, table
