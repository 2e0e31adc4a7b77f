"""The model: parameter counts, causality, GQA, MoE routing and its load-balancing loss, one training step."""

from __future__ import annotations

import pytest
import torch

from curation.lm import CausalLM, ModelConfig, get_config, load_balancing_loss
from curation.lm.model import MoE


def small_config(**overrides) -> ModelConfig:
    base = dict(vocab_size=1024, max_seq_len=64, n_layer=2, d_model=64, n_head=4, n_kv_head=2, d_ff=128)
    return ModelConfig(**{**base, **overrides})


def test_meta_rater_proxy_has_the_papers_parameter_count():
    # Meta-rater (seeds/004) App. D, Table 11: the 18M proxy has 18,089,216 parameters.
    model = CausalLM(get_config("proxy_paper").model)
    assert model.num_parameters() == 18_089_216


@pytest.mark.parametrize(("name", "low", "high"), [("tiny", 2e6, 5e6), ("proxy_quick", 1e6, 3e6)])
def test_preset_sizes(name, low, high):
    assert low <= CausalLM(get_config(name).model).num_parameters() <= high


def test_tiny_moe_active_parameters_match_the_dense_tiny():
    dense = CausalLM(get_config("tiny").model)
    moe = CausalLM(get_config("tiny_moe").model)
    router = 4 * 192 * 10  # n_layer * d_model * num_experts
    assert moe.num_active_parameters() == dense.num_parameters() + router
    assert moe.num_parameters() == dense.num_parameters() + router + 4 * 9 * 3 * 192 * 512


def test_tied_embeddings_share_one_tensor():
    model = CausalLM(small_config())
    assert model.lm_head.weight is model.embed_tokens.weight
    untied = CausalLM(small_config(tie_embeddings=False))
    assert untied.num_parameters() - model.num_parameters() == 1024 * 64


def test_future_tokens_do_not_change_past_logits():
    torch.manual_seed(0)
    model = CausalLM(small_config()).eval()
    x = torch.randint(1, 1024, (2, 20))
    y = x.clone()
    y[:, 12:] = torch.randint(1, 1024, (2, 8))
    with torch.no_grad():
        a, b = model(x).logits, model(y).logits
    torch.testing.assert_close(a[:, :12], b[:, :12])
    assert not torch.allclose(a[:, 12:], b[:, 12:])


def test_grouped_query_attention_projection_sizes():
    model = CausalLM(small_config())
    attn = model.layers[0].self_attn
    head_dim = 64 // 4
    assert attn.qkv_proj.weight.shape == ((4 + 2 * 2) * head_dim, 64)  # 4 query heads, 2 K + 2 V heads


def test_too_long_input_is_refused():
    model = CausalLM(small_config())
    with pytest.raises(ValueError, match="max_seq_len"):
        model(torch.zeros(1, 65, dtype=torch.long))


def test_invalid_head_layout_is_refused():
    with pytest.raises(ValueError, match="n_kv_head"):
        small_config(n_kv_head=3)


def test_one_training_step_lowers_the_loss_on_a_fixed_real_batch(packed):
    torch.manual_seed(0)
    model = CausalLM(small_config())
    x, y = (torch.stack(t) for t in zip(*(packed[i] for i in range(8))))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    loss = model(x, y).loss
    loss.backward()
    before = loss.detach()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    with torch.no_grad():
        after = model(x, y).loss
    assert float(before) == pytest.approx(torch.log(torch.tensor(1024.0)).item(), abs=0.1)  # ~uniform at init
    assert float(after) < float(before) - 0.05


# --- mixture of experts ---


def test_balanced_uniform_routing_gives_the_minimum_one():
    E, N = 4, 64
    probs = torch.full((N, E), 1.0 / E)
    chosen = (torch.arange(N) % E)[:, None]  # every expert receives N/E tokens
    assert float(load_balancing_loss(probs, chosen, E)) == pytest.approx(1.0)


def test_collapsed_router_scores_higher():
    E, N = 4, 64
    probs = torch.tensor([[0.97, 0.01, 0.01, 0.01]]).repeat(N, 1)
    chosen = torch.zeros(N, 1, dtype=torch.long)  # everything to expert 0
    loss = float(load_balancing_loss(probs, chosen, E))
    assert loss == pytest.approx(E * 0.97)
    assert loss > 1.0


def test_top2_dispatch_counts_each_assignment():
    E = 4
    probs = torch.full((2, E), 0.25)
    chosen = torch.tensor([[0, 1], [0, 1]])  # f = (0.5, 0.5, 0, 0), P = 0.25 each
    assert float(load_balancing_loss(probs, chosen, E)) == pytest.approx(E * (0.5 * 0.25 + 0.5 * 0.25))


@pytest.mark.parametrize(("top_k", "normalize"), [(1, False), (2, False), (2, True)])
def test_moe_equals_the_dense_weighted_sum_of_its_top_k_experts(top_k, normalize):
    torch.manual_seed(0)
    moe = MoE(small_config(num_experts=4, moe_top_k=top_k, moe_d_ff=32, moe_normalize_topk=normalize))
    x = torch.randn(2, 5, 64)
    out, aux = moe(x)
    flat = x.reshape(-1, 64)
    probs = moe.router(flat).softmax(-1)
    weights, chosen = probs.topk(top_k, dim=-1)
    if normalize:
        weights = weights / weights.sum(-1, keepdim=True)
    every = torch.stack([expert(flat) for expert in moe.experts], dim=1)  # (N, E, d)
    expected = (every.gather(1, chosen[..., None].expand(-1, -1, 64)) * weights[..., None]).sum(1)
    torch.testing.assert_close(out.reshape(-1, 64), expected, rtol=1e-5, atol=1e-6)
    assert float(aux.detach()) >= 1.0 - 1e-6  # top-k of the router's own argmax: never below the balanced minimum


def test_moe_aux_loss_reaches_the_router_and_the_total_loss(packed):
    torch.manual_seed(0)
    model = CausalLM(small_config(num_experts=4, moe_top_k=1, moe_aux_loss_coef=0.5))
    x, y = packed[0]
    out = model(x[None], y[None])
    aux, lm, total = (float(t.detach()) for t in (out.aux_loss, out.lm_loss, out.loss))
    assert aux >= 1.0 - 1e-6
    assert total == pytest.approx(lm + 0.5 * aux, rel=1e-6)
    out.aux_loss.backward()
    assert model.layers[0].mlp.router.weight.grad.abs().sum() > 0


def test_greedy_generation_is_deterministic_and_stops():
    torch.manual_seed(0)
    model = CausalLM(small_config()).eval()
    prompt = torch.randint(1, 1024, (1, 5))
    a = model.generate(prompt, max_new_tokens=6)
    b = model.generate(prompt, max_new_tokens=6)
    assert a.shape == (1, 11) and torch.equal(a, b)
    first = int(a[0, 5])
    stopped = model.generate(prompt, max_new_tokens=6, stop_ids={first})
    assert stopped.shape == (1, 6)
