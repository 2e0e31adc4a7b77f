"""Tiny language models: tokenizer, packed token data, a Qwen2-style model, Lightning training.

Plain PyTorch/Lightning (no Kedro, MLflow or Hydra). Modules, read top-down:
``tokenizer`` (byte-level BPE), ``packing`` (documents -> memmap token stream ->
fixed-length sequences), ``model`` (RMSNorm, RoPE, GQA, SwiGLU, top-k MoE),
``config`` (dataclasses and the presets tiny / tiny_moe / proxy_quick /
proxy_paper), ``train`` (Lightning module and ``train``), ``mixing`` (batches
that mix two datasets at a ratio, Ultra-FineWeb seeds/002 Sec. 2.2).

    tok = train_tokenizer(texts, vocab_size=8192)
    data = pack_documents(texts, tok, "packed/", seq_len=256)
    result = train(get_config("tiny"), data, "runs/tiny", on_step=lambda s, m: print(s, m["loss"]))
"""

from curation.lm.config import PRESETS, PretrainConfig, TrainConfig, get_config, parse_config
from curation.lm.mixing import MixedBatchSampler, MixtureDataset, annealing_steps, loader_from, mixed_loader
from curation.lm.model import CausalLM, ModelConfig, load_balancing_loss
from curation.lm.packing import PackedDataset, pack_documents
from curation.lm.tokenizer import (
    EOS_TOKEN,
    TokenizerConfig,
    build_tokenizer,
    eos_id,
    load_tokenizer,
    save_tokenizer,
    train_tokenizer,
)
from curation.lm.train import TrainResult, evaluate_loss, load_model, lr_at, save_model, train

__all__ = [
    "EOS_TOKEN",
    "PRESETS",
    "CausalLM",
    "MixedBatchSampler",
    "MixtureDataset",
    "ModelConfig",
    "PackedDataset",
    "PretrainConfig",
    "TokenizerConfig",
    "TrainConfig",
    "TrainResult",
    "annealing_steps",
    "build_tokenizer",
    "eos_id",
    "evaluate_loss",
    "get_config",
    "load_balancing_loss",
    "load_model",
    "load_tokenizer",
    "loader_from",
    "lr_at",
    "mixed_loader",
    "pack_documents",
    "parse_config",
    "save_model",
    "save_tokenizer",
    "train",
    "train_tokenizer",
]
