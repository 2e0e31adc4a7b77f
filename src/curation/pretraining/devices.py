"""What differs between a CUDA and a CPU training run; the loop they share is :func:`curation.pretraining.train.train`.

Each class answers the same questions for the loop: how the processes start and are seeded, how the model, its
data-parallel wrapper and the optimizer are built, how one optimizer step runs, what a log line adds, how a
checkpoint is written and read back, and how the run ends. :class:`CudaRun` uses megatron-core's own pieces
(following Megatron-LM's ``examples/run_simple_mcore_train_loop.py``); :class:`CpuRun` replaces the four that are
CUDA-only in megatron-core 0.16.1 with plain torch, each named with the call that fails:

- ``model_parallel_cuda_manual_seed`` (``torch.cuda.manual_seed``) and the CUDA RNG tracker that every attention
  forward forks (``CudaRNGStatesTracker.fork``): :func:`~curation.pretraining.cpu.seed_on_cpu`, the same named
  streams on torch's CPU generator.
- ``DistributedDataParallel`` (``_ParamAndGradBuffer`` allocates on ``torch.cuda.current_device()``):
  ``torch.nn.parallel.DistributedDataParallel`` over gloo when there are 2+ processes.
- ``get_megatron_optimizer`` (``FP32Optimizer`` keeps its loss scale on ``'cuda'``): ``torch.optim.AdamW`` with
  Megatron's parameter groups (no weight decay on biases and norms) and ``clip_grad_norm_``.
- ``get_forward_backward_func`` (``forward_backward_no_pipelining`` counts tokens on ``'cuda'``): the same
  micro-batch loop written out; ``dist_checkpointing`` (``torch.cuda.synchronize`` when saving): ``torch.save``
  of model, optimizer and scheduler, so a resumed run continues exactly.

The other differences, kept as they were before the two loops became one (issue #45): the CPU run trains in fp32
and data parallel only; its logged loss is the mean over all ranks, the CUDA run's is rank 0's; the CUDA run waits
for the GPU before each timing and logs its device name and peak memory; a CUDA checkpoint restores Adam's
moments only when it was saved with ``--save-optimizer``.
"""

from __future__ import annotations

import argparse
import os
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import Iterator

from curation.pretraining.cpu import megatron_on_cpu, seed_on_cpu


# megatron-core 0.16.1's default distributed-optimizer layout (fully_sharded_model_space) is deprecated and its
# save fails ("ShardedTensor.flattened_range is not supported"); dp_reshardable saves each rank's buffers.
OPTIMIZER_SHARDING = {"distrib_optim_sharding_type": "dp_reshardable"}


