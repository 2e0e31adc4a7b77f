"""Ultra-FineWeb annealing mix: the candidate share of sampled batches is the configured ratio."""

from __future__ import annotations

import math

import pytest
import torch

from curation.lm import MixedBatchSampler, annealing_steps, mixed_loader


@pytest.mark.parametrize("ratio", [0.05, 0.3, 0.5])
def test_every_batch_holds_floor_or_ceil_of_the_ratio(ratio):
    B, n_batches, len_a, len_b = 8, 100, 37, 500
    sampler = MixedBatchSampler(len_a, len_b, ratio, B, n_batches, seed=1)
    counts = []
    for batch in sampler:
        assert len(batch) == B
        counts.append(sum(i < len_a for i in batch))
    assert set(counts) <= {math.floor(ratio * B), math.ceil(ratio * B)}
    assert sum(counts) == round(ratio * B * n_batches)
    running = 0
    for n, c in enumerate(counts, start=1):  # the running share never drifts by half a sequence
        running += c
        assert abs(running - ratio * B * n) <= 0.5


def test_each_dataset_is_drawn_without_replacement_per_pass():
    len_a, len_b = 10, 1000
    picks = [i for batch in MixedBatchSampler(len_a, len_b, 0.5, 4, 10, seed=0) for i in batch if i < len_a]
    assert len(picks) == 20
    assert sorted(picks[:10]) == list(range(10)) and sorted(picks[10:]) == list(range(10))


def test_loader_batches_mix_real_sequences_at_the_ratio(packed, packed_other):
    loader = mixed_loader(packed_other, packed, ratio=0.3, batch_size=10, num_batches=20, seed=0)
    candidate = {tuple(packed_other[i][0].tolist()) for i in range(len(packed_other))}
    default = {tuple(packed[i][0].tolist()) for i in range(len(packed))}
    from_candidate = 0
    for x, y in loader:
        assert x.shape == (10, 64) and torch.equal(x[:, 1:], y[:, :-1])
        rows = [tuple(r.tolist()) for r in x]
        assert all(r in candidate or r in default for r in rows)
        from_candidate += sum(r in candidate for r in rows)
    assert from_candidate == 60  # 30% of 200 sequences


def test_same_seed_same_batches_other_seed_other_batches():
    a = list(MixedBatchSampler(50, 50, 0.3, 8, 5, seed=3))
    assert a == list(MixedBatchSampler(50, 50, 0.3, 8, 5, seed=3))
    assert a != list(MixedBatchSampler(50, 50, 0.3, 8, 5, seed=4))


def test_bad_ratios_are_refused():
    with pytest.raises(ValueError, match="ratio"):
        MixedBatchSampler(10, 10, 1.5, 8, 1)
    with pytest.raises(ValueError, match="candidate"):
        MixedBatchSampler(0, 10, 0.3, 8, 1)


def test_annealing_steps_follow_ultra_fineweb_appendix_a():
    # Total Token = candidate tokens * n_epoch / 0.3; steps = Total Token / (batch * seq_len), capped at 5000.
    assert annealing_steps(1_000_000, 0.3, 16, 256, n_epoch=3) == math.ceil(1_000_000 * 3 / 0.3 / (16 * 256))
    assert annealing_steps(10**12, 0.3, 512, 4096, n_epoch=3) == 5000
