"""A Qwen2-style decoder-only language model in one file, read top to bottom.

Parts (RMSNorm, rotary embeddings, grouped-query attention, SwiGLU, a top-k
mixture of experts with its load-balancing loss) -> ``ModelConfig`` -> ``CausalLM``.

This is the CPU-sized sibling of the models DATAMASK trains (seeds/000 Sec. 4.1:
Qwen-2.5-1.5B dense and a 7B MoE with 10 experts) and of Meta-rater's proxy
models (seeds/004 App. D, Table 11: 18M parameters, 2 layers, hidden 256, 4 heads).

References:
1) nanoGPT, karpathy/nanoGPT ``model.py``: file layout, init, ``generate``.
2) Qwen2 (Yang et al., 2024), HF transformers ``modeling_qwen2.py``: pre-norm
   RMSNorm, RoPE (rotate-half form), SwiGLU, GQA, bias on q/k/v only, tied
   input/output embeddings in the small models.
3) RoFormer (Su et al., 2021): rotary position embeddings.
4) GLU Variants Improve Transformer (Shazeer, 2020): SwiGLU.
5) GQA (Ainslie et al., 2023): several query heads share one key/value head.
6) Switch Transformer (Fedus et al., 2021) Eq. 4-6: auxiliary load-balancing loss;
   top-k routing as in Shazeer et al. (2017) and Mixtral/Qwen-MoE.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch
import torch.nn as nn
from torch.nn import functional as F

from curation.lm.model_config import ModelConfig  # noqa: F401  (its home: torch-free, for the config check)


class RMSNorm(nn.Module):
    """Root-mean-square layer norm (Zhang & Sennrich, 2019): no mean, no bias."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.size(-1),), self.weight, self.eps)


def rope_tables(seq_len: int, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables (seq_len, head_dim/2) of RoPE: angle of position t, frequency i = t * theta^(-2i/hd)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)  # (hd/2,)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)  # (T, hd/2)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair (x_i, x_{i+hd/2}) of x (B, nh, T, hd) by its position's angle.

    The rotate-half layout of Qwen2/LLaMA in HF (``x*cos + rotate_half(x)*sin``),
    written on the two halves so the elementwise work is half as large.
    """
    x1, x2 = x.chunk(2, dim=-1)  # (B, nh, T, hd/2) each
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Attention(nn.Module):
    """Causal grouped-query self-attention with RoPE.

    q, k and v are one fused matmul (Megatron's ``linear_qkv``; Qwen2's
    q_proj | k_proj | v_proj concatenated) because on a CPU one larger matmul is
    faster than three small ones. Qwen2 puts a bias on q/k/v and none on o.
    """

    def __init__(self, config: "ModelConfig"):
        super().__init__()
        self.n_head = config.n_head
        self.n_kv_head = config.n_kv_head
        self.head_dim = config.head_dim
        q_dim, kv_dim = config.n_head * self.head_dim, config.n_kv_head * self.head_dim
        self.qkv_proj = nn.Linear(config.d_model, q_dim + 2 * kv_dim, bias=config.qkv_bias)
        self.o_proj = nn.Linear(q_dim, config.d_model, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                attn_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """cos, sin: (T, hd/2) for positions 0..T-1, or (B, 1, T, hd/2) for given positions;
        attn_mask: None = causal, else (B, 1, T, T) bool, True where a query may attend to a key."""
        B, T, _ = x.shape
        hd = self.head_dim
        q, k, v = self.qkv_proj(x).split([self.n_head * hd, self.n_kv_head * hd, self.n_kv_head * hd], dim=-1)
        q = q.view(B, T, self.n_head, hd).transpose(1, 2)  # (B, nh, T, hd)
        k = k.view(B, T, self.n_kv_head, hd).transpose(1, 2)  # (B, nkv, T, hd)
        v = v.view(B, T, self.n_kv_head, hd).transpose(1, 2)  # (B, nkv, T, hd)
        if cos.dim() == 2:
            cos, sin = cos[:T], sin[:T]
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        # GQA: each group of n_head // n_kv_head query heads reads one K/V head.
        gqa = self.n_kv_head != self.n_head
        if attn_mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, enable_gqa=gqa)
        y = y.transpose(1, 2).reshape(B, T, self.n_head * hd)  # re-assemble heads side by side
        return self.o_proj(y)


class MLP(nn.Module):
    """SwiGLU feed-forward: down(silu(gate(x)) * up(x)); gate and up fused in one matmul."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.d_ff = d_ff
        self.gate_up_proj = nn.Linear(d_model, 2 * d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.d_ff, dim=-1)
        return self.down_proj(F.silu(gate) * up)


