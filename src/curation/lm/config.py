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
dict, an OmegaConf ``DictConfig``) with :func:`curation.configuration.parse_dataclass`:
unknown keys, wrong-typed and out-of-range values raise ``ConfigError`` (a
``ValueError``) naming the key; missing keys take the dataclass defaults. The
range checks run on construction (``__post_init__``), so a config built by hand
is checked too.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from curation.configuration import ConfigError, at_least, in_range, one_of, parse_dataclass
from curation.lm.model_config import ModelConfig
from curation.lm.tokenizer import TokenizerConfig

_MISSING = object()
SCHEDULES = ("constant", "cosine", "wsd")
DECAY_SHAPES = ("linear", "exp")
PRECISIONS = ("auto", "32-true", "bf16-mixed", "16-mixed", "bf16-true")


def _require(ok: bool, key: str, message: str, value: Any = _MISSING) -> None:
    if not ok:
        raise ConfigError(key, message, value) if value is not _MISSING else ConfigError(key, message)


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

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Range checks (keys relative to ``train``); run on construction and after in-place edits."""
        one_of("schedule", self.schedule, SCHEDULES)
        one_of("decay_shape", self.decay_shape, DECAY_SHAPES)
        one_of("precision", self.precision, PRECISIONS)
        for key in ("seq_len", "batch_size", "accumulate_grad_batches", "num_threads", "val_batches"):
            at_least(key, getattr(self, key), 1)
        at_least("max_tokens", self.max_tokens, 1, optional=True)
        at_least("max_steps", self.max_steps, 1, optional=True)
        _require(self.max_tokens is not None or self.max_steps is not None, "max_tokens",
                 "or max_steps must be set (both are null)")
        at_least("lr", self.lr, 0, strict=True)
        at_least("min_lr", self.min_lr, 0)
        at_least("warmup_steps", self.warmup_steps, 0)
        in_range("decay_fraction", self.decay_fraction, 0, 1)
        at_least("weight_decay", self.weight_decay, 0)
        in_range("beta1", self.beta1, 0, 1, high_open=True)
        in_range("beta2", self.beta2, 0, 1, high_open=True)
        at_least("eps", self.eps, 0, strict=True)
        at_least("grad_clip", self.grad_clip, 0)
        at_least("val_every_steps", self.val_every_steps, 1, optional=True)
        at_least("checkpoint_every_steps", self.checkpoint_every_steps, 1, optional=True)

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.batch_size * self.accumulate_grad_batches

    def total_steps(self) -> int:
        """Optimizer steps of the run: max_steps, else the token budget rounded up to whole steps."""
        if self.max_steps is not None:
            return self.max_steps
        return max(1, math.ceil(self.max_tokens / self.tokens_per_step))


def lr_at(step: int, cfg: TrainConfig, total_steps: int) -> float:
    """Learning rate of optimizer step ``step`` (0-based) in a run of ``total_steps``.

    constant: lr after warmup (DATAMASK Sec. 4.1). cosine: lr -> min_lr over the
    steps after warmup. wsd: lr until the last ``decay_fraction`` of the steps,
    then exp (lr * (min_lr/lr)^progress, Ultra-FineWeb App. A) or linear decay to min_lr.
    """
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return cfg.lr
    if cfg.schedule == "cosine":
        span = max(1, total_steps - cfg.warmup_steps - 1)
        progress = min(1.0, (step - cfg.warmup_steps) / span)
        return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1.0 + math.cos(math.pi * progress))
    if cfg.schedule == "wsd":
        decay_steps = round(cfg.decay_fraction * total_steps)
        decay_start = total_steps - decay_steps
        if step < decay_start or decay_steps == 0:
            return cfg.lr
        progress = min(1.0, (step - decay_start + 1) / decay_steps)
        if cfg.decay_shape == "exp":
            return cfg.lr * (cfg.min_lr / cfg.lr) ** progress
        return cfg.lr + (cfg.min_lr - cfg.lr) * progress
    raise ValueError(f"unknown schedule {cfg.schedule!r}")


@dataclass
class PretrainConfig:
    name: str = "tiny"
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> "PretrainConfig":
        """Range checks of every part (keys relative to ``pretrain``); returns ``self``."""
        try:
            self.train.validate()
        except ConfigError as err:
            raise err.under("train") from None
        t, m = self.tokenizer, self.model
        at_least("tokenizer.vocab_size", t.vocab_size, 258)  # 256 byte symbols + <|endoftext|> + one merge
        at_least("tokenizer.min_frequency", t.min_frequency, 1)
        at_least("tokenizer.max_docs", t.max_docs, 1, optional=True)
        for key in ("vocab_size", "max_seq_len", "n_layer", "d_model", "n_head", "n_kv_head", "d_ff", "moe_top_k"):
            at_least(f"model.{key}", getattr(m, key), 1)
        at_least("model.num_experts", m.num_experts, 0)
        at_least("model.moe_d_ff", m.moe_d_ff, 1, optional=True)
        at_least("model.rope_theta", m.rope_theta, 0, strict=True)
        at_least("model.norm_eps", m.norm_eps, 0, strict=True)
        at_least("model.moe_aux_loss_coef", m.moe_aux_loss_coef, 0)
        _require(self.train.seq_len <= m.max_seq_len, "train.seq_len",
                 f"must be <= model.max_seq_len={m.max_seq_len}", self.train.seq_len)
        _require(t.vocab_size <= m.vocab_size, "tokenizer.vocab_size",
                 f"must be <= model.vocab_size={m.vocab_size}", t.vocab_size)
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
    # ~4x the tiny model (12.6M parameters, 9.4M without the tied embedding, ~3.9x its FLOPs per token): the
    # second size of `experiment=decide` (decide.sizes=[tiny,small]), trained on the same tokens
    "small": PretrainConfig(
        name="small",
        model=_tiny_model(n_layer=6, d_model=384, n_head=6, n_kv_head=2, d_ff=1024),
        train=TrainConfig(),
    ),
    # ~29M parameters (25.2M without the tied embedding, ~13x the tiny model's FLOPs per token): the third size
    # of the decision check, trained on a GPU (benchmarks/pretraining/gpu_cells.py; issue #38 item 4)
    "medium": PretrainConfig(
        name="medium",
        model=_tiny_model(n_layer=8, d_model=512, n_head=8, n_kv_head=4, d_ff=1536),
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


def parse_config(mapping: Mapping[str, Any] | PretrainConfig, path: str = "") -> PretrainConfig:
    """A validated :class:`PretrainConfig` from ``cfg.pretrain`` (or any mapping)."""
    return parse_dataclass(PretrainConfig, mapping, path=path).validate()
