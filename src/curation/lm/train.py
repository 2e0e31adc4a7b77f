"""Pre-train a :class:`~curation.lm.model.CausalLM` with Lightning.

``train(config, train_data, out_dir)`` runs AdamW with a constant, cosine or
WSD learning-rate schedule, weight decay 0.1 and gradient clipping 1.0
(DATAMASK seeds/000 Sec. 4.1), bf16-mixed on a bf16 GPU and fp32 elsewhere,
Lightning checkpoints for resuming, and calls ``on_step(step, metrics)`` after
every optimizer step so a caller can forward the loss to MLflow (this package
imports no tracking library). It writes ``out_dir/model.pt`` and
``out_dir/config.json``, read back by :func:`load_model`.

The WSD schedule (warmup-stable-decay; MiniCPM, Hu et al. 2024) and
``init_from`` serve Ultra-FineWeb's efficient verification (seeds/002 Sec. 2.2,
App. A): a base model trained with WSD, then annealed from its weights on a
mixed loader (:mod:`curation.lm.mixing`).

The Lightning module and callback are in :mod:`curation.lm.lit`, imported by :func:`train` only: importing
this module (every ``curate`` process does, through :mod:`curation.lm`) does not import Lightning.
"""

from __future__ import annotations

import dataclasses
import json
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import torch
from torch.utils.data import DataLoader, Dataset

from curation.lm.config import PretrainConfig, TrainConfig, lr_at, parse_config  # noqa: F401  (re-exported)
from curation.lm.mixing import loader_from
from curation.lm.model import CausalLM, ModelConfig

StepHook = Callable[[int, dict], None]

MODEL_FILE = "model.pt"
CONFIG_FILE = "config.json"


def resolve_precision(precision: str) -> str:
    """'auto' -> bf16-mixed on a GPU that supports bf16, else 32-true.

    CPU bf16 autocast is possible (this CPU has AVX512-BF16) but does not pay
    off for these small matmuls: tiny trains at ~4,200 tokens/s with it against
    ~6,200 in fp32 on 2 idle cores (``benchmarks/results/lm_tiny_trainer*.csv``).
    So 'auto' keeps fp32 on CPU; set ``precision: bf16-mixed`` to use it anyway.
    """
    if precision != "auto":
        return precision
    if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return "bf16-mixed"
    return "32-true"


@dataclass
class TrainResult:
    model: CausalLM  # the trained model, in eval mode, on CPU
    out_dir: Path  # holds model.pt, config.json, checkpoints/
    steps: int  # optimizer steps taken in total (resumed ones included)
    tokens: int  # training tokens consumed (steps * tokens per step)
    final_loss: float  # training cross-entropy of the last step (nats/token); nan if no step ran
    val_loss: Optional[float]  # mean cross-entropy on the validation data (nats/token), if given
    tokens_per_s: float  # training throughput of this call, warm-up included
    elapsed_s: float  # wall time of this call's fit
    history: list[dict] = field(default_factory=list)  # one row per optimizer step


def _as_loader(data: Dataset | DataLoader, batch_size: int, seed: int) -> DataLoader:
    return data if isinstance(data, DataLoader) else loader_from(data, batch_size, seed)


