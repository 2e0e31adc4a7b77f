"""The tokenlearn-trained static model (embedding=static_trained): training, folding, the shipped model.

Real parts: the packaged MiniLM is the teacher, the distilled static model the base, the shipped
``models/static-tokenlearn-minilm`` the model under test, on bundled-corpus documents.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from curation.embedding import EmbedderConfig, SentenceEmbedder, make_embedder, model_fingerprint
from curation.embedding.tokenlearn import EVAL_SOURCES, HOLDOUT_FRACTION, TokenlearnConfig, is_held_out, \
    train_tokenlearn

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "data" / "01_raw" / "corpus"
SHIPPED = ROOT / "models" / "static-tokenlearn-minilm"
TRAINED = dict(backend="static", dim=256, max_seq_length=256, show_progress=False, device="cpu",
               static_model="models/static-tokenlearn-minilm")
DISTILLED = dict(backend="static", dim=256, pca_dims=256, max_seq_length=256, show_progress=False, device="cpu")
TEACHER = dict(show_progress=False, device="cpu", batch_size=16)


def _corpus() -> pd.DataFrame:
    return pd.concat([pd.read_parquet(f, columns=["id", "text", "source"]) for f in sorted(CORPUS.glob("corpus-*.parquet"))],
                     ignore_index=True)


def _pair_spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    iu = np.triu_indices(len(a), 1)
    return float(spearmanr((a @ a.T)[iu], (b @ b.T)[iu]).statistic)


def test_the_held_out_documents_are_the_eval_labels_and_a_fifth_of_the_rest():
    docs = _corpus()
    held = is_held_out(docs["id"], docs["source"])
    assert held[docs["source"].isin(EVAL_SOURCES).to_numpy()].all()
    rest = ~docs["source"].isin(EVAL_SOURCES).to_numpy()
    assert abs(held[rest].mean() - HOLDOUT_FRACTION) < 0.02
    # a function of the id alone: the same answer in any order
    shuffled = docs.sample(frac=1.0, random_state=0)
    assert (is_held_out(shuffled["id"], shuffled["source"]) == held[shuffled.index]).all()


def test_the_shipped_model_was_trained_on_exactly_the_other_documents():
    prov = json.loads((SHIPPED / "provenance.json").read_text())
    docs = _corpus()
    train_ids = docs["id"][~is_held_out(docs["id"], docs["source"])]
    assert prov["corpus"]["train_ids_sha256"] == hashlib.sha256("\n".join(train_ids).encode()).hexdigest()
    assert prov["corpus"]["train_documents"] == len(train_ids)
    # trained better than it started, on the held-out documents
    m = prov["metrics"]
    assert m["held_out_pair_cos_spearman_trained"] > m["held_out_pair_cos_spearman_distilled"] + 0.2
    assert m["int8_1_minus_cos_max"] < 1e-3


def test_the_shipped_model_keeps_minilm_geometry_on_documents_it_never_saw(minilm):
    docs = _corpus()
    held = docs[is_held_out(docs["id"], docs["source"]) & ~docs["source"].isin(EVAL_SOURCES)]
    texts = held.sample(64, random_state=1)["text"].tolist()
    ref = SentenceEmbedder(EmbedderConfig(**TEACHER), model=minilm).encode(texts).embeddings
    trained = make_embedder(EmbedderConfig(**TRAINED)).encode(texts).embeddings
    distilled = make_embedder(EmbedderConfig(**DISTILLED)).encode(texts).embeddings
    rho_trained, rho_distilled = _pair_spearman(ref, trained), _pair_spearman(ref, distilled)
    # measured on these 64: see the assertion message; on 1,500 held-out documents 0.74 vs 0.38
    assert rho_trained > rho_distilled + 0.15 and rho_trained > 0.6, (rho_trained, rho_distilled)


@pytest.mark.slow  # ~9 s: a training run
def test_training_folds_the_head_into_the_rows(minilm):
    """The trained table alone (no head) encodes a document as the trained model did: the head is a
    linear map, and a linear map commutes with the mean of the token rows."""
    from curation.embedding.config import prepare_texts
    from curation.embedding.static import load_static_model

    docs = _corpus().sample(160, random_state=2).reset_index(drop=True)
    targets = SentenceEmbedder(EmbedderConfig(**TEACHER | {"max_seq_length": 128}), model=minilm) \
        .encode(docs["text"].tolist()).embeddings
    base_embedder = make_embedder(EmbedderConfig(**DISTILLED))
    base = load_static_model(base_embedder.folder)
    rows = base.embedding.astype(np.float32) * base.weights[:, None]
    ids = base.tokenize(prepare_texts(docs["text"].tolist(), base_embedder.cfg), max_length=128)
    cfg = TokenlearnConfig(epochs=3, patience=3, val_fraction=0.25, dims=None, max_length=128, threads=1)
    res = train_tokenlearn(rows, ids, targets, docs["id"].tolist(), cfg, log=lambda *_: None)
    assert res.vectors.shape == (rows.shape[0], 384)  # the teacher's width: nothing projected
    val = np.array([int(hashlib.sha256(f"tokenlearn-val|{k}".encode()).hexdigest()[:8], 16) / 2**32 < 0.25
                    for k in docs["id"]])
    enc = np.stack([res.vectors[ids[i]].mean(0) for i in np.flatnonzero(val)])
    enc /= np.linalg.norm(enc, axis=1, keepdims=True)
    assert np.mean((enc * targets[val]).sum(1)) == pytest.approx(res.metrics["val_cos_trained"], abs=1e-4)
    # early stopping keeps the best epoch by the validation pair-cosine Spearman; epoch 0 is the
    # distilled table with the least-squares head
    assert res.metrics["val_pair_spearman_trained"] >= res.metrics["val_pair_spearman_distilled"]


def test_static_model_config_is_checked_and_names_its_files(tmp_path):
    from curation.config_schema import validate_config
    from curation.configuration import ConfigError

    with pytest.raises(ConfigError, match="static_model.*only with backend=static"):
        validate_config({"embedding": {**TRAINED, "backend": "torch", "dim": 384}})
    with pytest.raises(ValueError, match="256-d.*its width"):
        make_embedder(EmbedderConfig(**TRAINED | {"dim": 384}))
    with pytest.raises(FileNotFoundError, match="train_static_embedder"):
        make_embedder(EmbedderConfig(**TRAINED | {"static_model": str(tmp_path)}))
    # cached vectors follow the model's files: a changed file is another fingerprint
    copy = tmp_path / "copy"
    shutil.copytree(SHIPPED, copy)
    before = model_fingerprint(EmbedderConfig(**TRAINED | {"static_model": str(copy)}))
    assert before == model_fingerprint(EmbedderConfig(**TRAINED))
    assert before != model_fingerprint(EmbedderConfig(**DISTILLED))
    (copy / "config.json").write_text((copy / "config.json").read_text().replace('"normalize": true',
                                                                                   '"normalize": false'))
    assert model_fingerprint(EmbedderConfig(**TRAINED | {"static_model": str(copy)})) != before