def load_balancing_loss(router_probs: torch.Tensor, chosen: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Switch Transformer auxiliary loss (Fedus et al., 2021, Eq. 4-6): ``E * sum_i f_i * P_i``.

    router_probs: (N, E) softmax of the router over experts, per token.
    chosen: (N, k) experts each token is dispatched to.
    f_i is the fraction of the N*k dispatches that go to expert i (not
    differentiable), P_i the mean router probability of expert i (carries the
    gradient). Perfectly balanced routing with uniform probabilities gives 1.0,
    the minimum; a router that sends everything to one expert with probability
    ~1 gives ~E.
    """
    dispatch = F.one_hot(chosen, num_experts).sum(dim=(0, 1)).to(router_probs.dtype)  # (E,)
    fraction_dispatched = dispatch / chosen.numel()  # f_i, Eq. 5
    mean_prob = router_probs.mean(dim=0)  # P_i, Eq. 6
    return num_experts * torch.sum(fraction_dispatched * mean_prob)  # Eq. 4 (without alpha)


class MoE(nn.Module):
    """Top-k mixture of SwiGLU experts (a drop-in for MLP that also returns the aux loss).

    Each token goes to the k experts with the highest router probability; their
    outputs are summed, weighted by those probabilities (renormalised over the k
    when ``moe_normalize_topk``, as Mixtral does; Qwen-MoE and Switch do not).
    The loop over experts is the readable form; it computes only the tokens each
    expert receives.
    """

    def __init__(self, config: "ModelConfig"):
        super().__init__()
        self.num_experts = config.num_experts
        self.top_k = config.moe_top_k
        self.normalize_topk = config.moe_normalize_topk
        self.router = nn.Linear(config.d_model, config.num_experts, bias=False)
        self.experts = nn.ModuleList(MLP(config.d_model, config.expert_d_ff) for _ in range(config.num_experts))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        flat = x.reshape(-1, x.size(-1))  # (N, d) with N = B*T tokens
        probs = self.router(flat).float().softmax(dim=-1)  # (N, E); routing in fp32
        weights, chosen = probs.topk(self.top_k, dim=-1)  # (N, k) each
        if self.normalize_topk:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            token, slot = torch.where(chosen == e)  # tokens dispatched to expert e, and in which of their k slots
            if token.numel() == 0:
                continue
            out.index_add_(0, token, expert(flat[token]) * weights[token, slot, None].to(flat.dtype))
        return out.view_as(x), load_balancing_loss(probs, chosen, self.num_experts)


class Block(nn.Module):
    """Pre-norm transformer layer: x + attn(norm(x)), then x + ffn(norm(x))."""

    def __init__(self, config: "ModelConfig"):
        super().__init__()
        self.input_layernorm = RMSNorm(config.d_model, config.norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.d_model, config.norm_eps)
        self.is_moe = config.num_experts > 0
        self.mlp = MoE(config) if self.is_moe else MLP(config.d_model, config.d_ff)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                attn_mask: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns the new residual stream and this layer's load-balancing loss (0 if dense)."""
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, attn_mask)
        if self.is_moe:
            h, aux = self.mlp(self.post_attention_layernorm(x))
        else:
            h, aux = self.mlp(self.post_attention_layernorm(x)), x.new_zeros((), dtype=torch.float32)
        return x + h, aux


class ModelOutput(NamedTuple):
    logits: torch.Tensor  # (B, T, vocab)
    loss: Optional[torch.Tensor]  # lm_loss + moe_aux_loss_coef * aux_loss; None without targets
    lm_loss: Optional[torch.Tensor]  # mean next-token cross-entropy (nats)
    aux_loss: torch.Tensor  # mean MoE load-balancing loss over MoE layers (0 for dense)


