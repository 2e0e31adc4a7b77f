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
leaves no prefix that a trainer would read. A blank text (null, empty or white
space only) is skipped and counted (``blank_skipped`` in the printed stats, and a
line on stderr); an existing ``<prefix>.bin``/``.idx`` is refused unless
``--force``; a prefix ending in ``/`` (or naming a folder) means inside that
folder, ``<folder>/<the input's name>``.

``train`` builds :func:`curation.pretraining.megatron.build_model` (``qwen2_5_1_5b``,
``moe_7b``, or the CPU-sized ``tiny_dense`` / ``tiny_moe``) and trains it with
megatron-core's own pieces -- GPTDataset over the indexed dataset,
DistributedDataParallel, the Megatron optimizer (Adam, DATAMASK Sec. 4.1:
constant LR 4e-4, weight decay 0.1, clip 1.0, global batch 1,536 sequences of
8,192 tokens, 400B / 300B tokens) and the forward-backward schedule --
following ``examples/run_simple_mcore_train_loop.py`` of Megatron-LM, on CUDA
with NCCL. ``--device cpu`` runs the same model, data and LR schedule on CPU
with gloo (1 or more processes); the CUDA-only pieces of megatron-core 0.16.1
that it replaces are listed in :func:`_train_cpu`. Both write ``train_log.jsonl``
and checkpoints that resume (CPU: model, optimizer and scheduler; CUDA: model
weights, optimizer moments restart).

``export`` writes a checkpoint as this project's ``CausalLM`` folder (checked
against Megatron's forward pass), so ``curate pipeline=evaluate`` scores it:

    curate-megatron export --load ckpt/tiny --output data/06_models/megatron/lm_checkpoint --versioned
    curate pipeline=evaluate run.namespace=megatron
