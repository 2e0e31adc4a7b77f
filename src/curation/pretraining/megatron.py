"""Megatron-core model configs for the paper's scale (DATAMASK Sec. 4.1).

Two models, built with megatron-core's ``TransformerConfig`` and ``GPTModel``:

``qwen2_5_1_5b``  the Qwen-2.5-1.5B dense architecture: 28 layers, hidden 1536,
                  12 query heads, 2 KV heads (GQA), SwiGLU FFN 8960, RMSNorm,
                  RoPE base 1e6, QKV bias, tied embeddings, vocab 151,936.
                  About 1.54B parameters (1.31B non-embedding).

``moe_7b``        "a 7B MoE model, which consists of 10 experts and has 680M
                  active parameters per token per forward pass". With 10 experts
                  and top-1 routing, total <= 10 x active, so 680M can only be the
                  *non-embedding* active count; we define "active" that way (the
                  token's attention + its one expert's SwiGLU + router + norms,
                  excluding input embedding and output layer). Hitting ~7B total
                  and ~0.68B active at once forces a thin attention share, since
                  total - embeddings ~= 10 x active - 9 x attention. We use
                  12 layers, hidden 1536, 12 heads / 2 KV heads, expert FFN
                  11,392, top-1, untied embeddings over the Qwen vocab:
                  ~6.83B total, ~0.70B non-embedding active (both within 2.5%).

Training settings of Sec. 4.1 (:data:`TRAINING`): constant LR 4e-4, Adam, global
batch 1536, sequence 8192, weight decay 0.1, clip 1.0; budgets 400B tokens
(dense) and 300B (MoE).

Building needs only megatron-core (optional extra ``pip install -e .[megatron]``)
and torch; :func:`count_parameters` builds on the ``meta`` device (no memory).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class MegatronModelSpec:
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_query_groups: int  # KV heads (GQA)
    ffn_hidden_size: int  # SwiGLU inner size (per expert for MoE)
    vocab_size: int = 151_936  # Qwen2.5 tokenizer
    max_sequence_length: int = 8192  # Sec. 4.1
    rotary_base: int = 1_000_000
    add_qkv_bias: bool = True
    tie_embeddings: bool = True
    num_moe_experts: int | None = None
    moe_router_topk: int = 1
    norm_epsilon: float = 1e-6


MODELS: dict[str, MegatronModelSpec] = {
    "qwen2_5_1_5b": MegatronModelSpec(num_layers=28, hidden_size=1536, num_attention_heads=12,
                                      num_query_groups=2, ffn_hidden_size=8960),
    "moe_7b": MegatronModelSpec(num_layers=12, hidden_size=1536, num_attention_heads=12, num_query_groups=2,
                                ffn_hidden_size=11392, tie_embeddings=False, add_qkv_bias=False,
                                num_moe_experts=10, moe_router_topk=1),
    # CPU-sized siblings for the loop's own checks (tests, `curate-megatron train --device cpu`): the layout of
    # conf/pretrain/tiny.yaml (Qwen2-style, GQA 2:1, SwiGLU, RoPE 1e4, tied embeddings) at 2 layers.
    "tiny_dense": MegatronModelSpec(num_layers=2, hidden_size=128, num_attention_heads=4, num_query_groups=2,
                                    ffn_hidden_size=384, vocab_size=8192, max_sequence_length=256,
                                    rotary_base=10_000),
    "tiny_moe": MegatronModelSpec(num_layers=2, hidden_size=128, num_attention_heads=4, num_query_groups=2,
                                  ffn_hidden_size=256, vocab_size=8192, max_sequence_length=256, rotary_base=10_000,
                                  add_qkv_bias=False, num_moe_experts=4, moe_router_topk=1),
}

# Targets the tests check counts against (within 5%).
TARGETS = {"qwen2_5_1_5b": {"total": 1.54e9}, "moe_7b": {"total": 7.0e9, "active_non_embedding": 0.68e9}}


@dataclass(frozen=True)
class TrainingSettings:
    """DATAMASK Sec. 4.1."""

    lr: float = 4e-4  # constant schedule
    optimizer: str = "adam"
    global_batch_size: int = 1536  # sequences
    seq_length: int = 8192
    weight_decay: float = 0.1
    clip_grad: float = 1.0
    token_budget: dict[str, float] = field(default_factory=lambda: {"qwen2_5_1_5b": 400e9, "moe_7b": 300e9})


TRAINING = TrainingSettings()


def transformer_config(name: str, **overrides: Any):
    """The megatron-core ``TransformerConfig`` of model ``name``."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    spec = MODELS[name]
    kwargs: dict[str, Any] = dict(
        num_layers=spec.num_layers,
        hidden_size=spec.hidden_size,
        num_attention_heads=spec.num_attention_heads,
        num_query_groups=spec.num_query_groups,
        ffn_hidden_size=spec.ffn_hidden_size,
        normalization="RMSNorm",
        layernorm_epsilon=spec.norm_epsilon,
        gated_linear_unit=True,  # SwiGLU
        activation_func=_silu(),
        add_bias_linear=False,
        add_qkv_bias=spec.add_qkv_bias,
        bias_dropout_fusion=False,
        apply_rope_fusion=False,
        masked_softmax_fusion=False,
        gradient_accumulation_fusion=False,
        persist_layer_norm=False,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        use_cpu_initialization=True,
        pipeline_dtype=None,
    )
    if spec.num_moe_experts:
        kwargs.update(
            num_moe_experts=spec.num_moe_experts,
            moe_router_topk=spec.moe_router_topk,
            # top-1 routing needs the softmax before top-k, else every weight is 1.
            moe_router_pre_softmax=spec.moe_router_topk == 1,
            moe_router_load_balancing_type="aux_loss",
            moe_aux_loss_coeff=1e-2,
            moe_token_dispatcher_type="alltoall",
            moe_grouped_gemm=False,
        )
    kwargs.update(overrides)
    return TransformerConfig(**kwargs)


