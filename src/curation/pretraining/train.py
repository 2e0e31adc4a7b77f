"""Pre-training with megatron-core (``curate-megatron train``): the plan of a run and its training loop.

``train`` builds :func:`curation.pretraining.megatron.build_model` (``qwen2_5_1_5b``,
``moe_7b``, or the CPU-sized ``tiny_dense`` / ``tiny_moe``) and trains it with
megatron-core's own pieces -- GPTDataset over the indexed dataset,
DistributedDataParallel, the Megatron optimizer (Adam, DATAMASK Sec. 4.1:
constant LR 4e-4, weight decay 0.1, clip 1.0, global batch 1,536 sequences of
8,192 tokens, 400B / 300B tokens) and the forward-backward schedule --
following ``examples/run_simple_mcore_train_loop.py`` of Megatron-LM, on CUDA
with NCCL. ``--device cpu`` runs the same model, data and LR schedule on CPU
with gloo (1 or more processes). One loop serves both; what differs (the
CUDA-only pieces of megatron-core 0.16.1 that the CPU run replaces, and the
rest) is named in :mod:`curation.pretraining.devices`. Both write ``train_log.jsonl``
and checkpoints that resume (CPU: model, optimizer and scheduler; CUDA: model
weights, optimizer moments restart).
"""

from __future__ import annotations

from curation.telemetry import disable as _disable_telemetry

_disable_telemetry()  # before Kedro, MLflow or the Hub load: nothing phones home (curation.telemetry)

import argparse
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from curation.pretraining.convert import load_hf_tokenizer, megatron_tokenizer
from curation.pretraining.cpu import pick_device
from curation.pretraining.devices import OPTIMIZER_SHARDING, CpuRun, CudaRun  # noqa: F401
from curation.pretraining.megatron import MODELS, TRAINING


# --- the plan --------------------------------------------------------------------------------------


@dataclass
class TrainPlan:
    model: str
    world_size: int  # processes = GPUs
    tensor_parallel: int
    expert_parallel: int
    data_parallel: int  # world_size / tensor_parallel
    micro_batch_size: int  # sequences per GPU per forward pass
    global_batch_size: int  # sequences per optimizer step (Sec. 4.1: 1,536)
    grad_accumulation: int  # micro-batches per GPU per step
    seq_length: int  # tokens per sequence (Sec. 4.1: 8,192)
    token_budget: float  # Sec. 4.1: 400B dense, 300B MoE
    tokens_per_iteration: int
    train_iters: int
    lr: float
    lr_schedule: str
    warmup_iters: int
    weight_decay: float
    clip_grad: float
    adam_beta1: float
    adam_beta2: float
    bf16: bool
    seed: int
    total_parameters: int
    active_non_embedding_parameters: int
    vocab_size: int  # the model's embedding rows
    tokenizer_vocab_size: Optional[int]
    dataset_tokens: Optional[int]  # tokens in the indexed dataset
    epochs: Optional[float]  # token_budget / dataset_tokens

    def lines(self) -> list[str]:
        out = [f"{k}: {v}" for k, v in asdict(self).items()]
        if self.epochs is not None and self.epochs > 1:
            out.append(f"note: the budget repeats the dataset {self.epochs:.1f} times")
        return out