"""

from __future__ import annotations

from curation.telemetry import disable as _disable_telemetry

_disable_telemetry()  # before Kedro, MLflow or the Hub load: nothing phones home (curation.telemetry)

import argparse
import json
import math
import os
import sys
import time
import uuid
from collections import OrderedDict
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np

from curation.errors import UserError
from curation.pretraining.megatron import MODELS, TRAINING


class LaunchInputError(UserError, ValueError):
    """An input of ``curate-megatron`` (``--input``, ``--tokenizer``) that is missing, unreadable or holds no
    documents: one line naming the file and the fix instead of a pyarrow or tokenizers trace (issue #39)."""


INPUT_KINDS = ("a parquet file of documents, a sharded documents folder (manifest.json, e.g. "
               "data/07_model_output/<namespace>/selected_documents) or a packed token folder (index.json)")

# --- tokenizer -------------------------------------------------------------------------------------


def load_hf_tokenizer(path: str | Path):
    """A ``tokenizers`` tokenizer.json (ours, or e.g. Qwen2.5's) that defines ``<|endoftext|>``."""
    from curation.lm import load_tokenizer

    if not Path(path).is_file():
        raise LaunchInputError(f"--tokenizer {path}: no such file. Fix: give the tokenizer.json the data was (or is "
                               f"to be) converted with, e.g. data/06_models/<namespace>/tokenizer.json")
    try:
        return load_tokenizer(path)
    except Exception as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise LaunchInputError(f"--tokenizer {path}: cannot be read as a tokenizer.json with <|endoftext|> "
                               f"({reason}). Fix: give a tokenizers-library tokenizer.json (e.g. the pretrain "
                               f"pipeline's data/06_models/<namespace>/tokenizer.json, or Qwen2.5's)") from err


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
    blank_skipped: int = 0  # rows whose text is null, empty or white space only: not written (rows = documents + these)


def _parquet(path: Path, text_column: str):
    """``path`` opened as parquet, its ``text_column`` checked to be text (one line naming the file otherwise)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        handle = pq.ParquetFile(path)
    except Exception as err:
        raise LaunchInputError(f"--input {path}: cannot be read as parquet ({str(err).strip() or type(err).__name__})."
                               f" Fix: give {INPUT_KINDS}; a file cut short by an interrupted copy must be copied "
                               f"again") from err
    names = handle.schema_arrow.names
    if text_column not in names:
        raise LaunchInputError(f"--input {path} has no column {text_column!r} (columns: {names}). Fix: name the "
                               f"documents' text column with --text-column")
    kind = handle.schema_arrow.field(text_column).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise LaunchInputError(f"--input {path}: column {text_column!r} holds {kind} values, not text. Fix: name "
                               f"the documents' text column with --text-column")
    return handle


def _documents_from_parquet(path: Path, text_column: str, tokenizer, batch_size: int = 512,
                            counts: Optional[dict[str, int]] = None) -> Iterator[np.ndarray]:
    """The documents of ``path``, tokenized, each with its EOS; a blank text (null, empty or white space only, what
    ingest drops as ``empty_text``) is skipped and counted in ``counts["blank"]``."""
    from curation.lm import eos_id

    eod = eos_id(tokenizer)
    handle = _parquet(path, text_column)
    counts = {} if counts is None else counts
    for batch in handle.iter_batches(batch_size=batch_size, columns=[text_column]):
        column = batch.column(0).to_pylist()
        texts = [t for t in column if t is not None and t.strip()]
        counts["blank"] = counts.get("blank", 0) + len(column) - len(texts)
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


def resolve_prefix(output_prefix: str | Path, input_path: str | Path) -> Path:
    """``--output-prefix`` as the path the files get (minus ``.bin`` / ``.idx``). A prefix that ends in ``/``, or
    names an existing folder, means inside that folder: ``<folder>/<the input's name>`` (``selected_documents``,
    or a parquet file's name without ``.parquet``), not ``<folder>.bin`` beside it."""
    raw = str(output_prefix)
    prefix = Path(raw)
    if raw.endswith(("/", os.sep)) or prefix.is_dir():
        name = Path(input_path).name
        for suffix in (".parquet", ".pq"):
            name = name.removesuffix(suffix)
        prefix = prefix / (name or "documents")
    return prefix


def convert(input_path: str | Path, output_prefix: str | Path, tokenizer_path: Optional[str | Path] = None,
            text_column: str = "text", force: bool = False) -> ConversionStats:
    """Write ``input_path`` as Megatron's indexed dataset ``<output_prefix>.bin/.idx``.

    input_path: a sharded documents folder (``manifest.json`` + ``shards/*.parquet``, e.g. the
        pipeline's ``selected_documents``; read shard by shard in manifest order) or a parquet file
        of documents (both need ``tokenizer_path``), or a packed token folder (``tokens.bin`` +
        ``index.json`` of :func:`curation.lm.pack_documents`, already tokenized).
    output_prefix: a folder (ending in ``/``, or an existing one) means inside it (:func:`resolve_prefix`). An
        existing ``<prefix>.bin`` or ``.idx`` is refused unless ``force`` (it may be another selection's).

    Blank texts (null, empty, white space only) are skipped and counted: ``blank_skipped``.
    """
    from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder

    t0 = time.perf_counter()
    source = Path(input_path)
    prefix = resolve_prefix(output_prefix, input_path)
    existing = [f"{prefix}{ext}" for ext in (".bin", ".idx") if Path(f"{prefix}{ext}").exists()]
    if existing and not force:
        raise LaunchInputError(f"--output-prefix {prefix}: {' and '.join(existing)} already exist"
                               f"{'s' if len(existing) == 1 else ''} (an earlier conversion, perhaps of another "
                               f"selection). Fix: pass --force to replace them, or give another --output-prefix")
    counts: dict[str, int] = {"blank": 0}
    sharded = source.is_dir() and (source / "manifest.json").is_file()
    if not source.exists() or (source.is_dir() and not sharded and not (source / "index.json").is_file()):
        what = "no such file or folder" if not source.exists() else "a folder without manifest.json or index.json"
        raise LaunchInputError(f"--input {source}: {what}. Fix: give {INPUT_KINDS}")
    if source.is_dir() and not sharded:
        from curation.lm.packing import PackedDataset

        index = PackedDataset(source).index
        vocab_size, eod = index.vocab_size, index.eos_id
        documents = _documents_from_packed(source)
    else:
        if tokenizer_path is None:
            raise LaunchInputError(f"--input {source} holds documents (text): converting them needs --tokenizer. Fix: "
                                   f"add --tokenizer <tokenizer.json>")
        from curation.lm import eos_id

        tokenizer = load_hf_tokenizer(tokenizer_path)
        vocab_size, eod = tokenizer.get_vocab_size(), eos_id(tokenizer)
        if sharded:
            from curation.shards import ShardedDataset

            shards = ShardedDataset(source)
            documents = (doc for name in shards.names
                         for doc in _documents_from_parquet(shards.shard_path(name), text_column, tokenizer,
                                                            counts=counts))
        else:
            _parquet(source, text_column)  # before any output: a bad input leaves nothing behind
            documents = _documents_from_parquet(source, text_column, tokenizer, counts=counts)
    dtype = DType.optimal_dtype(vocab_size)
    made = [p for p in reversed(prefix.parents) if not p.exists()]  # folders this call creates
    prefix.parent.mkdir(parents=True, exist_ok=True)
    tmp = prefix.with_name(f".{prefix.name}.tmp-{uuid.uuid4().hex[:8]}")
    n_docs = n_tokens = 0
    try:
        builder = IndexedDatasetBuilder(f"{tmp}.bin", dtype=dtype)
        for doc in documents:
            builder.add_document(doc, [len(doc)])  # a numpy array: the builder casts it to `dtype`
            n_docs += 1
            n_tokens += len(doc)
        builder.finalize(f"{tmp}.idx")
        if n_docs == 0:
            blank = f"{counts['blank']:,} rows, all blank" if counts["blank"] else "no row with text"
            raise LaunchInputError(f"--input {source} has no documents ({blank}). Fix: convert a selection "
                                   f"that holds documents")
        os.replace(f"{tmp}.bin", f"{prefix}.bin")
        os.replace(f"{tmp}.idx", f"{prefix}.idx")  # last: a prefix with an .idx is complete
    except BaseException as err:
        for ext in (".bin", ".idx"):
            Path(f"{tmp}{ext}").unlink(missing_ok=True)
        for folder in reversed(made):  # a failed conversion leaves no folder it made either
            try:
                folder.rmdir()
            except OSError:
                break
        if isinstance(err, OSError) and err.filename is None and err.errno is not None:
            # a write through the builder's handle names no file: name the output (a full disk, issue #39)
            raise OSError(err.errno, os.strerror(err.errno), f"{prefix}.bin") from err
        raise
    finally:
        for ext in (".bin", ".idx"):
            Path(f"{tmp}{ext}").unlink(missing_ok=True)
    return ConversionStats(str(prefix), n_docs, n_tokens, np.dtype(dtype).name, eod, vocab_size,
                           time.perf_counter() - t0, blank_skipped=counts["blank"])


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


def pick_device(requested: str = "auto") -> str:
    """``cuda`` where torch sees a GPU (or when asked), else ``cpu``; ``cuda`` without a GPU is refused."""
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA GPU on this machine (use --device cpu)")
    return requested


@contextmanager
def megatron_on_cpu():
    """Let megatron-core's model code run on a machine without CUDA.

    megatron-core 0.16.1 asks ``torch.cuda.current_device()`` for the device of
    tensors it creates during the forward pass even when the model lives on the
    CPU (``RotaryEmbedding.get_emb`` moves its frequencies there at every call;
    the MoE router and experts do the same). Inside this context that call
    answers ``cpu``, so those tensors are made where the model is. Nothing else
    changes: the layers, their arithmetic and their parameters are megatron-core's.
    The pieces that stay CUDA-only are replaced in :func:`_train_cpu`, not
    patched (each named there).
    """
    import torch

    if torch.cuda.is_available():
        yield
        return
    original = torch.cuda.current_device
    torch.cuda.current_device = lambda: torch.device("cpu")  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.cuda.current_device = original  # type: ignore[assignment]


class CpuRNGStatesTracker:
    """megatron-core's ``CudaRNGStatesTracker`` on torch's CPU generator.

    Megatron's attention forks the named ``model-parallel-rng`` stream around
    its dropout at every forward, and the CUDA tracker keeps its streams as CUDA
    generator states. This one keeps them as CPU generator states, with the same
    names and seeds as ``model_parallel_cuda_manual_seed`` (tensor-parallel rank 0).
    """

    def __init__(self) -> None:
        self.states_: dict = {}

    def is_initialized(self) -> bool:
        return bool(self.states_)

    def reset(self) -> None:
        self.states_ = {}

    def get_states(self) -> dict:
        return dict(self.states_)

    def set_states(self, states: dict) -> None:
        self.states_ = dict(states)

    def add(self, name: str, seed: int) -> None:
        import torch

        if name in self.states_:
            raise Exception(f"rng state {name} already exists")
        saved = torch.get_rng_state()
        torch.manual_seed(seed)
        self.states_[name] = torch.get_rng_state()
        torch.set_rng_state(saved)

    @contextmanager
    def fork(self, name: str = "model-parallel-rng"):
        import torch

        if name not in self.states_:
            raise Exception(f"rng state {name} is not added")
        saved = torch.get_rng_state()
        torch.set_rng_state(self.states_[name])
        try:
            yield
        finally:
            self.states_[name] = torch.get_rng_state()
            torch.set_rng_state(saved)


def seed_on_cpu(seed: int) -> None:
    """``model_parallel_cuda_manual_seed`` for the CPU: torch's seed and the three named streams."""
    import torch
    from megatron.core.tensor_parallel import random as megatron_random

    torch.manual_seed(seed)
    tracker = CpuRNGStatesTracker()
    tracker.add("data-parallel-rng", seed)
    tracker.add("model-parallel-rng", seed + 2718)
    tracker.add("expert-parallel-rng", seed + 1024)
    megatron_random._CUDA_RNG_STATE_TRACKER = tracker
    megatron_random._CUDA_RNG_STATE_TRACKER_INITIALIZED = True


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
# megatron-core 0.16.1's default distributed-optimizer layout (fully_sharded_model_space) is deprecated and its
# save fails ("ShardedTensor.flattened_range is not supported"); dp_reshardable saves each rank's buffers.
OPTIMIZER_SHARDING = {"distrib_optim_sharding_type": "dp_reshardable"}
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
    """Pre-train with megatron-core: on CUDA + NCCL (:func:`_train_cuda`) or on CPU + gloo (:func:`_train_cpu`)."""
    if pick_device(args.device) == "cuda":
        _train_cuda(args)
    else:
        _train_cpu(args)


def _train_cpu(args: argparse.Namespace) -> None:
    """The same model, data, schedule and checkpoint cycle on CPU with the gloo backend (1 or more processes).

    megatron-core's model (``GPTModel`` and its layers), dataset (``GPTDataset``
    over the indexed dataset) and LR scheduler run as they are (under
    :func:`megatron_on_cpu`). Four of its pieces are CUDA-only in 0.16.1 and
    have a plain-torch stand-in here, named with the call that fails:

    - ``model_parallel_cuda_manual_seed`` (``torch.cuda.manual_seed``) and the CUDA RNG tracker that
      every attention forward forks (``CudaRNGStatesTracker.fork``): :func:`seed_on_cpu`, the same named
      streams on torch's CPU generator.
    - ``DistributedDataParallel`` (``_ParamAndGradBuffer`` allocates on ``torch.cuda.current_device()``):
      ``torch.nn.parallel.DistributedDataParallel`` over gloo when there are 2+ processes.
    - ``get_megatron_optimizer`` (``FP32Optimizer`` keeps its loss scale on ``'cuda'``): ``torch.optim.AdamW``
      with Megatron's parameter groups (no weight decay on biases and norms) and ``clip_grad_norm_``.
    - ``get_forward_backward_func`` (``forward_backward_no_pipelining`` counts tokens on ``'cuda'``): the
      same micro-batch loop written out; ``dist_checkpointing`` (``torch.cuda.synchronize`` when saving):
      ``torch.save`` of model, optimizer and scheduler, so a resumed run continues exactly.
    """
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.transformer.moe.moe_utils import MoEAuxLossAutoScaler

    from curation.pretraining.megatron import build_model

    if args.tensor_parallel != 1 or args.expert_parallel != 1:
        raise SystemExit("on CPU, --tensor-parallel and --expert-parallel must be 1 (data parallel only)")
    if not args.fp32:
        args.fp32 = True  # bf16 matmuls on CPU are slow and Megatron's bf16 path needs its CUDA optimizer
    rank, world_size = _init_distributed("gloo")
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(1, 1)
    seed_on_cpu(args.seed)
    plan, say, save_dir, log_path = _start_run(args, rank, world_size)

    with megatron_on_cpu():
        model = build_model(args.model, device="cpu", **_model_overrides(args))
        wrapped = model
        if world_size > 1:
            wrapped = torch.nn.parallel.DistributedDataParallel(model)
        decay = [p for n, p in model.named_parameters() if p.ndim > 1 and not n.endswith("bias")]
        no_decay = [p for n, p in model.named_parameters() if not (p.ndim > 1 and not n.endswith("bias"))]
        optimizer = torch.optim.AdamW(
            [{"params": decay, "wd_mult": 1.0}, {"params": no_decay, "wd_mult": 0.0}],
            lr=args.lr, betas=(args.adam_beta1, args.adam_beta2), eps=1e-8, weight_decay=args.weight_decay)
        scheduler = _lr_scheduler(optimizer, args, plan)
        start_iter = 0
        latest = _latest(save_dir)
        if latest is not None:
            if latest.get("format") != "torch":
                raise SystemExit(f"{save_dir} holds a {latest.get('format')!r} checkpoint (CUDA run); "
                                 "resume it on CUDA or start a new --save folder")
            state = torch.load(save_dir / latest["dir"] / "state.pt", map_location="cpu", weights_only=False)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            start_iter = latest["iteration"]
            say(f"resumed from iteration {start_iter} (model, optimizer and scheduler state)", flush=True)
            _log(log_path, {"resumed_from": start_iter})

        # Megatron's builder builds the sample index on rank 0 first, then the other ranks read its cache.
        dataset = build_train_dataset(args.data_prefix, args.tokenizer, args.seq_length,
                                      plan.train_iters * plan.global_batch_size, args.seed)
        batches = _micro_batches(dataset, plan, rank, start_iter)
        # Megatron's schedule scales the MoE auxiliary loss's gradient by 1 / micro-batches (as the LM loss).
        MoEAuxLossAutoScaler.set_loss_scale(torch.tensor(1.0 / plan.grad_accumulation))

        t_last = time.perf_counter()
        wrapped.train()
        for iteration in range(start_iter, plan.train_iters):
            optimizer.zero_grad(set_to_none=True)
            losses = []
            for micro in range(plan.grad_accumulation):
                batch = next(batches)
                sync = micro == plan.grad_accumulation - 1 or world_size == 1
                with (nullcontext() if sync else wrapped.no_sync()):
                    per_token = wrapped(batch["tokens"], batch["position_ids"], batch.get("attention_mask"),
                                        labels=batch["labels"])
                    mask = batch["loss_mask"].float()
                    loss = (per_token.float() * mask).sum() / mask.sum()
                    (loss / plan.grad_accumulation).backward()
                losses.append(loss.detach())
            grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad))
            optimizer.step()
            scheduler.step(plan.global_batch_size)
            if (iteration + 1) % args.log_interval == 0 or iteration == start_iter:
                lm_loss = torch.stack(losses).mean()
                if world_size > 1:
                    dist.all_reduce(lm_loss)
                    lm_loss /= world_size
                now = time.perf_counter()
                done = (iteration + 1 - start_iter) if iteration == start_iter else args.log_interval
                tokens_per_s = done * plan.tokens_per_iteration / (now - t_last)
                t_last = now
                if rank == 0:
                    _log(log_path, {"iteration": iteration + 1, "lm_loss": float(lm_loss), "grad_norm": grad_norm,
                                    "lr": optimizer.param_groups[0]["lr"], "tokens_per_s": tokens_per_s,
                                    "device": "cpu", "world_size": world_size})
            if save_dir is not None and ((iteration + 1) % args.save_interval == 0
                                         or iteration + 1 == plan.train_iters):
                if rank == 0:
                    name = f"iter_{iteration + 1:07d}"
                    target = save_dir / name
                    target.mkdir(exist_ok=True)
                    tmp = target / ".state.pt.tmp"
                    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                "scheduler": scheduler.state_dict(), "iteration": iteration + 1}, tmp)
                    os.replace(tmp, target / "state.pt")
                    _write_latest(save_dir, iteration + 1, name, "torch", args)
                dist.barrier()
    dist.barrier()
    parallel_state.destroy_model_parallel()  # so that one process can run train() again (tests, sweeps)
    dist.destroy_process_group()


