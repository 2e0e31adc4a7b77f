"""A ``curate-megatron train`` checkpoint -> this project's ``CausalLM`` folder (``curate-megatron export``).

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
import os
import uuid
from pathlib import Path
from typing import Any, Optional

from curation.pretraining.cpu import _ensure_rng_tracker, megatron_on_cpu
from curation.pretraining.megatron import MODELS
from curation.pretraining.train import LATEST_FILE, _latest, _model_overrides


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