class CpuRun:
    """megatron-core's model, dataset and LR scheduler on CPU with gloo (1 or more processes)."""

    checkpoint_format = "torch"
    saves_optimizer = True

    def __init__(self, args: argparse.Namespace):
        if args.tensor_parallel != 1 or args.expert_parallel != 1:
            raise SystemExit("on CPU, --tensor-parallel and --expert-parallel must be 1 (data parallel only)")
        args.fp32 = True  # bf16 matmuls on CPU are slow and Megatron's bf16 path needs its CUDA optimizer
        self.args = args

    def start(self, init_distributed) -> tuple[int, int]:
        from megatron.core import parallel_state

        rank, self.world_size = init_distributed("gloo")
        if not parallel_state.model_parallel_is_initialized():
            parallel_state.initialize_model_parallel(1, 1)
        seed_on_cpu(self.args.seed)
        return rank, self.world_size

    def context(self):
        return megatron_on_cpu()

    def build(self, plan, overrides: dict) -> None:
        import torch
        from megatron.core.transformer.moe.moe_utils import MoEAuxLossAutoScaler

        from curation.pretraining.megatron import build_model

        args = self.args
        self.model = build_model(args.model, device="cpu", **overrides)
        self.wrapped = self.model
        if self.world_size > 1:
            self.wrapped = torch.nn.parallel.DistributedDataParallel(self.model)
        named = list(self.model.named_parameters())
        decay = [p for n, p in named if p.ndim > 1 and not n.endswith("bias")]
        no_decay = [p for n, p in named if not (p.ndim > 1 and not n.endswith("bias"))]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "wd_mult": 1.0}, {"params": no_decay, "wd_mult": 0.0}],
            lr=args.lr, betas=(args.adam_beta1, args.adam_beta2), eps=1e-8, weight_decay=args.weight_decay)
        # Megatron's schedule scales the MoE auxiliary loss's gradient by 1 / micro-batches (as the LM loss).
        MoEAuxLossAutoScaler.set_loss_scale(torch.tensor(1.0 / plan.grad_accumulation))

    def resume(self, save_dir: Path, latest: dict, scheduler) -> str:
        import torch

        if latest.get("format") != "torch":
            raise SystemExit(f"{save_dir} holds a {latest.get('format')!r} checkpoint (CUDA run); "
                             "resume it on CUDA or start a new --save folder")
        state = torch.load(save_dir / latest["dir"] / "state.pt", map_location="cpu", weights_only=False)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        return "model, optimizer and scheduler state"

    def step(self, batches: Iterator[dict], plan) -> tuple[list, float]:
        """One optimizer step: the micro-batch loop of ``forward_backward_no_pipelining``, written out."""
        import torch

        self.optimizer.zero_grad(set_to_none=True)
        losses = []
        for micro in range(plan.grad_accumulation):
            batch = next(batches)
            sync = micro == plan.grad_accumulation - 1 or self.world_size == 1
            with (nullcontext() if sync else self.wrapped.no_sync()):
                per_token = self.wrapped(batch["tokens"], batch["position_ids"], batch.get("attention_mask"),
                                         labels=batch["labels"])
                mask = batch["loss_mask"].float()
                loss = (per_token.float() * mask).sum() / mask.sum()
                (loss / plan.grad_accumulation).backward()
            losses.append(loss.detach())
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.args.clip_grad))
        self.optimizer.step()
        return losses, grad_norm

    def logged_loss(self, losses: list) -> float:
        import torch
        import torch.distributed as dist

        lm_loss = torch.stack(losses).mean()
        if self.world_size > 1:
            dist.all_reduce(lm_loss)
            lm_loss /= self.world_size
        return float(lm_loss)

    def synchronize(self) -> None:
        pass

    def log_fields(self) -> dict:
        return {"device": "cpu", "world_size": self.world_size}

    def save(self, target: Path, iteration: int, scheduler, rank: int) -> None:
        import torch

        if rank != 0:
            return
        target.mkdir(exist_ok=True)
        tmp = target / ".state.pt.tmp"
        torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), "iteration": iteration}, tmp)
        os.replace(tmp, target / "state.pt")

    def finish(self) -> None:
        import torch.distributed as dist
        from megatron.core import parallel_state

        dist.barrier()
        parallel_state.destroy_model_parallel()  # so that one process can run train() again (tests, sweeps)
        dist.destroy_process_group()