def _train_cuda(args: argparse.Namespace) -> None:
    """The training loop on CUDA + NCCL (see the module docstring); one process per GPU under torchrun."""
    import torch

    from functools import partial

    import torch.distributed as dist
    from megatron.core import dist_checkpointing, parallel_state
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.distributed.finalize_model_grads import finalize_model_grads
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.pipeline_parallel.schedules import get_forward_backward_func
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    from curation.pretraining.megatron import build_model

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    rank, world_size = _init_distributed("nccl")
    parallel_state.initialize_model_parallel(args.tensor_parallel, 1,
                                             expert_model_parallel_size=args.expert_parallel)
    model_parallel_cuda_manual_seed(args.seed)
    plan, say, save_dir, log_path = _start_run(args, rank, world_size)

    dtype = torch.float32 if args.fp32 else torch.bfloat16
    model = build_model(args.model, device="cuda", use_cpu_initialization=False, bf16=not args.fp32,
                        params_dtype=dtype, **_model_overrides(args))
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
    gbs = plan.global_batch_size
    scheduler = _lr_scheduler(optimizer, args, plan)

    start_iter = 0
    latest = _latest(save_dir)
    if latest is not None:  # resume
        if latest.get("format", "dist") != "dist":
            raise SystemExit(f"{save_dir} holds a {latest.get('format')!r} checkpoint (CPU run); "
                             "start a new --save folder")
        folder = str(save_dir / latest["dir"])
        if latest.get("optimizer"):
            model_state = model.module.sharded_state_dict(prefix="")
            state = dist_checkpointing.load(
                {"model": model_state, "optimizer": optimizer.sharded_state_dict(model_state, is_loading=True, metadata=OPTIMIZER_SHARDING)},
                folder)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            restored = "model weights and optimizer state"
        else:  # a checkpoint of weights only
            model.module.load_state_dict(dist_checkpointing.load(model.module.sharded_state_dict(prefix=""), folder))
            restored = "model weights only; optimizer moments restart"
        start_iter = latest["iteration"]
        scheduler.step(start_iter * gbs)
        say(f"resumed from iteration {start_iter} ({restored})")
        if rank == 0:
            _log(log_path, {"resumed_from": start_iter})

    # Megatron's builder builds the sample index on rank 0 first, then the other ranks read its cache.
    dataset = build_train_dataset(args.data_prefix, args.tokenizer, args.seq_length,
                                  plan.train_iters * plan.global_batch_size, args.seed)
    batches = _micro_batches(dataset, plan, parallel_state.get_data_parallel_rank(), start_iter)

    def loss_func(loss_mask, output_tensor):
        losses = output_tensor.float().view(-1)
        mask = loss_mask.view(-1).float()
        loss = torch.sum(losses * mask) / mask.sum()
        # A copy: the schedule divides the returned loss in place by the number of micro-batches.
        return loss, {"lm loss": loss.detach().clone()}

    def forward_step(data_iterator, module):
        batch = {k: v.cuda(non_blocking=True) for k, v in next(data_iterator).items()}
        output = module(batch["tokens"], batch["position_ids"], batch.get("attention_mask"), labels=batch["labels"])
        return output, partial(loss_func, batch["loss_mask"])

    forward_backward = get_forward_backward_func()
    torch.cuda.synchronize()
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
        if (iteration + 1) % args.log_interval == 0 or iteration == start_iter:
            loss = torch.stack([x["lm loss"] for x in losses]).mean().item() if losses else float("nan")
            torch.cuda.synchronize()
            now = time.perf_counter()
            done = (iteration + 1 - start_iter) if iteration == start_iter else args.log_interval
            tokens_per_s = done * plan.tokens_per_iteration / (now - t_last)
            t_last = now
            if rank == 0:
                _log(log_path, {"iteration": iteration + 1, "lm_loss": loss, "grad_norm": grad_norm,
                                "lr": optimizer.param_groups[0]["lr"], "tokens_per_s": tokens_per_s,
                                "device": torch.cuda.get_device_name(), "world_size": world_size,
                                "max_memory_gib": torch.cuda.max_memory_allocated() / 2**30})
        if save_dir is not None and ((iteration + 1) % args.save_interval == 0 or iteration + 1 == plan.train_iters):
            name = f"iter_{iteration + 1:07d}"
            (save_dir / name).mkdir(exist_ok=True)
            model_state = model.module.sharded_state_dict(prefix="")
            if args.save_optimizer:
                model_state = {"model": model_state,
                               "optimizer": optimizer.sharded_state_dict(model_state, metadata=OPTIMIZER_SHARDING)}
            dist_checkpointing.save(model_state, str(save_dir / name))
            if rank == 0:
                _write_latest(save_dir, iteration + 1, name, "dist", args, optimizer=args.save_optimizer)
            dist.barrier()
    dist.destroy_process_group()


