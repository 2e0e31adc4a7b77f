"""Lightning training: schedules, per-step hook, artifacts, resume, annealing from a base model."""

from __future__ import annotations

import json
import math

import pytest
import torch

from curation.lm import PretrainConfig, TrainConfig, get_config, load_model, lr_at, mixed_loader, train
from curation.lm.model import ModelConfig


def micro_config(**train_overrides) -> PretrainConfig:
    """A 2-layer model on 64-token sequences: a few steps take well under a second each."""
    cfg = get_config("tiny")
    cfg.tokenizer.vocab_size = 1024
    cfg.model = ModelConfig(vocab_size=1024, max_seq_len=64, n_layer=2, d_model=64, n_head=4, n_kv_head=2, d_ff=128)
    cfg.train = TrainConfig(**{"seq_len": 64, "batch_size": 8, "max_steps": 4, "lr": 3e-3, **train_overrides})
    return cfg


def test_constant_schedule_is_flat_after_warmup():
    cfg = TrainConfig(lr=4e-4, warmup_steps=4)
    assert [lr_at(s, cfg, 100) for s in range(4)] == pytest.approx([1e-4, 2e-4, 3e-4, 4e-4])
    assert lr_at(50, cfg, 100) == lr_at(99, cfg, 100) == pytest.approx(4e-4)


def test_cosine_schedule_runs_from_lr_to_min_lr():
    cfg = TrainConfig(lr=1e-3, min_lr=1e-4, schedule="cosine")
    assert lr_at(0, cfg, 101) == pytest.approx(1e-3)
    assert lr_at(50, cfg, 101) == pytest.approx(0.5 * (1e-3 + 1e-4))
    assert lr_at(100, cfg, 101) == pytest.approx(1e-4)


@pytest.mark.parametrize("shape", ["exp", "linear"])
def test_wsd_schedule_is_stable_then_decays_in_the_last_fraction(shape):
    cfg = TrainConfig(lr=1e-3, min_lr=5e-5, schedule="wsd", decay_fraction=0.1, decay_shape=shape)
    stable = [lr_at(s, cfg, 100) for s in range(90)]
    assert stable == pytest.approx([1e-3] * 90)
    decay = [lr_at(s, cfg, 100) for s in range(90, 100)]
    assert all(a > b for a, b in zip(decay, decay[1:]))
    assert decay[-1] == pytest.approx(5e-5)
    if shape == "exp":  # Ultra-FineWeb App. A: exponential decay, lr * (min/lr)^progress
        assert decay[4] == pytest.approx(1e-3 * (5e-5 / 1e-3) ** 0.5)


def test_train_calls_the_hook_each_step_and_validation_writes_artifacts_and_lowers_loss(packed, tmp_path):
    seen, validations = [], []

    def hook(step, metrics):
        (validations if "val_loss" in metrics else seen).append((step, metrics))

    result = train(micro_config(max_steps=6, val_every_steps=3, val_batches=2), packed, tmp_path / "run",
                   val_data=packed, on_step=hook)
    assert [s for s, _ in seen] == [1, 2, 3, 4, 5, 6]
    assert [s for s, _ in validations] == [3, 6] and validations[1][1]["val_loss"] < validations[0][1]["val_loss"]
    assert {"loss", "aux_loss", "lr", "tokens", "tokens_per_s", "elapsed_s"} <= set(seen[0][1])
    assert seen[-1][1]["tokens"] == 6 * 8 * 64 == result.tokens
    assert seen[-1][1]["loss"] < seen[0][1]["loss"]
    assert result.steps == 6 and math.isfinite(result.val_loss) and result.tokens_per_s > 0
    meta = json.loads((tmp_path / "run" / "config.json").read_text())
    assert meta["model"]["d_model"] == 64 and meta["pretrain"]["train"]["max_steps"] == 6
    loaded = load_model(tmp_path / "run")
    x, _ = packed[0]
    with torch.no_grad():
        torch.testing.assert_close(loaded(x[None]).logits, result.model(x[None]).logits)


def test_token_budget_sets_the_number_of_steps(packed, tmp_path):
    cfg = micro_config(max_steps=None, max_tokens=3 * 8 * 64 - 10)  # rounds up to 3 steps
    assert train(cfg, packed, tmp_path).steps == 3


def test_a_finished_run_resumes_without_training_again(packed, tmp_path):
    cfg = micro_config(max_steps=3, checkpoint_every_steps=2)
    first = train(cfg, packed, tmp_path)
    assert (tmp_path / "checkpoints" / "last.ckpt").exists()
    calls = []
    again = train(cfg, packed, tmp_path, on_step=lambda s, m: calls.append(s))
    assert calls == [] and again.steps == first.steps == 3
    torch.testing.assert_close(again.model.embed_tokens.weight, first.model.embed_tokens.weight)


def test_annealing_starts_from_the_base_weights_on_a_mixed_loader(packed, packed_other, tmp_path):
    base = train(micro_config(max_steps=2, schedule="wsd"), packed, tmp_path / "base")
    loader = mixed_loader(packed_other, packed, ratio=0.3, batch_size=8, num_batches=2, seed=0)
    cfg = micro_config(max_steps=2, lr=1e-9, min_lr=1e-9)  # a vanishing step: weights stay at the base
    annealed = train(cfg, loader, tmp_path / "anneal", init_from=tmp_path / "base")
    torch.testing.assert_close(annealed.model.embed_tokens.weight, base.model.embed_tokens.weight, atol=1e-6, rtol=0)


def test_unknown_and_mistyped_keys_are_refused(packed, tmp_path):
    with pytest.raises(ValueError, match="train.lrr"):
        train({"train": {"lrr": 1.0}}, packed, tmp_path)
    with pytest.raises(ValueError, match="train.max_steps"):
        train({"train": {"max_steps": "many"}}, packed, tmp_path)
