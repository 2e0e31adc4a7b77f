"""Knobs of tokenizer, model and training as dataclasses, and the named presets.

Presets (``get_config(name)``), each mirrored key for key by
``conf/pretrain/<name>.yaml`` where one exists (a test keeps the two equal):

- ``tiny``: 3.2M parameters (1.6M without the tied embedding), the CPU
  pre-training model: ~6,100 training tokens/s on this machine's 2 cores when
  nobody else runs (~7,300 with ``compile``), far less when shared
  (``benchmarks/results/lm_tiny_trainer.csv``). At ~21.5 MFLOP per token
  (6 x (1.6M + 1.6M head) + attention) that is ~130 GFLOP/s, the matmul rate
  of the 2 cores, so tens of thousands of tokens/s would need a much smaller
  model or vocabulary;
- ``tiny_moe``: ``tiny`` with a 10-expert top-1 MoE feed-forward (the expert
  count of DATAMASK's 7B MoE, seeds/000 Sec. 4.1);
- ``proxy_quick``: 1.4M parameters, a Meta-rater proxy: 524,288 tokens at
  ~10,300 tokens/s, i.e. ~50 s on 2 idle cores (minutes when shared);
- ``proxy_paper``: Meta-rater's 18M proxy (seeds/004 App. D, Table 11: hidden
  256, 2 layers, 4 heads, 4 KV heads, LLaMA tokenizer of 32,000 ids, MLP ratio
  8/3 -> 768, RoPE base 10,000, context 1,024, untied embeddings, no biases:
  exactly 18,089,216 parameters), with the paper's batch (4,194,304 tokens),
  learning rate 5e-5, Adam betas (0.9, 0.95), eps 1e-8 and 0.5B tokens.

Optimizer defaults are DATAMASK's (Sec. 4.1): constant LR 4e-4, weight decay
0.1, gradient clipping 1.0.

``parse_config(mapping)`` builds a :class:`PretrainConfig` from any mapping (a
dict, an OmegaConf ``DictConfig``): unknown keys and wrong-typed values raise
``ValueError`` naming the key; missing keys take the dataclass defaults.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from curation.lm.model import ModelConfig
from curation.lm.tokenizer import TokenizerConfig

SCHEDULES = ("constant", "cosine", "wsd")
DECAY_SHAPES = ("linear", "exp")
PRECISIONS = ("auto", "32-true", "bf16-mixed", "16-mixed", "bf16-true")


@dataclass
class TrainConfig:
    # data
    seq_len: int = 256  # tokens per training sequence (<= model.max_seq_len)
    batch_size: int = 16  # sequences per micro-batch
    accumulate_grad_batches: int = 1  # micro-batches per optimizer step
    max_tokens: Optional[int] = 1_048_576  # token budget; steps = ceil(max_tokens / tokens per step)
    max_steps: Optional[int] = None  # optimizer steps; when set, overrides max_tokens
    # adamw optimizer (DATAMASK Sec. 4.1: constant 4e-4, weight decay 0.1, clip 1.0)
    lr: float = 4e-4  # peak learning rate
    min_lr: float = 4e-5  # learning rate at the end of cosine / WSD decay
    schedule: str = "constant"  # constant | cosine | wsd (warmup-stable-decay, MiniCPM)
    warmup_steps: int = 0  # linear warmup from lr/warmup_steps to lr (steps)
    decay_fraction: float = 0.1  # wsd: last fraction of the steps spent decaying (Ultra-FineWeb: 0.1T of 1.1T)
    decay_shape: str = "exp"  # wsd decay: exp (Ultra-FineWeb App. A: exponential) | linear
    weight_decay: float = 0.1  # on matrices and embeddings only; norms and biases get none
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    grad_clip: float = 1.0  # max global gradient norm (0 = off)
    # system
    precision: str = "auto"  # auto = bf16-mixed on a bf16 GPU, else 32-true (CPU bf16 autocast measured 0.7x)
    num_threads: int = 2  # torch intra-op threads on CPU
    compile: bool = False  # torch.compile the model (~1 min warm-up on CPU, then faster steps)
    seed: int = 0  # model init and data order
    val_every_steps: Optional[int] = None  # validation loss every this many steps (None = only at the end)
    val_batches: int = 8  # batches of the validation set per evaluation
    checkpoint_every_steps: Optional[int] = None  # Lightning checkpoint every N steps (None = only at the end)

    def validate(self) -> None:
        _require(self.schedule in SCHEDULES, "train.schedule", f"must be one of {SCHEDULES}")
        _require(self.decay_shape in DECAY_SHAPES, "train.decay_shape", f"must be one of {DECAY_SHAPES}")
        _require(self.precision in PRECISIONS, "train.precision", f"must be one of {PRECISIONS}")
        budget_set = self.max_tokens is not None or self.max_steps is not None
        _require(budget_set, "train.max_tokens", "or max_steps must be set")
        _require(0.0 <= self.decay_fraction <= 1.0, "train.decay_fraction", "must be in [0, 1]")
        for key in ("seq_len", "batch_size", "accumulate_grad_batches", "num_threads", "val_batches"):
            _require(getattr(self, key) >= 1, f"train.{key}", "must be >= 1")

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.batch_size * self.accumulate_grad_batches

    def total_steps(self) -> int:
        """Optimizer steps of the run: max_steps, else the token budget rounded up to whole steps."""
        if self.max_steps is not None:
            return self.max_steps
        return max(1, math.ceil(self.max_tokens / self.tokens_per_step))


@dataclass
class PretrainConfig:
    name: str = "tiny"
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def validate(self) -> "PretrainConfig":
        self.train.validate()
        _require(
            self.train.seq_len <= self.model.max_seq_len,
            "train.seq_len",
            f"{self.train.seq_len} exceeds model.max_seq_len={self.model.max_seq_len}",
        )
        _require(
            self.tokenizer.vocab_size <= self.model.vocab_size,
            "tokenizer.vocab_size",
            f"{self.tokenizer.vocab_size} exceeds model.vocab_size={self.model.vocab_size}",
        )
        return self


def _tiny_model(**overrides: Any) -> ModelConfig:
    """ModelConfig's defaults are the tiny model: 4 layers, hidden 192, 4 query / 2 KV heads, SwiGLU 512."""
    return ModelConfig(**overrides)