# --- export: a Megatron checkpoint -> this project's CausalLM ------------------------------------


def causal_lm_config(name: str, **config_overrides: Any):
    """The :class:`curation.lm.ModelConfig` whose ``CausalLM`` computes what Megatron's ``GPTModel`` of ``name``
    computes (same RMSNorm, rotate-half RoPE, GQA, SwiGLU, top-k routing after the softmax)."""
    from curation.lm.model import ModelConfig

    spec = MODELS[name]
    return ModelConfig(
        vocab_size=spec.vocab_size, max_seq_len=spec.max_sequence_length,
        n_layer=config_overrides.get("num_layers") or spec.num_layers, d_model=spec.hidden_size,
        n_head=spec.num_attention_heads, n_kv_head=spec.num_query_groups, d_ff=spec.ffn_hidden_size,
        rope_theta=float(spec.rotary_base), norm_eps=spec.norm_epsilon, qkv_bias=spec.add_qkv_bias,
        tie_embeddings=spec.tie_embeddings, num_experts=spec.num_moe_experts or 0,
        moe_top_k=spec.moe_router_topk, moe_d_ff=spec.ffn_hidden_size if spec.num_moe_experts else None,
        moe_normalize_topk=False, moe_aux_loss_coef=1e-2,
    )


def megatron_to_causal_lm(state: dict, config) -> dict:
    """Megatron ``GPTModel`` (local layer spec) state dict -> :class:`curation.lm.CausalLM` state dict.

    The one non-trivial move is ``linear_qkv``: Megatron stores its rows query group by query group
    (``[q heads of group g, k_g, v_g]`` for each g), ours all queries, then all keys, then all values.
    """
    import torch

    hd, n_kv = config.head_dim, config.n_kv_head
    per_group = config.n_head // n_kv

    def qkv(tensor):
        groups = tensor.reshape(n_kv, (per_group + 2) * hd, *tensor.shape[1:])
        q = groups[:, : per_group * hd].reshape(config.n_head * hd, *tensor.shape[1:])
        k = groups[:, per_group * hd: (per_group + 1) * hd].reshape(n_kv * hd, *tensor.shape[1:])
        v = groups[:, (per_group + 1) * hd:].reshape(n_kv * hd, *tensor.shape[1:])
        return torch.cat([q, k, v], dim=0)

    out = {"embed_tokens.weight": state["embedding.word_embeddings.weight"],
           "norm.weight": state["decoder.final_layernorm.weight"]}
    out["lm_head.weight"] = out["embed_tokens.weight"] if config.tie_embeddings else state["output_layer.weight"]
    for i in range(config.n_layer):
        src, dst = f"decoder.layers.{i}.", f"layers.{i}."
        out[dst + "input_layernorm.weight"] = state[src + "input_layernorm.weight"]
        out[dst + "self_attn.qkv_proj.weight"] = qkv(state[src + "self_attention.linear_qkv.weight"])
        if config.qkv_bias:
            out[dst + "self_attn.qkv_proj.bias"] = qkv(state[src + "self_attention.linear_qkv.bias"])
        out[dst + "self_attn.o_proj.weight"] = state[src + "self_attention.linear_proj.weight"]
        out[dst + "post_attention_layernorm.weight"] = state[src + "pre_mlp_layernorm.weight"]
        if config.num_experts:
            out[dst + "mlp.router.weight"] = state[src + "mlp.router.weight"]
            for e in range(config.num_experts):
                expert = f"{src}mlp.experts.local_experts.{e}."
                out[f"{dst}mlp.experts.{e}.gate_up_proj.weight"] = state[expert + "linear_fc1.weight"]
                out[f"{dst}mlp.experts.{e}.down_proj.weight"] = state[expert + "linear_fc2.weight"]
        else:  # Megatron's GLU fc1 is [gate; up], as our gate_up_proj
            out[dst + "mlp.gate_up_proj.weight"] = state[src + "mlp.linear_fc1.weight"]
            out[dst + "mlp.down_proj.weight"] = state[src + "mlp.linear_fc2.weight"]
    return {k: v.detach().float().cpu().contiguous() for k, v in out.items()}


