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
    # 4. export a checkpoint as this project's model folder, which `curate pipeline=evaluate` scores
    curate-megatron export --load ckpt/tiny --output data/06_models/megatron/lm_checkpoint --versioned
    curate pipeline=evaluate run.namespace=megatron

This module is the ``curate-megatron`` command line; each job lives in a module of its own:

- :mod:`curation.pretraining.convert`: ``convert``, a selection -> ``<prefix>.bin/.idx`` (and the tokenizer loaders);
- :mod:`curation.pretraining.train`: ``train``, the plan of a run (``--dry-run``) and the training loop, one
  for CUDA + NCCL and CPU + gloo;
- :mod:`curation.pretraining.devices`: what differs between the two devices (start, build, step, save, resume);
- :mod:`curation.pretraining.cpu`: the stand-ins that let megatron-core's CUDA-only pieces run on CPU;
- :mod:`curation.pretraining.export`: ``export``, a checkpoint -> this project's ``CausalLM`` folder;
- :mod:`curation.pretraining.megatron`: the models (DATAMASK Sec. 4.1).

Their names are importable from here as well, as before the split (issue #45).
"""

from __future__ import annotations

from curation.telemetry import disable as _disable_telemetry

_disable_telemetry()  # before Kedro, MLflow or the Hub load: nothing phones home (curation.telemetry)

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Optional

from curation.pretraining.convert import (  # noqa: F401  (re-exported: launch.py held them before issue #45)
    INPUT_KINDS, ConversionStats, LaunchInputError, _documents_from_packed, _documents_from_parquet, _parquet, convert,
    load_hf_tokenizer, megatron_tokenizer, resolve_prefix)
from curation.pretraining.cpu import (  # noqa: F401  (re-exported)
    CpuRNGStatesTracker, _ensure_rng_tracker, megatron_on_cpu, pick_device, seed_on_cpu)
from curation.pretraining.export import (  # noqa: F401  (re-exported)
    causal_lm_config, export, load_megatron_state, megatron_to_causal_lm)
from curation.pretraining.megatron import MODELS, TRAINING
from curation.pretraining.train import (  # noqa: F401  (re-exported)
    LATEST_FILE, LOG_FILE, OPTIMIZER_SHARDING, TrainPlan, _init_distributed, _latest, _log, _lr_scheduler,
    _micro_batches, _model_overrides, _start_run, _write_latest, build_plan,
    build_train_dataset, train)


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
                   help="cuda (NCCL, Megatron's DDP and optimizer) | cpu (gloo; see pretraining/devices.py) | auto")
    t.add_argument("--num-layers", type=int, default=None,
                   help="fewer layers than the model's (smoke runs of a paper model on one GPU)")
    t.add_argument("--world-size", type=int, default=None,
                   help="--dry-run only: plan for this many GPUs (default: $WORLD_SIZE or 1)")
    t.add_argument("--dry-run", action="store_true",
                   help="build the model on the meta device and print the plan as JSON; no GPU needed")
    return p


PROG = "curate-megatron"


def _trace_root() -> Path:
    """Where ``logs/`` for the traces of unexpected failures goes: the project, as for ``curate``; the working
    folder when the command runs outside one (a cluster node with the installed package only)."""
    from curation.paths import project_root

    try:
        return project_root()
    except FileNotFoundError:
        return Path.cwd()


def main(argv: Optional[list[str]] = None) -> int:
    """The ``curate-megatron`` command. A known failure (a missing or unreadable input, a full disk:
    :func:`curation.errors.user_message`) ends with one ``curate-megatron: error: ...`` line and exit status 2,
    as ``curate`` and ``kedro run`` do; any other (a bug, a failure no check foresaw) with one line naming the
    file under ``logs/`` that holds its trace, and exit status 1 (it printed the whole trace before, issue #52:
    under ``torchrun`` one per rank). The trace on the console with ``--verbose`` or ``HYDRA_FULL_ERROR=1``."""
    from curation.errors import VERBOSE_ENV, format_failure, format_unexpected, user_message, verbose, write_trace

    argv = list(sys.argv[1:] if argv is None else argv)
    if "--verbose" in argv:
        argv.remove("--verbose")
        os.environ[VERBOSE_ENV] = "1"
    try:
        return _main(argv)
    except Exception as err:
        if verbose():
            raise
        message = user_message(err)
        if message is None:
            print(format_unexpected(err, write_trace(err, _trace_root(), PROG), PROG), file=sys.stderr, flush=True)
            return 1
        print(format_failure(message, PROG), file=sys.stderr, flush=True)
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
