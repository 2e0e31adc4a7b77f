"""Megatron-core launcher: a selection -> Megatron's indexed dataset -> pre-training at the paper's scale.

    # 1. convert a selection (the sharded selected_documents folder, a parquet file of documents,
    #    or a packed token folder of the pretrain pipeline)
    curate-megatron convert --input data/07_model_output/default/selected_documents \
        --tokenizer qwen2.5/tokenizer.json --output-prefix data/megatron/fineweb_mask
    # 2. look at the plan without a GPU: builds the model on the meta device, prints counts and steps
    curate-megatron train --model qwen2_5_1_5b --data-prefix data/megatron/fineweb_mask \
        --tokenizer qwen2.5/tokenizer.json --dry-run
    # 3. train on a GPU cluster (torchrun sets RANK / WORLD_SIZE / LOCAL_RANK; one process per GPU)
    torchrun --nproc_per_node 8 --nnodes 16 ... $(which curate-megatron) train --model moe_7b \
        --data-prefix data/megatron/fineweb_mask --tokenizer qwen2.5/tokenizer.json --save ckpt/moe_7b

``convert`` writes ``<prefix>.bin`` / ``<prefix>.idx`` with
``megatron.core.datasets.indexed_dataset.IndexedDatasetBuilder``: one sequence
per document, each ending with the tokenizer's ``<|endoftext|>`` (Megatron's
``--append-eod``), uint16 ids when the vocabulary has fewer than 65,500 entries
(int32 otherwise), as Megatron-LM's ``tools/preprocess_data.py`` does. Both
files are written under temporary names and renamed, so a killed conversion
leaves no prefix that a trainer would read.

``train`` builds :func:`curation.pretraining.megatron.build_model` (``qwen2_5_1_5b``
or ``moe_7b``) and trains it with megatron-core's own pieces -- GPTDataset over
the indexed dataset, DistributedDataParallel, the Megatron optimizer (Adam,
DATAMASK Sec. 4.1: constant LR 4e-4, weight decay 0.1, clip 1.0, global batch
1,536 sequences of 8,192 tokens, 400B / 300B tokens) and the forward-backward
schedule -- following ``examples/run_simple_mcore_train_loop.py`` of
Megatron-LM. It needs CUDA GPUs and NCCL: without them it stops with a message
(use ``--dry-run``). This loop has not been run on GPUs in this repository (the
development machine has none); the data path (conversion, GPTDataset samples)
and the plan are tested on CPU.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import uuid
from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from curation.pretraining.megatron import MODELS, TRAINING

# --- tokenizer -------------------------------------------------------------------------------------


def load_hf_tokenizer(path: str | Path):
    """A ``tokenizers`` tokenizer.json (ours, or e.g. Qwen2.5's) that defines ``<|endoftext|>``."""
    from curation.lm import load_tokenizer

    return load_tokenizer(path)


def megatron_tokenizer(path: str | Path):
    """The tokenizer as megatron-core's datasets want it (``vocab_size``, ``eod``, ``unique_identifiers``)."""
    from megatron.core.tokenizers import MegatronTokenizerBase

    from curation.lm import eos_id

    class TokenizerJson(MegatronTokenizerBase):
        """A HF ``tokenizers`` tokenizer.json behind megatron-core's tokenizer interface."""

        def __init__(self, tokenizer_path: str) -> None:
            super().__init__(tokenizer_path, {"library": "tokenizers"})
            self._tokenizer = load_hf_tokenizer(tokenizer_path)

        def tokenize(self, text: str) -> list[int]:
            return self._tokenizer.encode(text, add_special_tokens=False).ids

        def detokenize(self, ids: list[int]) -> str:
            return self._tokenizer.decode(ids, skip_special_tokens=False)

        @property
        def vocab(self) -> dict[str, int]:
            return self._tokenizer.get_vocab()

        @property
        def vocab_size(self) -> int:
            return self._tokenizer.get_vocab_size()

        @property
        def eod(self) -> int:
            return eos_id(self._tokenizer)

        def apply_chat_template(self, *args, **kwargs):
            raise NotImplementedError("pre-training needs no chat template")

        @property
        def unique_identifiers(self) -> OrderedDict:
            return OrderedDict({"class": "curation.TokenizerJson", "tokenizer_path": str(self.path)})

    return TokenizerJson(str(path))


# --- conversion ------------------------------------------------------------------------------------


@dataclass
class ConversionStats:
    prefix: str  # <prefix>.bin / <prefix>.idx
    documents: int  # sequences written (one per document)
    tokens: int  # tokens written, EOS included
    dtype: str  # token dtype in the .bin file
    eod_id: int
    vocab_size: int
    seconds: float


def _documents_from_parquet(path: Path, text_column: str, tokenizer, batch_size: int = 512) -> Iterator[np.ndarray]:
    import pyarrow.parquet as pq

    from curation.lm import eos_id

    eod = eos_id(tokenizer)
    handle = pq.ParquetFile(path)
    if text_column not in handle.schema_arrow.names:
        raise KeyError(f"{path} has no column {text_column!r}; columns: {handle.schema_arrow.names}")
    for batch in handle.iter_batches(batch_size=batch_size, columns=[text_column]):
        texts = [t for t in batch.column(0).to_pylist() if t]
        for encoding in tokenizer.encode_batch(texts, add_special_tokens=False):
            yield np.asarray([*encoding.ids, eod], dtype=np.int64)


def _documents_from_packed(folder: Path) -> Iterator[np.ndarray]:
    """Split our packed stream (``doc EOS doc EOS ...``) back into documents, each with its EOS."""
    from curation.lm.packing import PackedDataset

    packed = PackedDataset(folder)
    tokens = packed.tokens
    ends = np.flatnonzero(tokens == packed.index.eos_id)
    start = 0
    for end in ends:
        yield np.asarray(tokens[start:end + 1], dtype=np.int64)
        start = end + 1


def convert(input_path: str | Path, output_prefix: str | Path, tokenizer_path: Optional[str | Path] = None,
            text_column: str = "text") -> ConversionStats:
    """Write ``input_path`` as Megatron's indexed dataset ``<output_prefix>.bin/.idx``.

    input_path: a sharded documents folder (``manifest.json`` + ``shards/*.parquet``, e.g. the
        pipeline's ``selected_documents``; read shard by shard in manifest order) or a parquet file
        of documents (both need ``tokenizer_path``), or a packed token folder (``tokens.bin`` +
        ``index.json`` of :func:`curation.lm.pack_documents`, already tokenized).
    """
    from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder

    t0 = time.perf_counter()
    source = Path(input_path)
    sharded = source.is_dir() and (source / "manifest.json").is_file()
    if source.is_dir() and not sharded:
        from curation.lm.packing import PackedDataset

        index = PackedDataset(source).index
        vocab_size, eod = index.vocab_size, index.eos_id
        documents = _documents_from_packed(source)
    else:
        if tokenizer_path is None:
            raise ValueError("a parquet or sharded documents input needs --tokenizer")
        from curation.lm import eos_id

        tokenizer = load_hf_tokenizer(tokenizer_path)
        vocab_size, eod = tokenizer.get_vocab_size(), eos_id(tokenizer)
        if sharded:
            from curation.shards import ShardedDataset

            shards = ShardedDataset(source)
            documents = (doc for name in shards.names
                         for doc in _documents_from_parquet(shards.shard_path(name), text_column, tokenizer))
        else:
            documents = _documents_from_parquet(source, text_column, tokenizer)
    dtype = DType.optimal_dtype(vocab_size)
    prefix = Path(output_prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    tmp = prefix.with_name(f".{prefix.name}.tmp-{uuid.uuid4().hex[:8]}")
    builder = IndexedDatasetBuilder(f"{tmp}.bin", dtype=dtype)
    n_docs = n_tokens = 0
    try:
        for doc in documents:
            builder.add_document(doc, [len(doc)])  # a numpy array: the builder casts it to `dtype`
            n_docs += 1
            n_tokens += len(doc)
        builder.finalize(f"{tmp}.idx")
        if n_docs == 0:
            raise ValueError(f"{source} has no documents")
        os.replace(f"{tmp}.bin", f"{prefix}.bin")
        os.replace(f"{tmp}.idx", f"{prefix}.idx")  # last: a prefix with an .idx is complete
    finally:
        for ext in (".bin", ".idx"):
            Path(f"{tmp}{ext}").unlink(missing_ok=True)
    return ConversionStats(str(prefix), n_docs, n_tokens, np.dtype(dtype).name, eod, vocab_size,
                           time.perf_counter() - t0)


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
    budget = args.tokens if args.tokens is not None else TRAINING.token_budget[args.model]
    tokens_per_iter = args.global_batch_size * args.seq_length
    iters = args.train_iters if args.train_iters is not None else math.ceil(budget / tokens_per_iter)
    total, active = count_parameters(args.model) if count else (0, 0)
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


# --- training (GPUs) -------------------------------------------------------------------------------


def train(args: argparse.Namespace) -> None:
    """The training loop on CUDA + NCCL (see the module docstring); one process per GPU under torchrun."""
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("curate-megatron train needs CUDA GPUs (megatron-core's kernels, NCCL and CUDA RNG "
                         "tracker are CUDA-only); this machine has none. Use --dry-run to check the plan.")
    from functools import partial

    import torch.distributed as dist
    from megatron.core import dist_checkpointing, parallel_state
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.distributed.finalize_model_grads import finalize_model_grads
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    from megatron.core.pipeline_parallel.schedules import get_forward_backward_func
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    from curation.pretraining.megatron import build_model

    rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    parallel_state.initialize_model_parallel(args.tensor_parallel, 1,
                                             expert_model_parallel_size=args.expert_parallel)
    model_parallel_cuda_manual_seed(args.seed)
    plan = build_plan(args, world_size, count=False)
    say = print if rank == 0 else (lambda *a, **k: None)
    say("\n".join(plan.lines()), flush=True)

    dtype = torch.float32 if args.fp32 else torch.bfloat16
    model = build_model(args.model, device="cuda", use_cpu_initialization=False, bf16=not args.fp32,
                        params_dtype=dtype)
    model = DistributedDataParallel(
        config=model.config,
        ddp_config=DistributedDataParallelConfig(grad_reduce_in_fp32=True, overlap_grad_reduce=False,
                                                 use_distributed_optimizer=True),
        module=model,
    )
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=args.lr, min_lr=args.min_lr, weight_decay=args.weight_decay,
                        adam_beta1=args.adam_beta1, adam_beta2=args.adam_beta2, clip_grad=args.clip_grad,
                        bf16=not args.fp32, params_dtype=dtype, use_distributed_optimizer=True),
        [model],
    )
    # The scheduler counts samples, as Megatron-LM's training loop does (iterations x global batch).
    gbs = plan.global_batch_size
    decay_iters = round(args.wsd_decay_fraction * plan.train_iters)
    scheduler = OptimizerParamScheduler(
        optimizer, init_lr=0.0 if args.warmup_iters else args.lr, max_lr=args.lr, min_lr=args.min_lr,
        lr_warmup_steps=args.warmup_iters * gbs, lr_decay_steps=plan.train_iters * gbs,
        lr_decay_style="WSD" if args.lr_schedule == "wsd" else "constant", start_wd=args.weight_decay,
        end_wd=args.weight_decay, wd_incr_steps=plan.train_iters * gbs, wd_incr_style="constant",
        wsd_decay_steps=decay_iters * gbs if args.lr_schedule == "wsd" else None,
        lr_wsd_decay_style="exponential" if args.lr_schedule == "wsd" else None,
    )

    start_iter = 0
    save_dir = Path(args.save) if args.save else None
    if save_dir is not None and (save_dir / "latest.json").exists():  # resume
        latest = json.loads((save_dir / "latest.json").read_text())
        state = dist_checkpointing.load(model.module.sharded_state_dict(prefix=""), str(save_dir / latest["dir"]))
        model.module.load_state_dict(state)
        start_iter = latest["iteration"]
        scheduler.step(start_iter * gbs)
        say(f"resumed from iteration {start_iter} (model weights; optimizer moments restart)")

    if rank == 0:  # build the sample index once, then every rank reads it from the cache
        build_train_dataset(args.data_prefix, args.tokenizer, args.seq_length,
                            plan.train_iters * plan.global_batch_size, args.seed)
    dist.barrier()
    dataset = build_train_dataset(args.data_prefix, args.tokenizer, args.seq_length,
                                  plan.train_iters * plan.global_batch_size, args.seed)
    batches = _micro_batches(dataset, plan, parallel_state.get_data_parallel_rank(), start_iter)

    def loss_func(loss_mask, output_tensor):
        losses = output_tensor.float().view(-1)
        mask = loss_mask.view(-1).float()
        loss = torch.sum(losses * mask) / mask.sum()
        return loss, {"lm loss": loss.detach()}

    def forward_step(data_iterator, module):
        batch = {k: v.cuda(non_blocking=True) for k, v in next(data_iterator).items()}
        output = module(batch["tokens"], batch["position_ids"], batch.get("attention_mask"), labels=batch["labels"])
        return output, partial(loss_func, batch["loss_mask"])

    forward_backward = get_forward_backward_func()
    t_last = time.perf_counter()
    for iteration in range(start_iter, plan.train_iters):
        model.zero_grad_buffer()
        optimizer.zero_grad()
        losses = forward_backward(forward_step_func=forward_step, data_iterator=batches, model=[model],
                                  num_microbatches=plan.grad_accumulation, seq_length=args.seq_length,
                                  micro_batch_size=args.micro_batch_size, decoder_seq_length=args.seq_length,
                                  forward_only=False)
        finalize_model_grads([model])
        _, grad_norm, _ = optimizer.step()
        scheduler.step(gbs)
        if (iteration + 1) % args.log_interval == 0:
            loss = torch.stack([x["lm loss"] for x in losses]).mean().item() if losses else float("nan")
            now = time.perf_counter()
            tokens_per_s = args.log_interval * plan.tokens_per_iteration / (now - t_last)
            t_last = now
            say(json.dumps({"iteration": iteration + 1, "lm_loss": loss, "grad_norm": grad_norm,
                            "lr": optimizer.param_groups[0]["lr"], "tokens_per_s": tokens_per_s}), flush=True)
        if save_dir is not None and ((iteration + 1) % args.save_interval == 0 or iteration + 1 == plan.train_iters):
            name = f"iter_{iteration + 1:07d}"
            dist_checkpointing.save(model.module.sharded_state_dict(prefix=""), str(save_dir / name))
            if rank == 0:
                (save_dir / "latest.json").write_text(json.dumps({"iteration": iteration + 1, "dir": name}))
            dist.barrier()
    dist.destroy_process_group()


