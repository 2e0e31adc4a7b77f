"""The tiny LM's architecture config (:class:`ModelConfig`), apart from the model so that reading a config
(``curate``'s composition check, ``curation.lm.config``) does not import torch (~1.1 s of every command)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from curation.configuration import at_least


@dataclass
class ModelConfig:
    """Defaults are the ``tiny`` preset (curation.lm.config): ~3.2M parameters."""

    vocab_size: int = 8192  # tokens; must cover the tokenizer's ids
    max_seq_len: int = 256  # tokens; length of the RoPE tables (longest input)
    n_layer: int = 4  # transformer blocks
    d_model: int = 192  # hidden size
    n_head: int = 4  # query heads
    n_kv_head: int = 2  # key/value heads (GQA); must divide n_head; = n_head is plain multi-head
    d_ff: int = 512  # SwiGLU hidden size of the dense FFN
    rope_theta: float = 10000.0  # RoPE base (Qwen2.5 uses 1e6 for 32k contexts; 1e4 suits <= 1k)
    norm_eps: float = 1e-6  # RMSNorm epsilon (Qwen2 value)
    qkv_bias: bool = True  # bias on q/k/v projections (Qwen2: yes; LLaMA / Meta-rater proxy: no)
    tie_embeddings: bool = True  # share the input embedding and the output head (Qwen2 <= 3B do)
    # mixture of experts (0 experts = dense FFN in every block)
    num_experts: int = 0  # experts per MoE layer
    moe_top_k: int = 1  # experts per token
    moe_d_ff: Optional[int] = None  # SwiGLU hidden size of one expert (None = d_ff)
    moe_normalize_topk: bool = False  # renormalise the k routing weights to sum to 1
    moe_aux_loss_coef: float = 0.01  # alpha of the Switch load-balancing loss (Fedus et al., 2021)

    def __post_init__(self) -> None:
        for key in ("d_model", "n_head", "n_kv_head"):  # divisors below; the other sizes: PretrainConfig.validate
            at_least(key, getattr(self, key), 1)
        if self.d_model % self.n_head:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_head={self.n_head}")
        if self.n_head % self.n_kv_head:
            raise ValueError(f"n_head={self.n_head} is not divisible by n_kv_head={self.n_kv_head}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} must be even for RoPE")
        if self.num_experts and not 1 <= self.moe_top_k <= self.num_experts:
            raise ValueError(f"moe_top_k={self.moe_top_k} must be in [1, num_experts={self.num_experts}]")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def expert_d_ff(self) -> int:
        return self.moe_d_ff or self.d_ff