def build_plan(args: argparse.Namespace, world_size: int, count: bool = True) -> TrainPlan:
    """Batch arithmetic and sizes of a run; ``count`` builds the model on ``meta`` for its parameter counts."""
    from curation.pretraining.megatron import count_parameters

    if args.model not in MODELS:
        raise SystemExit(f"--model {args.model!r} unknown; known: {sorted(MODELS)}")
    spec = MODELS[args.model]
    tp, ep = args.tensor_parallel, args.expert_parallel
    if world_size % tp:
        raise SystemExit(f"world size {world_size} is not a multiple of --tensor-parallel {tp}")
    dp = world_size // tp
    if ep > 1 and (not spec.num_moe_experts or spec.num_moe_experts % ep or dp % ep):
        raise SystemExit(f"--expert-parallel {ep} must divide the expert count and the data-parallel size {dp}")
    per_step = args.micro_batch_size * dp
    if args.global_batch_size % per_step:
        raise SystemExit(f"--global-batch-size {args.global_batch_size} is not a multiple of micro batch x "
                         f"data parallel = {args.micro_batch_size} x {dp}")
    tokens_per_iter = args.global_batch_size * args.seq_length
    if args.tokens is not None:
        budget = args.tokens
    elif args.train_iters is not None:
        budget = float(args.train_iters * tokens_per_iter)
    elif args.model in TRAINING.token_budget:
        budget = TRAINING.token_budget[args.model]
    else:
        raise SystemExit(f"--model {args.model} has no paper budget: give --tokens or --train-iters")
    iters = args.train_iters if args.train_iters is not None else math.ceil(budget / tokens_per_iter)
    if args.seq_length > spec.max_sequence_length:
        raise SystemExit(f"--seq-length {args.seq_length} exceeds {args.model}'s {spec.max_sequence_length} positions")
    total, active = count_parameters(args.model, **_model_overrides(args)) if count else (0, 0)
    tok_vocab = dataset_tokens = None
    if args.tokenizer:
        tok_vocab = load_hf_tokenizer(args.tokenizer).get_vocab_size()
        if tok_vocab > spec.vocab_size:
            raise SystemExit(f"tokenizer has {tok_vocab} ids, {args.model} embeds {spec.vocab_size}")
    if args.data_prefix:
        from megatron.core.datasets.indexed_dataset import IndexedDataset

        if not IndexedDataset.exists(args.data_prefix):
            raise SystemExit(f"no indexed dataset at {args.data_prefix}(.bin/.idx): run `curate-megatron convert`")
        indexed = IndexedDataset(args.data_prefix)  # keep it alive: sequence_lengths is a view of its mmap
        dataset_tokens = int(np.asarray(indexed.sequence_lengths, dtype=np.int64).sum())
        del indexed
    return TrainPlan(
        model=args.model, world_size=world_size, tensor_parallel=tp, expert_parallel=ep, data_parallel=dp,
        micro_batch_size=args.micro_batch_size, global_batch_size=args.global_batch_size,
        grad_accumulation=args.global_batch_size // per_step, seq_length=args.seq_length, token_budget=budget,
        tokens_per_iteration=tokens_per_iter, train_iters=iters, lr=args.lr, lr_schedule=args.lr_schedule,
        warmup_iters=args.warmup_iters, weight_decay=args.weight_decay, clip_grad=args.clip_grad,
        adam_beta1=args.adam_beta1, adam_beta2=args.adam_beta2, bf16=not args.fp32, seed=args.seed,
        total_parameters=total, active_non_embedding_parameters=active, vocab_size=spec.vocab_size,
        tokenizer_vocab_size=tok_vocab, dataset_tokens=dataset_tokens,
        epochs=(iters * tokens_per_iter / dataset_tokens) if dataset_tokens else None,
    )


# --- data ------------------------------------------------------------------------------------------


def build_train_dataset(data_prefix: str, tokenizer_path: str, seq_length: int, num_samples: int, seed: int,
                        cache_dir: Optional[str] = None):
    """megatron-core's GPTDataset over the indexed dataset: ``num_samples`` windows of ``seq_length`` tokens
    (+1 for the shifted labels), documents shuffled and concatenated, repeated as many epochs as needed."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    config = GPTDatasetConfig(
        random_seed=seed,
        sequence_length=seq_length,
        blend=([data_prefix], None),
        split="100,0,0",
        tokenizer=megatron_tokenizer(tokenizer_path),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        path_to_cache=cache_dir or str(Path(data_prefix).parent / "cache"),
    )
    train, _, _ = BlendedMegatronDatasetBuilder(GPTDataset, [num_samples, None, None], lambda: True, config).build()
    return train


def _micro_batches(dataset, plan: TrainPlan, dp_rank: int, start_iter: int) -> Iterator[dict]:
    """This data-parallel rank's micro-batches, iteration after iteration (global sample order is fixed)."""
    import torch

    per_rank = plan.micro_batch_size * plan.grad_accumulation
    for it in range(start_iter, plan.train_iters):
        first = it * plan.global_batch_size + dp_rank * per_rank
        for m in range(plan.grad_accumulation):
            rows = [dataset[first + m * plan.micro_batch_size + j] for j in range(plan.micro_batch_size)]
            yield {k: torch.stack([r[k] for r in rows]) for k in rows[0]}


# --- training ------------------------------------------------------------------------------------


def _init_distributed(backend: str) -> tuple[int, int]:
    import torch.distributed as dist

    rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000 if world_size == 1 else 29500))
    if not dist.is_initialized():
        dist.init_process_group(backend, rank=rank, world_size=world_size)
    return rank, world_size


def _lr_scheduler(optimizer, args: argparse.Namespace, plan: TrainPlan):
    """megatron-core's ``OptimizerParamScheduler``; it counts samples, as Megatron-LM's loop does."""
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    gbs = plan.global_batch_size
    decay_iters = round(args.wsd_decay_fraction * plan.train_iters)
    return OptimizerParamScheduler(
        optimizer, init_lr=0.0 if args.warmup_iters else args.lr, max_lr=args.lr, min_lr=args.min_lr,
        lr_warmup_steps=args.warmup_iters * gbs, lr_decay_steps=plan.train_iters * gbs,
        lr_decay_style="WSD" if args.lr_schedule == "wsd" else "constant", start_wd=args.weight_decay,
        end_wd=args.weight_decay, wd_incr_steps=plan.train_iters * gbs, wd_incr_style="constant",
        wsd_decay_steps=decay_iters * gbs if args.lr_schedule == "wsd" else None,
        lr_wsd_decay_style="exponential" if args.lr_schedule == "wsd" else None,
    )