# --- command line ----------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="curate-megatron", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("convert", help="a selection -> Megatron indexed dataset (<prefix>.bin/.idx)")
    c.add_argument("--input", required=True, help="parquet of documents, or a packed token folder")
    c.add_argument("--output-prefix", required=True, help="writes <prefix>.bin and <prefix>.idx")
    c.add_argument("--tokenizer", help="tokenizer.json with <|endoftext|> (needed for parquet input)")
    c.add_argument("--text-column", default="text")

    t = sub.add_parser("train", help="pre-train a paper-scale model with megatron-core (torchrun-compatible)")
    t.add_argument("--model", required=True, choices=sorted(MODELS))
    t.add_argument("--data-prefix", help="indexed dataset prefix written by `convert`")
    t.add_argument("--tokenizer", help="the tokenizer.json the data was converted with")
    t.add_argument("--tokens", type=float, default=None, help="token budget (default: Sec. 4.1, 400B / 300B)")
    t.add_argument("--train-iters", type=int, default=None, help="optimizer steps (overrides --tokens)")
    t.add_argument("--global-batch-size", type=int, default=TRAINING.global_batch_size, help="sequences per step")
    t.add_argument("--micro-batch-size", type=int, default=1, help="sequences per GPU per forward pass")
    t.add_argument("--seq-length", type=int, default=TRAINING.seq_length)
    t.add_argument("--tensor-parallel", type=int, default=1)
    t.add_argument("--expert-parallel", type=int, default=1, help="MoE expert parallelism (moe_7b)")
    t.add_argument("--lr", type=float, default=TRAINING.lr)
    t.add_argument("--min-lr", type=float, default=TRAINING.lr, help="end of a WSD decay (constant: = lr)")
    t.add_argument("--lr-schedule", choices=["constant", "wsd"], default="constant",
                   help="constant (DATAMASK Sec. 4.1) | wsd (Ultra-FineWeb's base model, exponential decay)")
    t.add_argument("--wsd-decay-fraction", type=float, default=0.1)
    t.add_argument("--warmup-iters", type=int, default=0)
    t.add_argument("--weight-decay", type=float, default=TRAINING.weight_decay)
    t.add_argument("--clip-grad", type=float, default=TRAINING.clip_grad)
    t.add_argument("--adam-beta1", type=float, default=0.9)
    t.add_argument("--adam-beta2", type=float, default=0.95, help="Sec. 4.1 names Adam only; 0.95 is usual")
    t.add_argument("--fp32", action="store_true", help="train in fp32 instead of bf16")
    t.add_argument("--seed", type=int, default=1234)
    t.add_argument("--save", help="checkpoint folder (megatron dist_checkpointing); resumes from it")
    t.add_argument("--save-interval", type=int, default=1000)
    t.add_argument("--log-interval", type=int, default=10)
    t.add_argument("--world-size", type=int, default=None,
                   help="--dry-run only: plan for this many GPUs (default: $WORLD_SIZE or 1)")
    t.add_argument("--dry-run", action="store_true",
                   help="build the model on the meta device and print the plan as JSON; no GPU needed")
    return p


def main(argv: Optional[list[str]] = None) -> int:
    import warnings

    args = parser().parse_args(argv)
    warnings.filterwarnings("ignore", message=".*Transformer Engine.*")
    warnings.filterwarnings("ignore", message=".*Apex.*")
    if args.command == "convert":
        stats = convert(args.input, args.output_prefix, args.tokenizer, args.text_column)
        print(json.dumps(asdict(stats)))
        return 0
    if args.dry_run:
        world = args.world_size or int(os.environ.get("WORLD_SIZE", 1))
        plan = build_plan(args, world)
        print("\n".join(plan.lines()), file=sys.stderr)
        print(json.dumps(asdict(plan)))
        return 0
    if not args.data_prefix or not args.tokenizer:
        raise SystemExit("train needs --data-prefix and --tokenizer")
    train(args)
    return 0


if __name__ == "__main__":  # python -m curation.pretraining.launch / torchrun -m curation.pretraining.launch
    sys.exit(main())
