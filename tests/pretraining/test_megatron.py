"""Megatron-core configs of the paper's models: parameter counts from models built on `meta`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("megatron.core", reason="optional extra: pip install -e .[megatron]")


def _counts() -> dict[str, list[int]]:
    # A subprocess: building initialises torch.distributed (gloo) and Megatron's
    # global parallel state, which must not leak into other tests.
    code = ("import json, warnings; warnings.simplefilter('ignore');"
            "from curation.pretraining.megatron import count_parameters;"
            "print(json.dumps({n: count_parameters(n) for n in ('qwen2_5_1_5b', 'moe_7b')}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_parameter_counts_hit_the_paper_targets():
    from curation.pretraining.megatron import TARGETS

    counts = _counts()
    dense_total, dense_active = counts["qwen2_5_1_5b"]
    assert abs(dense_total / TARGETS["qwen2_5_1_5b"]["total"] - 1) < 0.05
    # Qwen2.5-1.5B's published non-embedding count is 1.31B.
    assert abs(dense_active / 1.31e9 - 1) < 0.05
    moe_total, moe_active = counts["moe_7b"]
    assert abs(moe_total / TARGETS["moe_7b"]["total"] - 1) < 0.05
    assert abs(moe_active / TARGETS["moe_7b"]["active_non_embedding"] - 1) < 0.05
    assert moe_total > 9 * moe_active  # 10 experts, top-1


def test_training_settings_are_the_papers():
    from curation.pretraining.megatron import TRAINING

    assert (TRAINING.lr, TRAINING.global_batch_size, TRAINING.seq_length) == (4e-4, 1536, 8192)
    assert (TRAINING.weight_decay, TRAINING.clip_grad) == (0.1, 1.0)
    assert TRAINING.token_budget == {"qwen2_5_1_5b": 400e9, "moe_7b": 300e9}
