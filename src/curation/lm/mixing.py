"""Batches that mix two packed datasets at a fixed ratio (Ultra-FineWeb efficient verification).

Ultra-FineWeb (seeds/002 Sec. 2.2, App. A) anneals a WSD-pretrained model on a
mix that gives 30% of the weight to the candidate ("verification") data and 70%
to the default mix, and compares with the same annealing on the default mix
alone; App. C.3 sweeps the ratio over 5-50%.

:class:`MixedBatchSampler` makes that weight exact: over the first ``n`` batches
it has drawn ``round(ratio * n * batch_size)`` candidate sequences, so every
batch holds ``floor`` or ``ceil`` of ``ratio * batch_size`` of them and the
running share never drifts by more than half a sequence. Within each dataset,
sequences are drawn without replacement, epoch after epoch (a new permutation
per pass), so a small candidate set is repeated the 3-5 epochs the paper allows.
"""

from __future__ import annotations

import math
from typing import Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler


class MixtureDataset(Dataset):
    """Datasets ``a`` and ``b`` side by side: index ``i < len(a)`` reads ``a``, the rest ``b``."""

    def __init__(self, a: Dataset, b: Dataset):
        self.a, self.b = a, b
        self.len_a, self.len_b = len(a), len(b)

    def __len__(self) -> int:
        return self.len_a + self.len_b

    def __getitem__(self, i: int):
        return self.a[i] if i < self.len_a else self.b[i - self.len_a]


def _cycle(n: int, rng: np.random.Generator) -> Iterator[int]:
    """0..n-1 in a fresh random order per pass, forever."""
    while True:
        yield from rng.permutation(n).tolist()


def candidate_count(ratio: float, batch_size: int, n_batches: int) -> int:
    """Candidate sequences in the first ``n_batches`` batches: ratio * n * B rounded half up."""
    return int(math.floor(ratio * n_batches * batch_size + 0.5))


class MixedBatchSampler(Sampler[list[int]]):
    """Yields ``num_batches`` batches of indices into ``MixtureDataset(a, b)``, a share ``ratio`` from ``a``.

    ratio: fraction of sequences from ``a`` (the candidate), in [0, 1]; Ultra-FineWeb default 0.3.
    """

    def __init__(self, len_a: int, len_b: int, ratio: float, batch_size: int, num_batches: int, seed: int = 0):
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"ratio={ratio} must be in [0, 1]")
        if ratio > 0 and len_a == 0:
            raise ValueError("ratio > 0 but the candidate dataset is empty")
        if ratio < 1 and len_b == 0:
            raise ValueError("ratio < 1 but the default dataset is empty")
        self.len_a, self.len_b = len_a, len_b
        self.ratio, self.batch_size, self.num_batches, self.seed = ratio, batch_size, num_batches, seed

    def __len__(self) -> int:
        return self.num_batches

    def __iter__(self) -> Iterator[list[int]]:
        rng = np.random.default_rng(self.seed)
        from_a = _cycle(self.len_a, rng) if self.len_a else iter(())
        from_b = _cycle(self.len_b, rng) if self.len_b else iter(())
        for n in range(self.num_batches):
            k = candidate_count(self.ratio, self.batch_size, n + 1) - candidate_count(self.ratio, self.batch_size, n)
            batch = [next(from_a) for _ in range(k)]
            batch += [self.len_a + next(from_b) for _ in range(self.batch_size - k)]
            yield [batch[j] for j in rng.permutation(len(batch))]  # candidate rows not always first


def mixed_loader(
    candidate: Dataset, default: Dataset, ratio: float, batch_size: int, num_batches: int, seed: int = 0
) -> DataLoader:
    """A DataLoader whose batches hold ``ratio`` candidate sequences and ``1 - ratio`` default ones."""
    sampler = MixedBatchSampler(len(candidate), len(default), ratio, batch_size, num_batches, seed)
    return DataLoader(MixtureDataset(candidate, default), batch_sampler=sampler)


def annealing_steps(
    candidate_tokens: int,
    ratio: float,
    batch_size: int,
    seq_len: int,
    n_epoch: float = 3.0,
    max_steps: int = 5000,
) -> int:
    """Annealing length of Ultra-FineWeb App. A, in optimizer steps.

    Total Token = candidate tokens * n_epoch / ratio (the candidate is seen
    n_epoch times at weight ``ratio``); steps = Total Token / (batch * seq_len),
    at most ``max_steps`` (the paper's 5,000 steps, ~10B tokens, for large
    candidates; it prints ``max`` but describes the cap).
    """
    if ratio <= 0:
        raise ValueError(f"ratio={ratio} must be > 0")
    total_tokens = candidate_tokens * n_epoch / ratio
    return max(1, min(max_steps, math.ceil(total_tokens / (batch_size * seq_len))))


def loader_from(dataset: Dataset, batch_size: int, seed: int = 0) -> DataLoader:
    """Shuffled batches of one packed dataset (a new order each epoch, seeded)."""
    if len(dataset) < batch_size:
        raise ValueError(f"dataset has {len(dataset)} sequences, fewer than one batch of {batch_size}")
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True, generator=generator)