def load_megatron_state(save_dir: str | Path, iteration: Optional[int] = None) -> tuple[dict, dict]:
    """(Megatron model state dict, checkpoint meta) of the latest (or given) iteration in ``save_dir``."""
    import torch

    save_dir = Path(save_dir)
    meta = _latest(save_dir)
    if meta is None:
        raise SystemExit(f"no {LATEST_FILE} in {save_dir}: not a curate-megatron checkpoint folder")
    if iteration is not None:
        meta = {**meta, "iteration": iteration, "dir": f"iter_{iteration:07d}"}
    folder = save_dir / meta["dir"]
    if meta.get("format") == "torch":
        return torch.load(folder / "state.pt", map_location="cpu", weights_only=False)["model"], meta
    from megatron.core import dist_checkpointing

    from curation.pretraining.megatron import build_model

    model = build_model(meta["model"], device="cpu", **_model_overrides(argparse.Namespace(**meta)))
    wanted = model.sharded_state_dict(prefix="")
    # Checkpoints with the optimizer keep the model under "model"; the optimizer's entries are left unread.
    state = dist_checkpointing.load({"model": wanted} if meta.get("optimizer") else wanted, str(folder))
    model.load_state_dict(state["model"] if meta.get("optimizer") else state)
    return model.state_dict(), meta