class CausalLM(nn.Module):
    """Decoder-only LM: embed -> n_layer Blocks -> RMSNorm -> lm_head."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.norm = RMSNorm(config.d_model, config.norm_eps)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        cos, sin = rope_tables(config.max_seq_len, config.head_dim, config.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)  # recomputed, so not in checkpoints
        self.register_buffer("rope_sin", sin, persistent=False)
        self.apply(self._init_weights)
        # GPT-2 scaled init of the projections that write into the residual stream
        # (keeps its variance independent of depth).
        for name, p in self.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        """Total parameters (tied weights counted once); optionally without the embedding/head."""
        n = sum(p.numel() for p in self.parameters())
        if exclude_embeddings:
            n -= self.embed_tokens.weight.numel()
            if not self.config.tie_embeddings:
                n -= self.lm_head.weight.numel()
        return n

    def num_active_parameters(self, exclude_embeddings: bool = False) -> int:
        """Parameters used per token: an MoE layer counts its router and top_k of its experts."""
        n = self.num_parameters(exclude_embeddings)
        c = self.config
        if c.num_experts:
            per_expert = 3 * c.d_model * c.expert_d_ff
            n -= c.n_layer * (c.num_experts - c.moe_top_k) * per_expert
        return n

    def forward(
        self, idx: torch.Tensor, targets: Optional[torch.Tensor] = None, last_only: bool = False,
        position_ids: Optional[torch.Tensor] = None, attn_mask: Optional[torch.Tensor] = None,
        logits_at: Optional[torch.Tensor] = None,
    ) -> ModelOutput:
        """idx, targets: (B, T) token ids; targets < 0 are ignored in the loss.

        last_only: compute logits for the last position only, (B, 1, vocab), as
        nanoGPT does at inference (the vocab-sized head dominates a small model).

        For several sequences packed into one row (evaluation: a prompt shared by
        its answer choices, :mod:`curation.evaluation.scoring`): ``position_ids``
        (B, T) are each token's RoPE position, ``attn_mask`` (B, 1, T, T) bool
        says which keys each query sees (None: causal), and ``logits_at`` (B, T)
        bool picks the positions whose logits are computed, returned as
        (N, vocab) in row-major order (the head costs as much as the 4 layers of
        ``tiny``, so only the scored positions pay for it).
        """
        T = idx.size(1)
        longest = T if position_ids is None else int(position_ids.max()) + 1
        if longest > self.config.max_seq_len:
            raise ValueError(f"sequence of {longest} tokens exceeds max_seq_len={self.config.max_seq_len}")
        x = self.embed_tokens(idx)  # (B, T, d)
        if position_ids is None:
            cos, sin = self.rope_cos, self.rope_sin  # (max_seq_len, hd/2); each layer takes the first T rows
        else:  # (B, 1, T, hd/2): one table row per token, broadcast over the heads
            cos, sin = self.rope_cos[position_ids][:, None], self.rope_sin[position_ids][:, None]
        aux = x.new_zeros((), dtype=torch.float32)
        for layer in self.layers:
            x, layer_aux = layer(x, cos, sin, attn_mask)
            aux = aux + layer_aux
        aux = aux / self.config.n_layer if self.config.num_experts else aux
        if last_only:
            x = x[:, -1:, :]
        if logits_at is not None:
            x = x[logits_at]  # (N, d): RMSNorm and the head act per position, so selecting first changes nothing
        logits = self.lm_head(self.norm(x))  # (B, T, vocab); (B, 1, vocab) with last_only; (N, vocab) with logits_at
        if targets is None:
            return ModelOutput(logits, None, None, aux)
        lm_loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-100)
        loss = lm_loss + self.config.moe_aux_loss_coef * aux if self.config.num_experts else lm_loss
        return ModelOutput(logits, loss, lm_loss, aux)

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 0.0,
        top_k: Optional[int] = None,
        stop_ids: Optional[set[int]] = None,
        generator: Optional[torch.Generator] = None,
    ) -> torch.Tensor:
        """Extend idx (B, T) by up to max_new_tokens; temperature 0 = greedy (argmax).

        No KV cache: each step re-runs the (cropped) context, which is fine for
        the few-token answers of short-answer evaluation. Stops early once every
        row has produced a token in ``stop_ids``.
        """
        done = torch.zeros(idx.size(0), dtype=torch.bool, device=idx.device)
        for _ in range(max_new_tokens):
            context = idx[:, -self.config.max_seq_len :]
            logits = self(context, last_only=True).logits[:, -1, :].float()  # (B, vocab)
            if temperature <= 0:
                next_id = logits.argmax(dim=-1, keepdim=True)
            else:
                logits = logits / temperature
                if top_k is not None:
                    v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                    logits[logits < v[:, [-1]]] = -float("inf")
                next_id = torch.multinomial(logits.softmax(dim=-1), num_samples=1, generator=generator)
            idx = torch.cat([idx, next_id], dim=1)
            if stop_ids:
                done |= torch.isin(next_id.squeeze(1), torch.tensor(sorted(stop_ids), device=idx.device))
                if bool(done.all()):
                    break
        return idx
