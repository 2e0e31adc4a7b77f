"""The value a pre-training run hands on: a trained model with the tokenizer it was trained with.

A domain value, not a storage format: :class:`curation.datasets.LMCheckpointDataset`
saves and loads it for Kedro; the evaluation and verification code reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class LMCheckpoint:
    """A trained causal LM with the tokenizer it was trained with."""

    model: Any  # curation.lm.CausalLM, in eval mode
    tokenizer: Any  # tokenizers.Tokenizer with <|endoftext|>
    config: dict = field(default_factory=dict)  # the PretrainConfig of the run, as a dict (empty if unknown)