def train(
    config: PretrainConfig | dict,
    train_data: Dataset | DataLoader,
    out_dir: str | Path,
    val_data: Optional[Dataset] = None,
    on_step: Optional[StepHook] = None,
    init_from: Optional[str | Path] = None,
    resume: bool = True,
) -> TrainResult:
    """Train ``config.model`` on ``train_data`` for ``config.train.total_steps()`` optimizer steps.

    train_data: a :class:`~curation.lm.packing.PackedDataset` (shuffled batches
        of ``train.batch_size``) or a ready DataLoader of (x, y) batches, e.g.
        :func:`~curation.lm.mixing.mixed_loader`.
    val_data: sequences for the validation loss (first ``val_batches`` batches,
        in order), logged every ``val_every_steps`` and computed at the end.
    on_step: ``on_step(step, metrics)`` after each optimizer step (and with
        ``{"val_loss": ...}`` after each validation), e.g. to log to MLflow.
    init_from: a ``model.pt`` (or its folder) to start from, e.g. the WSD base
        model before an annealing run.
    resume: continue from ``out_dir/checkpoints/last.ckpt`` when it exists.
    """
    cfg = parse_config(config)
    tc = cfg.train
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    import lightning as L  # here, not at the top: importing curation.lm stays free of Lightning

    from curation.lm.lit import LitCausalLM, StepMetrics, quiet_lightning

    torch.set_num_threads(tc.num_threads)
    L.seed_everything(tc.seed, verbose=False)
    total_steps = tc.total_steps()
    module = LitCausalLM(dataclasses.asdict(cfg.model), dataclasses.asdict(tc), total_steps)
    if init_from is not None:
        module.model.load_state_dict(_read_state_dict(init_from))

    metrics = StepMetrics(tc.tokens_per_step, on_step)
    callbacks: list[L.Callback] = [metrics]
    ckpt_dir = out_dir / "checkpoints"
    if tc.checkpoint_every_steps:
        callbacks.append(
            L.pytorch.callbacks.ModelCheckpoint(
                dirpath=ckpt_dir, every_n_train_steps=tc.checkpoint_every_steps, save_last=True, save_top_k=1
            )
        )
    val_loader = None
    if val_data is not None:
        val_loader = DataLoader(val_data, batch_size=tc.batch_size, shuffle=False)
    last = ckpt_dir / "last.ckpt"
    ckpt_path = str(last) if resume and last.exists() else None
    loader = _as_loader(train_data, tc.batch_size, tc.seed)
    with warnings.catch_warnings(), quiet_lightning():
        trainer = L.Trainer(
            accelerator="auto",
            devices=1,
            precision=resolve_precision(tc.precision),
            max_steps=total_steps,
            max_epochs=-1,
            gradient_clip_val=tc.grad_clip or None,
            accumulate_grad_batches=tc.accumulate_grad_batches,
            limit_val_batches=tc.val_batches if val_loader is not None else 0,
            val_check_interval=(tc.val_every_steps * tc.accumulate_grad_batches) if tc.val_every_steps else None,
            check_val_every_n_epoch=None if tc.val_every_steps else 1,
            num_sanity_val_steps=0,
            callbacks=callbacks,
            enable_checkpointing=bool(tc.checkpoint_every_steps),
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=str(out_dir),
        )
        # num_workers=0 is deliberate: batches are memmap slices, cheaper than worker processes on 2 cores.
        warnings.filterwarnings("ignore", message=".*does not have many workers.*")
        warnings.filterwarnings("ignore", message=".*but have no `val_dataloader`.*")  # no val_data given
        warnings.filterwarnings("ignore", message=".*exists and is not empty.*")  # resuming into out_dir
        warnings.filterwarnings("ignore", message=".*LeafSpec.*")  # Lightning vs torch 2.13 deprecation
        t0 = time.perf_counter()
        trainer.fit(module, train_dataloaders=loader, val_dataloaders=val_loader, ckpt_path=ckpt_path)
    elapsed = time.perf_counter() - t0
    if tc.checkpoint_every_steps:
        trainer.save_checkpoint(last)  # the end state too, so a finished run resumes as finished

    model = module.model.eval()
    save_model(model, out_dir, cfg)
    val_loss = evaluate_loss(model, val_data, tc.batch_size, tc.val_batches) if val_data is not None else None
    history = metrics.history
    steps_run = trainer.global_step - metrics.start_step
    return TrainResult(
        model=model,
        out_dir=out_dir,
        steps=trainer.global_step,
        tokens=trainer.global_step * tc.tokens_per_step,
        final_loss=next((row["loss"] for row in reversed(history) if "loss" in row), float("nan")),
        val_loss=val_loss,
        tokens_per_s=steps_run * tc.tokens_per_step / elapsed if elapsed > 0 else float("nan"),
        elapsed_s=elapsed,
        history=history,
    )


@torch.no_grad()
def evaluate_loss(model: CausalLM, dataset: Dataset, batch_size: int = 16, max_batches: Optional[int] = None) -> float:
    """Mean next-token cross-entropy (nats/token) over the first ``max_batches`` batches of ``dataset``, in order."""
    model.eval()
    total, count = 0.0, 0
    for i, (x, y) in enumerate(DataLoader(dataset, batch_size=batch_size, shuffle=False)):
        if max_batches is not None and i >= max_batches:
            break
        loss = model(x, y).lm_loss
        total += float(loss) * y.numel()
        count += y.numel()
    if count == 0:
        raise ValueError("validation dataset has no sequences")
    return total / count


def save_model(model: CausalLM, out_dir: str | Path, config: Optional[PretrainConfig] = None) -> Path:
    """Write ``model.pt`` (state dict) and ``config.json`` (model config, and the run's config if given)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), out_dir / MODEL_FILE)
    meta = {"model": dataclasses.asdict(model.config)}
    if config is not None:
        meta["pretrain"] = dataclasses.asdict(config)
    (out_dir / CONFIG_FILE).write_text(json.dumps(meta, indent=2))
    return out_dir / MODEL_FILE


def _read_state_dict(path: str | Path) -> dict:
    path = Path(path)
    if path.is_dir():
        path = path / MODEL_FILE
    return torch.load(path, map_location="cpu", weights_only=True)


def load_model(path: str | Path) -> CausalLM:
    """A :class:`CausalLM` from a folder written by :func:`train` / :func:`save_model` (eval mode, CPU)."""
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    meta = json.loads((folder / CONFIG_FILE).read_text())
    model = CausalLM(ModelConfig(**meta["model"]))
    model.load_state_dict(_read_state_dict(folder))
    return model.eval()
