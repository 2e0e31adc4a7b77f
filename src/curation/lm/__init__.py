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

from curation.lazy_exports import lazy_exports

# public name -> its module, imported on first use (curation.lazy_exports: what `curate`'s config check
# imports of this package stays light)
_LAZY = {
    "PRESETS": "curation.lm.config",
    "PretrainConfig": "curation.lm.config",
    "TrainConfig": "curation.lm.config",
    "get_config": "curation.lm.config",
    "parse_config": "curation.lm.config",
    "MixedBatchSampler": "curation.lm.mixing",
    "MixtureDataset": "curation.lm.mixing",
    "annealing_steps": "curation.lm.mixing",
    "loader_from": "curation.lm.mixing",
    "mixed_loader": "curation.lm.mixing",
    "CausalLM": "curation.lm.model",
    "ModelConfig": "curation.lm.model_config",
    "load_balancing_loss": "curation.lm.model",
    "PackedDataset": "curation.lm.packing",
    "pack_documents": "curation.lm.packing",
    "EOS_TOKEN": "curation.lm.tokenizer",
    "TokenizerConfig": "curation.lm.tokenizer",
    "build_tokenizer": "curation.lm.tokenizer",
    "eos_id": "curation.lm.tokenizer",
    "load_tokenizer": "curation.lm.tokenizer",
    "save_tokenizer": "curation.lm.tokenizer",
    "train_tokenizer": "curation.lm.tokenizer",
    "TrainResult": "curation.lm.train",
    "evaluate_loss": "curation.lm.train",
    "load_model": "curation.lm.train",
    "lr_at": "curation.lm.train",
    "save_model": "curation.lm.train",
    "train": "curation.lm.train",
}

__all__ = list(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