def _silu():
    import torch.nn.functional as F

    return F.silu


def _ensure_model_parallel() -> None:
    """Megatron's layers ask parallel_state for their group; a 1-rank gloo group suffices."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    if parallel_state.model_parallel_is_initialized():
        return
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        dist.init_process_group("gloo", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)


def build_model(name: str, *, device: str = "meta", **config_overrides: Any):
    """Build ``GPTModel`` for ``name``; on ``meta`` no memory is used (for counting and checks)."""
    import torch
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    _ensure_model_parallel()
    spec = MODELS[name]
    if spec.num_moe_experts:
        from megatron.core.transformer.moe import moe_utils

        if not hasattr(moe_utils, "te_general_gemm"):
            # megatron-core 0.16.1 imports te_general_gemm only with Transformer Engine, yet the router's
            # gating linear tests `te_general_gemm is not None`: NameError at the first MoE forward. None
            # is the value the test expects without Transformer Engine (then it uses torch.mm).
            moe_utils.te_general_gemm = None
    if spec.num_moe_experts and not torch.cuda.is_available():
        # The all-to-all dispatcher opens a CUDA stream at construction; all-gather
        # builds on CPU and has the same parameters.
        config_overrides.setdefault("moe_token_dispatcher_type", "allgather")
    config = transformer_config(name, **config_overrides)
    layer_spec = get_gpt_layer_local_spec(num_experts=spec.num_moe_experts, normalization="RMSNorm")
    with torch.device(device):
        return GPTModel(
            config=config,
            transformer_layer_spec=layer_spec,
            vocab_size=spec.vocab_size,
            max_sequence_length=spec.max_sequence_length,
            share_embeddings_and_output_weights=spec.tie_embeddings,
            position_embedding_type="rope",
            rotary_base=spec.rotary_base,
        )


def count_parameters(name: str, **config_overrides: Any) -> tuple[int, int]:
    """``(total, active_non_embedding)`` parameters of model ``name``, from the built model.

    Active non-embedding: every parameter outside the input embedding and the
    output layer, with each MoE layer's experts counted ``topk / num_experts``
    times (a token passes through ``topk`` of them).
    """
    model = build_model(name, device="meta", **config_overrides)
    spec = MODELS[name]
    total = 0
    active = 0.0
    seen: set[int] = set()
    for pname, param in model.named_parameters():
        if id(param) in seen:  # tied embeddings are one tensor
            continue
        seen.add(id(param))
        n = param.numel()
        total += n
        if pname.startswith(("embedding.", "output_layer.")):
            continue
        if ".experts." in pname and spec.num_moe_experts:
            active += n * spec.moe_router_topk / spec.num_moe_experts
        else:
            active += n
    return total, int(round(active))


def describe(name: str) -> dict[str, Any]:
    total, active = count_parameters(name)
    return {"name": name, **asdict(MODELS[name]), "total_parameters": total, "active_non_embedding": active}