def export(save_dir: str | Path, output: str | Path, tokenizer_path: Optional[str | Path] = None,
           iteration: Optional[int] = None, versioned: bool = False, check_tokens: int = 32) -> dict:
    """Write a Megatron checkpoint as this project's model folder (``model.pt``, ``config.json``,
    ``tokenizer.json``), which ``curate pipeline=evaluate`` and :class:`~curation.evaluation.harness.CurationLM`
    score. ``versioned`` writes ``<output>/<kedro version>/<output name>``, the layout of the versioned
    ``lm_checkpoint`` dataset, so the evaluate pipeline loads it as its latest checkpoint.

    The exported model is checked against Megatron's own forward pass on ``check_tokens`` random tokens:
    the largest logit difference is returned (``max_abs_logit_diff``), and an export whose logits differ
    by more than 1e-3 relative to their scale is refused.
    """
    import shutil

    import torch

    from curation.lm.model import CausalLM
    from curation.lm.train import save_model
    from curation.pretraining.megatron import build_model

    state, meta = load_megatron_state(save_dir, iteration)
    overrides = _model_overrides(argparse.Namespace(**meta))
    config = causal_lm_config(meta["model"], **overrides)
    model = CausalLM(config)
    model.load_state_dict(megatron_to_causal_lm(state, config))
    model.eval()

    diff = scale = float("nan")
    if check_tokens:
        with megatron_on_cpu():
            _ensure_rng_tracker()
            reference = build_model(meta["model"], device="cpu", **overrides)
            reference.load_state_dict(state)
            # Megatron's forward puts its RoPE tables on the current CUDA device when there is one.
            where = "cuda" if torch.cuda.is_available() else "cpu"
            reference.eval().float().to(where)
            tokens = torch.randint(0, config.vocab_size, (1, check_tokens), generator=torch.Generator().manual_seed(0))
            positions = torch.arange(check_tokens)[None]
            causal = torch.triu(torch.ones(1, 1, check_tokens, check_tokens, dtype=torch.bool), diagonal=1)
            with torch.no_grad():
                theirs = reference(tokens.to(where), positions.to(where), causal.to(where)).float().cpu()
                ours = model(tokens).logits.float()
        diff, scale = float((theirs - ours).abs().max()), float(theirs.abs().max())
        if not diff <= 1e-3 * max(scale, 1.0):
            raise SystemExit(f"exported model disagrees with Megatron's forward: max |logit diff| {diff:.3g} "
                             f"(logit scale {scale:.3g})")

    output = Path(output)
    if versioned:
        from datetime import datetime, timezone

        # The version folder name of a Kedro versioned dataset (kedro.io.core.generate_timestamp's format:
        # milliseconds, UTC), written without importing Kedro into the core.
        stamp = datetime.now(tz=timezone.utc).strftime("%Y-%m-%dT%H.%M.%S.%fZ")
        output = output / (stamp[:-4] + stamp[-1:]) / output.name
    tok = Path(tokenizer_path or meta["tokenizer"])
    tmp = output.with_name(f".{output.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        save_model(model, tmp)
        shutil.copyfile(tok, tmp / "tokenizer.json")
        info = json.loads((tmp / "config.json").read_text())
        info["megatron"] = {**meta, "source": str(Path(save_dir).resolve())}
        (tmp / "config.json").write_text(json.dumps(info, indent=2))
        output.parent.mkdir(parents=True, exist_ok=True)
        if output.exists():
            shutil.rmtree(output)
        os.replace(tmp, output)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return {"output": str(output), "model": meta["model"], "iteration": meta["iteration"],
            "parameters": model.num_parameters(), "max_abs_logit_diff": diff, "logit_scale": scale}


def _ensure_rng_tracker() -> None:
    """Megatron's attention forks the model-parallel RNG stream; outside training no seed was set."""
    import torch
    from megatron.core.tensor_parallel import random as megatron_random

    tracker = megatron_random.get_cuda_rng_tracker()
    if tracker.is_initialized():
        return
    if torch.cuda.is_available():
        megatron_random.model_parallel_cuda_manual_seed(0)
    else:
        seed_on_cpu(0)


# --- command line ----------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="curate-megatron", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("convert", help="a selection -> Megatron indexed dataset (<prefix>.bin/.idx)")
    c.add_argument("--input", required=True, help="parquet of documents, or a packed token folder")
    c.add_argument("--output-prefix", required=True,
                   help="writes <prefix>.bin and <prefix>.idx; a folder (ending in /) means <folder>/<input name>")
    c.add_argument("--force", action="store_true", help="replace an existing <prefix>.bin/.idx")
    c.add_argument("--tokenizer", help="tokenizer.json with <|endoftext|> (needed for parquet input)")
    c.add_argument("--text-column", default="text")

    e = sub.add_parser("export", help="a Megatron checkpoint -> this project's model folder (pipeline=evaluate)")
    e.add_argument("--load", required=True, help="the --save folder of a train run")
    e.add_argument("--output", required=True, help="model folder to write (with --versioned: the dataset folder)")
    e.add_argument("--tokenizer", help="tokenizer.json (default: the one the run trained with)")
    e.add_argument("--iteration", type=int, default=None, help="default: the latest")
    e.add_argument("--versioned", action="store_true",
                   help="write <output>/<version>/<name>, as the versioned lm_checkpoint dataset")

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
    t.add_argument("--save-optimizer", action="store_true",
                   help="CUDA: also checkpoint the distributed optimizer (fails in megatron-core 0.16.1 on one GPU; "
                        "without it a resumed run restarts Adam's moments)")
    t.add_argument("--log-interval", type=int, default=10)
    t.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto",
                   help="cuda (NCCL, Megatron's DDP and optimizer) | cpu (gloo; see _train_cpu) | auto")
    t.add_argument("--num-layers", type=int, default=None,
                   help="fewer layers than the model's (smoke runs of a paper model on one GPU)")
    t.add_argument("--world-size", type=int, default=None,
                   help="--dry-run only: plan for this many GPUs (default: $WORLD_SIZE or 1)")
    t.add_argument("--dry-run", action="store_true",
                   help="build the model on the meta device and print the plan as JSON; no GPU needed")
    return p