class CudaRun:
    """megatron-core on CUDA + NCCL: its DDP, distributed optimizer, forward-backward schedule and checkpointing;
    one process per GPU under torchrun."""

    checkpoint_format = "dist"

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.saves_optimizer = args.save_optimizer

    def start(self, init_distributed) -> tuple[int, int]:
        import torch
        from megatron.core import parallel_state
        from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        rank, self.world_size = init_distributed("nccl")
        parallel_state.initialize_model_parallel(self.args.tensor_parallel, 1,
                                                 expert_model_parallel_size=self.args.expert_parallel)
        model_parallel_cuda_manual_seed(self.args.seed)
        return rank, self.world_size

    def context(self):
        return nullcontext()

    def build(self, plan, overrides: dict) -> None:
        import torch
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

        from curation.pretraining.megatron import build_model

        args = self.args
        dtype = torch.float32 if args.fp32 else torch.bfloat16
        model = build_model(args.model, device="cuda", use_cpu_initialization=False, bf16=not args.fp32,
                            params_dtype=dtype, **overrides)
        self.model = self.wrapped = DistributedDataParallel(
            config=model.config,
            ddp_config=DistributedDataParallelConfig(grad_reduce_in_fp32=True, overlap_grad_reduce=False,
                                                     use_distributed_optimizer=True),
            module=model,
        )
        self.optimizer = get_megatron_optimizer(
            OptimizerConfig(optimizer="adam", lr=args.lr, min_lr=args.min_lr, weight_decay=args.weight_decay,
                            adam_beta1=args.adam_beta1, adam_beta2=args.adam_beta2, clip_grad=args.clip_grad,
                            bf16=not args.fp32, params_dtype=dtype, use_distributed_optimizer=True),
            [self.model],
        )

    def resume(self, save_dir: Path, latest: dict, scheduler) -> str:
        from megatron.core import dist_checkpointing

        if latest.get("format", "dist") != "dist":
            raise SystemExit(f"{save_dir} holds a {latest.get('format')!r} checkpoint (CPU run); "
                             "start a new --save folder")
        folder, model = str(save_dir / latest["dir"]), self.model
        if latest.get("optimizer"):
            model_state = model.module.sharded_state_dict(prefix="")
            optimizer_state = self.optimizer.sharded_state_dict(model_state, is_loading=True,
                                                                metadata=OPTIMIZER_SHARDING)
            state = dist_checkpointing.load({"model": model_state, "optimizer": optimizer_state}, folder)
            model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            restored = "model weights and optimizer state"
        else:  # a checkpoint of weights only
            model.module.load_state_dict(dist_checkpointing.load(model.module.sharded_state_dict(prefix=""), folder))
            restored = "model weights only; optimizer moments restart"
        scheduler.step(latest["iteration"] * self.args.global_batch_size)
        return restored

    def step(self, batches: Iterator[dict], plan) -> tuple[list, float]:
        """One optimizer step through megatron-core's forward-backward schedule and distributed optimizer."""
        import torch
        from megatron.core.distributed.finalize_model_grads import finalize_model_grads
        from megatron.core.pipeline_parallel.schedules import get_forward_backward_func

        def loss_func(loss_mask, output_tensor):
            losses = output_tensor.float().view(-1)
            mask = loss_mask.view(-1).float()
            loss = torch.sum(losses * mask) / mask.sum()
            # A copy: the schedule divides the returned loss in place by the number of micro-batches.
            return loss, {"lm loss": loss.detach().clone()}

        def forward_step(data_iterator, module):
            batch = {k: v.cuda(non_blocking=True) for k, v in next(data_iterator).items()}
            output = module(batch["tokens"], batch["position_ids"], batch.get("attention_mask"),
                            labels=batch["labels"])
            return output, partial(loss_func, batch["loss_mask"])

        self.model.zero_grad_buffer()
        self.optimizer.zero_grad()
        out = get_forward_backward_func()(
            forward_step_func=forward_step, data_iterator=batches, model=[self.model],
            num_microbatches=plan.grad_accumulation, seq_length=plan.seq_length,
            micro_batch_size=plan.micro_batch_size, decoder_seq_length=plan.seq_length, forward_only=False)
        finalize_model_grads([self.model])
        _, grad_norm, _ = self.optimizer.step()
        return [x["lm loss"] for x in out], grad_norm

    def logged_loss(self, losses: list) -> float:
        import torch

        return torch.stack(losses).mean().item() if losses else float("nan")

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()

    def log_fields(self) -> dict:
        import torch

        return {"device": torch.cuda.get_device_name(), "world_size": self.world_size,
                "max_memory_gib": torch.cuda.max_memory_allocated() / 2**30}

    def save(self, target: Path, iteration: int, scheduler, rank: int) -> None:
        from megatron.core import dist_checkpointing

        target.mkdir(exist_ok=True)
        model_state = self.model.module.sharded_state_dict(prefix="")
        if self.saves_optimizer:
            model_state = {"model": model_state,
                           "optimizer": self.optimizer.sharded_state_dict(model_state, metadata=OPTIMIZER_SHARDING)}
        dist_checkpointing.save(model_state, str(target))

    def finish(self) -> None:
        import torch.distributed as dist

        dist.destroy_process_group()
