"""The Lightning side of :func:`curation.lm.train.train`: the ``LightningModule`` (next-token loss, AdamW,
per-step LR schedule) and the step-metrics callback.

A module of its own so that importing :mod:`curation.lm` (every ``curate`` and ``kedro`` process does, to
validate the ``pretrain`` config) does not import Lightning (~5 s on 2 idle cores): only a training run does.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Callable, Optional

import lightning as L
import torch

from curation.lm.config import TrainConfig, lr_at
from curation.lm.model import CausalLM, ModelConfig

StepHook = Callable[[int, dict], None]


class LitCausalLM(L.LightningModule):
    """Lightning wrapper: next-token loss, AdamW with decoupled weight decay, per-step LR schedule."""

    def __init__(self, model_config: dict, train_config: dict, total_steps: int):
        super().__init__()
        self.save_hyperparameters()
        self.train_cfg = TrainConfig(**train_config)
        self.total_steps = total_steps
        self.model = CausalLM(ModelConfig(**model_config))
        if self.train_cfg.compile:
            self.model.compile()  # in place, so state_dict keys stay those of CausalLM

    def training_step(self, batch, batch_idx):
        x, y = batch
        out = self.model(x, y)
        self.log("train/lm_loss", out.lm_loss.detach(), on_step=True, on_epoch=False)
        self.log("train/aux_loss", out.aux_loss.detach(), on_step=True, on_epoch=False)
        return out.loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val/loss", self.model(x, y).lm_loss, on_step=False, on_epoch=True)

    def configure_optimizers(self):
        cfg = self.train_cfg
        # nanoGPT: decay 2-D weights (matmuls, embeddings), not norms or biases.
        params = [p for p in self.model.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=cfg.lr,
            betas=(cfg.beta1, cfg.beta2),
            eps=cfg.eps,
        )
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: lr_at(step, cfg, self.total_steps) / cfg.lr
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


class StepMetrics(L.Callback):
    """Calls ``on_step(step, metrics)`` after each optimizer step and after each validation.

    Step metrics: loss (cross-entropy of the step's last micro-batch, nats/token),
    aux_loss (MoE load balancing), lr, tokens (seen so far), tokens_per_s (since
    the previous step), elapsed_s. After a validation: {"val_loss": ...}.
    """

    def __init__(self, tokens_per_step: int, on_step: Optional[StepHook] = None):
        self.tokens_per_step = tokens_per_step
        self.on_step = on_step
        self.history: list[dict] = []
        self.start_step = self._last_step = 0
        self._t0 = self._t_last = 0.0

    def on_train_start(self, trainer, pl_module):
        self.start_step = self._last_step = trainer.global_step  # > 0 when resumed
        self._t0 = self._t_last = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        if step == self._last_step:  # mid gradient accumulation
            return
        now = time.perf_counter()
        done = step - self._last_step
        metrics = {
            "loss": float(trainer.callback_metrics["train/lm_loss"]),
            "aux_loss": float(trainer.callback_metrics["train/aux_loss"]),
            "lr": float(trainer.optimizers[0].param_groups[0]["lr"]),
            "tokens": step * self.tokens_per_step,
            "tokens_per_s": done * self.tokens_per_step / max(now - self._t_last, 1e-9),
            "elapsed_s": now - self._t0,
        }
        self._last_step, self._t_last = step, now
        self.history.append({"step": step, **metrics})
        if self.on_step is not None:
            self.on_step(step, metrics)

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking or "val/loss" not in trainer.callback_metrics:
            return
        metrics = {"val_loss": float(trainer.callback_metrics["val/loss"])}
        self.history.append({"step": trainer.global_step, **metrics})
        if self.on_step is not None:
            self.on_step(trainer.global_step, metrics)


@contextlib.contextmanager
def quiet_lightning():
    """Silence Lightning's per-fit banners ("GPU available: False", tips) for the duration of a fit."""
    loggers = [logging.getLogger(name) for name in ("lightning.pytorch", "lightning.fabric", "lightning_fabric")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