def _model_overrides(args: argparse.Namespace) -> dict:
    return {"num_layers": args.num_layers} if getattr(args, "num_layers", None) else {}


def _latest(save_dir: Optional[Path]) -> Optional[dict]:
    if save_dir is None or not (save_dir / LATEST_FILE).exists():
        return None
    return json.loads((save_dir / LATEST_FILE).read_text())


def _write_latest(save_dir: Path, iteration: int, name: str, fmt: str, args: argparse.Namespace,
                  optimizer: bool = True) -> None:
    """``latest.json`` last, so a killed save leaves the previous checkpoint as the latest."""
    meta = {"iteration": iteration, "dir": name, "format": fmt, "optimizer": optimizer, "model": args.model,
            "num_layers": getattr(args, "num_layers", None), "tokenizer": str(Path(args.tokenizer).resolve())}
    tmp = save_dir / f".{LATEST_FILE}.tmp"
    tmp.write_text(json.dumps(meta))
    os.replace(tmp, save_dir / LATEST_FILE)


def _log(path: Optional[Path], record: dict) -> None:
    print(json.dumps(record), flush=True)
    if path is not None:
        with path.open("a") as handle:
            handle.write(json.dumps(record) + "\n")


LATEST_FILE = "latest.json"
LOG_FILE = "train_log.jsonl"


def _start_run(args: argparse.Namespace, rank: int, world_size: int):
    """(plan, rank-0 print, save folder or None, rank-0 log path or None); prints the plan, makes the folder."""
    plan = build_plan(args, world_size, count=False)
    say = print if rank == 0 else (lambda *a, **k: None)
    say("\n".join(plan.lines()), flush=True)
    save_dir = Path(args.save) if args.save else None
    log_path = save_dir / LOG_FILE if save_dir is not None and rank == 0 else None
    if save_dir is not None:
        save_dir.mkdir(parents=True, exist_ok=True)
    return plan, say, save_dir, log_path


def train(args: argparse.Namespace) -> None:
    """Pre-train with megatron-core: one loop on CUDA + NCCL (:class:`~curation.pretraining.devices.CudaRun`) or
    on CPU + gloo (:class:`~curation.pretraining.devices.CpuRun`); what differs between the two is named there."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    run = (CudaRun if pick_device(args.device) == "cuda" else CpuRun)(args)
    rank, world_size = run.start(_init_distributed)
    plan, say, save_dir, log_path = _start_run(args, rank, world_size)
    with run.context():
        run.build(plan, _model_overrides(args))
        scheduler = _lr_scheduler(run.optimizer, args, plan)
        start_iter = 0
        latest = _latest(save_dir)
        if latest is not None:
            restored = run.resume(save_dir, latest, scheduler)
            start_iter = latest["iteration"]
            say(f"resumed from iteration {start_iter} ({restored})", flush=True)
            if rank == 0:
                _log(log_path, {"resumed_from": start_iter})
        # Megatron's builder builds the sample index on rank 0 first, then the other ranks read its cache.
        dataset = build_train_dataset(args.data_prefix, args.tokenizer, args.seq_length,
                                      plan.train_iters * plan.global_batch_size, args.seed)
        batches = _micro_batches(dataset, plan, parallel_state.get_data_parallel_rank(), start_iter)
        run.synchronize()
        t_last = time.perf_counter()
        run.wrapped.train()
        for iteration in range(start_iter, plan.train_iters):
            losses, grad_norm = run.step(batches, plan)
            scheduler.step(plan.global_batch_size)
            if (iteration + 1) % args.log_interval == 0 or iteration == start_iter:
                lm_loss = run.logged_loss(losses)
                run.synchronize()
                now = time.perf_counter()
                done = (iteration + 1 - start_iter) if iteration == start_iter else args.log_interval
                tokens_per_s = done * plan.tokens_per_iteration / (now - t_last)
                t_last = now
                if rank == 0:
                    _log(log_path, {"iteration": iteration + 1, "lm_loss": lm_loss, "grad_norm": grad_norm,
                                    "lr": run.optimizer.param_groups[0]["lr"], "tokens_per_s": tokens_per_s,
                                    **run.log_fields()})
            if save_dir is not None and ((iteration + 1) % args.save_interval == 0
                                         or iteration + 1 == plan.train_iters):
                name = f"iter_{iteration + 1:07d}"
                run.save(save_dir / name, iteration + 1, scheduler, rank)
                if rank == 0:
                    _write_latest(save_dir, iteration + 1, name, run.checkpoint_format, args,
                                  optimizer=run.saves_optimizer)
                dist.barrier()
    run.finish()