PRESETS: dict[str, PretrainConfig] = {
    "tiny": PretrainConfig(name="tiny", model=_tiny_model(), train=TrainConfig()),
    "tiny_moe": PretrainConfig(
        name="tiny_moe",
        model=_tiny_model(num_experts=10, moe_top_k=1, moe_d_ff=512),
        train=TrainConfig(),
    ),
    "proxy_quick": PretrainConfig(
        name="proxy_quick",
        model=ModelConfig(vocab_size=8192, max_seq_len=128, n_layer=2, d_model=128, n_head=4, n_kv_head=2, d_ff=384),
        train=TrainConfig(seq_len=128, batch_size=16, max_tokens=524_288),  # 256 steps
    ),
    "proxy_paper": PretrainConfig(
        name="proxy_paper",
        tokenizer=TokenizerConfig(vocab_size=32000),
        model=ModelConfig(
            vocab_size=32000,
            max_seq_len=1024,
            n_layer=2,
            d_model=256,
            n_head=4,
            n_kv_head=4,
            d_ff=768,
            rope_theta=10000.0,
            qkv_bias=False,
            tie_embeddings=False,
        ),
        # 16 x 256 micro-batches of 1,024 tokens = the paper's 4,194,304-token batch.
        train=TrainConfig(
            seq_len=1024,
            batch_size=16,
            accumulate_grad_batches=256,
            max_tokens=500_000_000,
            lr=5e-5,
            min_lr=5e-5,
        ),
    ),
}


def get_config(name: str) -> PretrainConfig:
    """A fresh copy of a preset (mutating it leaves the preset intact)."""
    if name not in PRESETS:
        raise KeyError(f"unknown pretrain config {name!r}; known: {sorted(PRESETS)}")
    return dataclasses.replace(
        PRESETS[name],
        tokenizer=dataclasses.replace(PRESETS[name].tokenizer),
        model=dataclasses.replace(PRESETS[name].model),
        train=dataclasses.replace(PRESETS[name].train),
    )


# --- parsing mappings (dict / DictConfig) into the dataclasses, strictly ---


def _require(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise ValueError(f"config key {key!r}: {message}")


def _coerce(key: str, value: Any, annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Union:  # Optional[X]
        if value is None:
            return None
        return _coerce(key, value, next(a for a in args if a is not type(None)))
    if dataclasses.is_dataclass(annotation):
        return parse_dataclass(annotation, value, prefix=f"{key}.")
    if origin in (list, tuple):
        _require(isinstance(value, (list, tuple)), key, f"expected a list, got {value!r}")
        return [_coerce(key, v, args[0]) for v in value] if args else list(value)
    if origin is dict:
        _require(isinstance(value, Mapping), key, f"expected a mapping, got {value!r}")
        return {k: _coerce(f"{key}.{k}", v, args[1]) for k, v in value.items()} if args else dict(value)
    if annotation is float:
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        _require(is_number, key, f"expected a number, got {value!r}")
        return float(value)
    if annotation in (int, bool, str):
        ok = isinstance(value, annotation) and not (annotation is int and isinstance(value, bool))
        _require(ok, key, f"expected {annotation.__name__}, got {value!r}")
        return value
    return value


def parse_dataclass(cls: type, mapping: Any, prefix: str = "") -> Any:
    """Build ``cls`` from a mapping; refuse unknown keys and wrong types (naming the key)."""
    if dataclasses.is_dataclass(mapping):
        mapping = dataclasses.asdict(mapping)
    if type(mapping).__module__.startswith("omegaconf"):  # a DictConfig from Hydra: plain dicts/lists
        from omegaconf import OmegaConf

        mapping = OmegaConf.to_container(mapping, resolve=True)
    _require(isinstance(mapping, Mapping), prefix.rstrip(".") or cls.__name__, f"expected a mapping, got {mapping!r}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(mapping) - names)
    _require(not unknown, f"{prefix}{unknown[0]}" if unknown else "", f"unknown key; known: {sorted(names)}")
    kwargs = {k: _coerce(f"{prefix}{k}", v, hints[k]) for k, v in mapping.items()}
    return cls(**kwargs)


def parse_config(mapping: Mapping[str, Any] | PretrainConfig) -> PretrainConfig:
    """A validated :class:`PretrainConfig` from ``cfg.pretrain`` (or any mapping)."""
    return parse_dataclass(PretrainConfig, mapping).validate()