def main(argv: Optional[list[str]] = None) -> int:
    """The ``curate-megatron`` command. A known failure (a missing or unreadable input, a full disk:
    :func:`curation.errors.user_message`) ends with one ``curate-megatron: error: ...`` line and exit status 2,
    as ``curate`` and ``kedro run`` do; the trace with ``--verbose`` or ``HYDRA_FULL_ERROR=1``."""
    from curation.errors import VERBOSE_ENV, format_failure, user_message, verbose

    argv = list(sys.argv[1:] if argv is None else argv)
    if "--verbose" in argv:
        argv.remove("--verbose")
        os.environ[VERBOSE_ENV] = "1"
    try:
        return _main(argv)
    except Exception as err:
        message = user_message(err)
        if message is None or verbose():
            raise
        print(format_failure(message, "curate-megatron"), file=sys.stderr, flush=True)
        return 2


def _main(argv: list[str]) -> int:
    import warnings

    args = parser().parse_args(argv)
    warnings.filterwarnings("ignore", message=".*Transformer Engine.*")
    warnings.filterwarnings("ignore", message=".*Apex.*")
    if args.command == "convert":
        stats = convert(args.input, args.output_prefix, args.tokenizer, args.text_column, force=args.force)
        if stats.blank_skipped:
            print(f"curate-megatron: {stats.blank_skipped:,} of {stats.documents + stats.blank_skipped:,} rows skipped: "
                  f"blank text (null, empty or white space only); {stats.documents:,} documents written to "
                  f"{stats.prefix}.bin/.idx", file=sys.stderr, flush=True)
        print(json.dumps(asdict(stats)))
        return 0
    if args.command == "export":
        print(json.dumps(export(args.load, args.output, args.tokenizer, args.iteration, args.versioned)))
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
