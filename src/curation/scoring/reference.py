"""Reference raters: the raters that need labels, trained once on the bundled corpus, applied to any corpus.

The fastText classifiers (DCLM, Ultra-FineWeb), the Edu and Wiki heads and the DSIR targets learn
from labels: document categories (encyclopedic, books, web), the human ``quality_label`` and the
LLM edu scores. A user's corpus has none of these (docs/data.md: ``id`` and ``text``), so by default
(``scoring.training.source: reference``) those raters are trained on *reference data that ships
with the project*, the bundled corpus in ``data/01_raw/corpus``, with exactly the recipes of
:mod:`curation.scoring.training_sets` and :mod:`curation.scoring.embedding_raters`, and then
applied to the corpus being scored. ``scoring.training.source: corpus`` trains them on the
corpus's own labels instead (it must then carry ``extra``/``category`` and ``quality_label``).

What depends on the scored corpus stays per corpus and needs no label: the 0-15 merge map
(DATAMASK App. A.5 quantile mapping, fitted on the corpus sample) and DSIR's *raw* bag model (Xie
et al. 2023, Sec. 3: importance weights of the raw dataset one selects from against the target;
the target bag comes from the reference categories).

Each reference rater is a content-addressed artifact (:func:`curation.embedding.artifacts.ensure_artifact`:
built in a temporary folder under a file lock, renamed into place, ``manifest.json`` recording
what it was made from) under ``data/06_models/shared/<kind>-<digest>/`` (``$CURATION_SHARED_MODELS``
overrides the folder). The digest hashes the reference corpus files (sha256), the rater's
recipe, the training-set config, for the heads the embedding model and config, and the versions of
the libraries that write the files. So it is built once (``scripts/setup.sh`` builds the defaults,
as it builds the static embedder; any other config builds on first use, offline) and every run and
namespace reuses the same files: run folders hold hard links to them, not copies.

The human-label *eval* split (a salted id hash, :func:`curation.scoring.training_sets.human_label_split`)
never enters a reference training set; :func:`reference_eval_rows` gives those rows, and the run
measures every score column's ROC-AUC on them (with its own merge map for ``quality``).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import pandas as pd

from curation.cache import file_digest, package_versions
from curation.scoring.training_sets import EVAL, build_training_set, category_of, holdout_rows, human_label_split

if TYPE_CHECKING:  # pragma: no cover
    from curation.scoring.config import ScoringConfig

log = logging.getLogger(__name__)

SOURCES = ("reference", "corpus")
REFERENCE_VERSION = "reference-v1"
ENV_SHARED = "CURATION_SHARED_MODELS"
DEFAULT_REFERENCE_PATH = "data/01_raw/corpus"
# columns the reference corpus needs (extra carries category, page_type and the LLM edu scores)
REFERENCE_COLUMNS = ("id", "text", "quality_label", "extra")
_FT_LIBRARIES = ("fasttext-numpy2", "fasttext", "tokenizers", "numpy")
_HEAD_LIBRARIES = ("scikit-learn", "numpy", "joblib")


def shared_model_root() -> Path:
    """``$CURATION_SHARED_MODELS`` if set, else ``<project>/data/06_models/shared``."""
    if os.environ.get(ENV_SHARED):
        return Path(os.environ[ENV_SHARED]).expanduser()
    from curation.paths import project_root

    return project_root() / "data" / "06_models" / "shared"


def reference_files(path: str | os.PathLike) -> list[Path]:
    """The parquet files of the reference corpus (a folder, a file or a glob; relative to the project root)."""
    import glob

    from curation.paths import project_root

    raw = Path(str(path)).expanduser()
    full = raw if raw.is_absolute() else project_root() / raw
    if full.is_dir():
        files = sorted(full.glob("*.parquet"))
    elif full.is_file():
        files = [full]
    else:
        files = sorted(Path(p) for p in glob.glob(str(full)))
    if not files:
        raise FileNotFoundError(
            f"scoring.training.reference_path={path}: no parquet file at {full}. The reference raters train on the "
            f"bundled corpus ({DEFAULT_REFERENCE_PATH}, part of every clone); point reference_path at it, or train "
            "on your corpus's own labels with scoring.training.source=corpus")
    return files


@lru_cache(maxsize=8)
def _fingerprint(files: tuple[str, ...], stamps: tuple[tuple[int, int], ...]) -> dict[str, str]:
    return {Path(f).name: file_digest(Path(f)) for f in files}


def reference_fingerprint(path: str | os.PathLike) -> dict[str, str]:
    """sha256 of every reference file, by file name (cached per file size and mtime in this process)."""
    files = reference_files(path)
    stamps = tuple((f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    return dict(_fingerprint(tuple(str(f) for f in files), stamps))


@lru_cache(maxsize=2)
def _read_reference(files: tuple[str, ...], stamps: tuple[tuple[int, int], ...]) -> pd.DataFrame:
    frames = []
    for f in files:
        frame = pd.read_parquet(f)
        missing = [c for c in REFERENCE_COLUMNS if c not in frame.columns]
        if missing:
            raise KeyError(f"reference corpus file {f} lacks column(s) {missing}: the reference raters need "
                           f"{list(REFERENCE_COLUMNS)} (extra: JSON with category, page_type, llm_edu_score_0_5)")
        frames.append(frame[list(REFERENCE_COLUMNS)])
    df = pd.concat(frames, ignore_index=True)
    df["quality_label"] = df["quality_label"].astype("float64")
    df["category"] = category_of(df["extra"])
    if df["id"].duplicated().any():
        raise ValueError(f"reference corpus {files[0]}...: duplicate ids")
    return df


def load_reference_corpus(path: str | os.PathLike = DEFAULT_REFERENCE_PATH) -> pd.DataFrame:
    """The reference corpus: ``id``, ``text``, ``quality_label`` (float, NaN = none), ``extra``, ``category``."""
    files = reference_files(path)
    stamps = tuple((f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    return _read_reference(tuple(str(f) for f in files), stamps)


def reference_eval_rows(cfg: "ScoringConfig") -> pd.DataFrame:
    """The held-out human-label rows of the reference (``id``, ``text``, ``quality_label``): never trained on.
    Reads the labelled rows only (a run does not keep the reference corpus in memory)."""
    parts = []
    for f in reference_files(cfg.training.reference_path):
        frame = pd.read_parquet(f, columns=["id", "text", "quality_label"], filters=[("quality_label", "in", [0, 1])])
        parts.append(frame)
    labelled = pd.concat(parts, ignore_index=True)
    labelled["quality_label"] = labelled["quality_label"].astype("float64")
    split = human_label_split(labelled, cfg.training.eval_fraction, cfg.training.split_salt).to_numpy()
    return labelled.loc[split == EVAL].reset_index(drop=True)


def _training_params(cfg: "ScoringConfig") -> dict[str, Any]:
    # where the reference lives and the source switch do not change what is learnt from it; no hold-out
    # (the default) hashes as before the hold-out existed, so existing artifacts keep their digests
    params = {k: v for k, v in asdict(cfg.training).items() if k not in ("source", "reference_path")}
    if not cfg.training.holdout_fraction:
        params.pop("holdout_fraction"), params.pop("holdout_salt")
    return params


def _fasttext_params(ft) -> dict[str, Any]:
    # how training runs (process, NaN retries) does not change the model; a pretrained file is not trained
    return {k: v for k, v in asdict(ft).items() if k not in ("pretrained_path", "nan_retries", "isolate_training")}


def _spec(kind: str, cfg: "ScoringConfig", params: Mapping[str, Any], libraries: tuple[str, ...]) -> dict[str, Any]:
    return {
        "kind": kind,
        "version": REFERENCE_VERSION,
        "params": dict(params),
        "source": {"reference_corpus": reference_fingerprint(cfg.training.reference_path)},
        "libraries": package_versions(libraries),
    }


def fasttext_spec(name: str, cfg: "ScoringConfig") -> dict[str, Any]:
    """What the reference fastText rater ``name`` is made from; its digest names its folder."""
    ft = getattr(cfg, name)
    params = {"training": _training_params(cfg), "fasttext": _fasttext_params(ft)}
    if ft.recipe == "ultrafineweb":
        from curation.scoring.fasttext_rater import UltraFineWebTokenizer

        params["tokenizer_sha256"] = file_digest(Path(UltraFineWebTokenizer.resolve_path(ft.tokenizer_path)))
    return _spec(f"ref-{name}", cfg, params, _FT_LIBRARIES)


def heads_spec(cfg: "ScoringConfig", embedding) -> dict[str, Any]:
    """What the reference Edu / Wiki heads are made from (incl. the embedding model and config)."""
    from curation.embedding.sharded import embedding_digest

    heads = [n for n in ("edu", "wiki") if n in cfg.raters]
    params: dict[str, Any] = {"training": _training_params(cfg), "heads": heads}
    if "edu" in heads:
        params["edu"] = asdict(cfg.edu)
        if cfg.edu.annotations_path:
            params["edu_annotations_sha256"] = file_digest(Path(cfg.edu.annotations_path))
    if "wiki" in heads:
        params["wiki"] = asdict(cfg.wiki)
    if _needs_embedding(cfg):
        params["embedding"] = embedding_digest(embedding)
    return _spec("ref-heads", cfg, params, _HEAD_LIBRARIES)


def dsir_spec(cfg: "ScoringConfig") -> dict[str, Any]:
    params = {"targets": cfg.dsir.targets, "raw_categories": cfg.dsir.raw_categories,
              "model": {k: v for k, v in asdict(cfg.dsir.model).items() if k != "target"}}
    if cfg.training.holdout_fraction:  # the targets leave the reserved hold-out out (none: the digest as before)
        params["holdout"] = {"fraction": cfg.training.holdout_fraction, "salt": cfg.training.holdout_salt}
    return _spec("ref-dsir", cfg, params, ("scikit-learn", "numpy"))


def _needs_embedding(cfg: "ScoringConfig") -> bool:
    return "edu" in cfg.raters or ("wiki" in cfg.raters and cfg.wiki.features == "embedding")


def _write_json(path: Path, payload: Any) -> None:
    path.write_text(json.dumps(payload, indent=2, sort_keys=True, default=str))


# --- builders (each writes into the temporary folder ensure_artifact hands it) ---------------


def _build_fasttext(name: str, cfg: "ScoringConfig", out: Path) -> None:
    from curation.scoring.fasttext_rater import FastTextRater

    ref = load_reference_corpus(cfg.training.reference_path)
    ts = build_training_set(ref, cfg.training)
    rater = FastTextRater(getattr(cfg, name)).fit(ts.positives, ts.negatives)
    rater.save(out / f"{name}.bin")
    _write_json(out / "training.json", {"counts": ts.counts, "attempts": rater.n_train_["attempts"],
                                        "quantized": rater.n_train_["quantized"]})


def _embed(embedding, texts: list[str]) -> np.ndarray:
    from curation.embedding import make_embedder

    if not texts:
        return np.zeros((0, int(embedding.dim)), dtype=np.float32)
    embedder = make_embedder(replace(embedding, show_progress=False))
    return np.asarray(embedder.encode(texts).embeddings, dtype=np.float32)


def _build_heads(cfg: "ScoringConfig", embedding, out: Path) -> None:
    from curation.scoring.embedding_raters import EduRater, WikiRater, build_edu_annotations, wiki_training_config

    ref = load_reference_corpus(cfg.training.reference_path)
    counts: dict[str, Any] = {}
    edu_table = wiki_set = None
    rows: set[int] = set()
    row_of = {doc_id: i for i, doc_id in enumerate(ref["id"])}
    if "edu" in cfg.raters:
        edu_table, counts["edu_annotations"] = build_edu_annotations(ref, cfg.edu, cfg.training)
        rows |= set(edu_table.loc[edu_table["origin"] != "annotations_file", "row"].astype(int))
    if "wiki" in cfg.raters:
        wiki_set = build_training_set(ref, wiki_training_config(cfg.training))
        counts["wiki_train"] = wiki_set.counts
        rows |= {row_of[i] for i in wiki_set.positive_ids + wiki_set.negative_ids}
    # only the rows some head trains on are embedded (the transformer backends are slow)
    order = np.array(sorted(rows), dtype=np.int64)
    vectors = None
    if _needs_embedding(cfg) and len(order):
        dense = _embed(embedding, ref["text"].to_numpy()[order].tolist())
        vectors = np.zeros((len(ref), dense.shape[1]), dtype=np.float32)
        vectors[order] = dense
    if edu_table is not None:
        edu = EduRater(cfg.edu)
        from_corpus = (edu_table["origin"] != "annotations_file").to_numpy()
        X = np.empty((len(edu_table), vectors.shape[1]), dtype=np.float32)
        X[from_corpus] = vectors[edu_table.loc[from_corpus, "row"].to_numpy(dtype=np.int64)]
        if (~from_corpus).any():
            X[~from_corpus] = _embed(embedding, edu_table.loc[~from_corpus, "text"].tolist())
        edu.fit_embeddings(X, edu_table["score"].to_numpy(dtype=float))
        edu.save(out / "edu.joblib")
    if wiki_set is not None:
        wiki = WikiRater(cfg.wiki)
        if cfg.wiki.features == "embedding":
            idx = [row_of[i] for i in wiki_set.positive_ids + wiki_set.negative_ids]
            y = np.r_[np.ones(len(wiki_set.positive_ids)), np.zeros(len(wiki_set.negative_ids))]
            wiki.fit_features(vectors[idx], y)
        else:
            wiki.fit(wiki_set.positives, wiki_set.negatives)
        wiki.save(out / "wiki.joblib")
    # the held-out rows' vectors, so a run measures ROC-AUC without embedding them again
    if _needs_embedding(cfg):
        eval_rows = reference_eval_rows(cfg)
        np.save(out / "eval_embeddings.npy", _embed(embedding, eval_rows["text"].tolist()))
        _write_json(out / "eval_ids.json", eval_rows["id"].tolist())
    _write_json(out / "training.json", counts)


def _build_dsir(cfg: "ScoringConfig", out: Path) -> None:
    from curation.scoring.dsir import DSIRImportance

    ref = load_reference_corpus(cfg.training.reference_path)
    hasher = DSIRImportance(cfg.dsir.model)
    arrays: dict[str, np.ndarray] = {}
    groups = dict(cfg.dsir.targets)
    if cfg.dsir.raw_categories:
        groups["__raw__"] = list(cfg.dsir.raw_categories)
    held = holdout_rows(ref["id"].tolist(), cfg.training.holdout_fraction, cfg.training.holdout_salt)
    for target, categories in groups.items():
        mask = ref["category"].isin(categories).to_numpy() & ~held
        if not mask.any():
            raise ValueError(f"dsir target {target!r}: no reference document of categories {categories}")
        z = hasher.features(ref["text"].to_numpy()[mask].tolist())
        arrays[target] = np.asarray(z.sum(axis=0), dtype=np.float64).ravel()
    np.savez(out / "dsir_counts.npz", **arrays)
    _write_json(out / "training.json", {t: int(ref["category"].isin(c).sum()) for t, c in groups.items()})


def training_ids(cfg: "ScoringConfig", reference: pd.DataFrame | None = None) -> dict[str, set[str]]:
    """rater -> ids of the reference documents it learns from, by the builders' own recipes (no training):
    ``fasttext`` (DCLM and Ultra-FineWeb share one training set), ``wiki``, ``edu`` (corpus rows),
    ``dsir`` (the target categories). DSIR's raw bag is fitted on the scored corpus itself, label-free,
    and is not counted. Used to keep measurement sets (Meta-rater's D_v) out of every rater's training data."""
    from curation.scoring.embedding_raters import build_edu_annotations, wiki_training_config

    ref = load_reference_corpus(cfg.training.reference_path) if reference is None else reference
    out: dict[str, set[str]] = {}
    if any(name in cfg.raters for name in ("fasttext_dclm", "fasttext_ultrafineweb")):
        ts = build_training_set(ref, cfg.training)
        out["fasttext"] = set(ts.positive_ids) | set(ts.negative_ids)
    if "wiki" in cfg.raters:
        ts = build_training_set(ref, wiki_training_config(cfg.training))
        out["wiki"] = set(ts.positive_ids) | set(ts.negative_ids)
    if "edu" in cfg.raters:
        table, _ = build_edu_annotations(ref, cfg.edu, cfg.training)
        rows = table.loc[table["origin"] != "annotations_file", "row"].astype(int).to_numpy()
        out["edu"] = set(ref["id"].to_numpy()[rows].tolist())
    if "dsir" in cfg.raters:
        held = holdout_rows(ref["id"].tolist(), cfg.training.holdout_fraction, cfg.training.holdout_salt)
        categories = sorted({c for cats in cfg.dsir.targets.values() for c in cats})
        out["dsir"] = set(ref["id"].to_numpy()[ref["category"].isin(categories).to_numpy() & ~held].tolist())
    return out


# --- what a run uses ------------------------------------------------------------------------


@dataclass
class ReferenceRaters:
    """The reference raters of one scoring config, loaded, with the folders they came from."""

    raters: dict[str, Any]  # fasttext_dclm, fasttext_ultrafineweb, edu, wiki (as configured)
    dsir_counts: dict[str, np.ndarray]  # DSIR target -> hashed n-gram counts summed over its documents
    folders: dict[str, Path]  # rater (or "heads", "dsir") -> its artifact folder
    eval_rows: pd.DataFrame  # held-out human-label rows of the reference
    eval_embeddings: np.ndarray | None  # their vectors (edu / wiki), row-aligned
    counts: dict[str, float] = field(default_factory=dict)  # training-set sizes, flat

    def provenance(self) -> dict[str, str]:
        """rater -> artifact folder name (``<kind>-<digest>``), for manifests and MLflow."""
        return {name: folder.name for name, folder in self.folders.items()}


def _flat(prefix: str, payload: Any, out: dict[str, float]) -> None:
    if isinstance(payload, Mapping):
        for k, v in payload.items():
            _flat(f"{prefix}/{k}", v, out)
    elif isinstance(payload, (int, float)) and not isinstance(payload, bool):
        out[prefix] = float(payload)


def ensure_reference(cfg: "ScoringConfig", embedding=None, root: Path | None = None) -> ReferenceRaters:
    """Build what is missing (once, under a lock) and load the reference raters of ``cfg``.

    ``embedding``: the run's ``EmbedderConfig`` (or mapping), needed when Edu or Wiki (on
    embeddings) is configured: the heads are trained in the same vector space as the run's.
    A rater with a ``pretrained_path`` is not built here.
    """
    from curation.scoring.embedding_raters import EduRater, WikiRater
    from curation.scoring.fasttext_rater import FastTextRater

    root = Path(root) if root is not None else shared_model_root()
    if embedding is not None and not hasattr(embedding, "backend"):
        from curation.configuration import parse_dataclass
        from curation.embedding import EmbedderConfig

        embedding = parse_dataclass(EmbedderConfig, dict(embedding), path="embedding")
    raters: dict[str, Any] = {}
    folders: dict[str, Path] = {}
    counts: dict[str, float] = {}
    have: set[str] = set()  # raters a pretrained_dir provides are loaded from there, not built here
    if cfg.pretrained_dir:
        from curation.scoring.persistence import read_manifest

        have = set(read_manifest(cfg.pretrained_dir)["raters"])
    for name in ("fasttext_dclm", "fasttext_ultrafineweb"):
        if name not in cfg.raters or getattr(cfg, name).pretrained_path or name in have:
            continue
        spec = fasttext_spec(name, cfg)
        folder = _ensure(spec, lambda out, n=name: _build_fasttext(n, cfg, out), root)
        raters[name] = FastTextRater.load(folder / f"{name}.bin")
        folders[name] = folder
        _flat(name, json.loads((folder / "training.json").read_text()), counts)
    eval_embeddings = None
    if {"edu", "wiki"} & set(cfg.raters) - have:
        if _needs_embedding(cfg) and embedding is None:
            raise ValueError("the reference edu / wiki heads are trained in the run's embedding space: pass the "
                             "embedding config (EmbedderConfig), or set scoring.training.source=corpus")
        folder = _ensure(heads_spec(cfg, embedding), lambda out: _build_heads(cfg, embedding, out),
                         root)
        for name, cls in (("edu", EduRater), ("wiki", WikiRater)):
            if name in cfg.raters and name not in have:
                raters[name] = cls.load(folder / f"{name}.joblib")
                folders[name] = folder
        if (folder / "eval_embeddings.npy").is_file():
            eval_embeddings = np.load(folder / "eval_embeddings.npy")
            eval_ids = json.loads((folder / "eval_ids.json").read_text())
        _flat("heads", json.loads((folder / "training.json").read_text()), counts)
    dsir_counts: dict[str, np.ndarray] = {}
    if "dsir" in cfg.raters and not {f"{t}_importance" for t in cfg.dsir.targets} <= have:
        folder = _ensure(dsir_spec(cfg), lambda out: _build_dsir(cfg, out), root)
        with np.load(folder / "dsir_counts.npz") as f:
            dsir_counts = {k: f[k].copy() for k in f.files}
        folders["dsir"] = folder
    _read_reference.cache_clear()  # the builders' copy of the reference corpus: not kept for the run
    eval_rows = reference_eval_rows(cfg)
    if eval_embeddings is not None and eval_ids != eval_rows["id"].tolist():
        raise RuntimeError(f"{folders.get('edu') or folders.get('wiki')}: its eval vectors are not those of the "
                           f"{len(eval_rows)} held-out rows (a changed split salt or eval_fraction must change the digest)")
    return ReferenceRaters(raters, dsir_counts, folders, eval_rows, eval_embeddings, counts)


def _ensure(spec: Mapping[str, Any], build, root: Path) -> Path:
    """The artifact folder of ``spec`` under ``root``, built by ``build(tmp)`` if absent (once, under a lock)."""
    from curation.embedding.artifacts import MANIFEST, ensure_artifact, spec_digest

    final = root / f"{spec['kind']}-{spec_digest(spec)}"
    if not (final / MANIFEST).is_file():
        log.info("scoring: building the reference rater %s from the bundled corpus (once; shared by every run)",
                 final.name)
    return ensure_artifact(spec, build, root)


def _build_fasttext_artifact(name: str, cfg: "ScoringConfig", root: str) -> str:
    """In a worker process: the reference fastText rater ``name`` (built if absent)."""
    return str(_ensure(fasttext_spec(name, cfg), lambda out: _build_fasttext(name, cfg, out), Path(root)))


def build_side_by_side(cfg: "ScoringConfig", embedding: Any, workers: int) -> None:
    """The slowest fastText raters in ``workers - 1`` spawned processes (they die with this one), the rest here.

    This process is one of the ``workers``: on 2 cores the Ultra-FineWeb rater (~235 s alone, ~150 s of it
    fastText's quantize(); the set-up's critical path) gets a process and a core to itself, and this one builds
    the Edu / Wiki heads, DSIR and then the DCLM rater (~205 s together) beside it. Three processes on two cores
    (both fastText raters in workers, as before) slowed the critical path by ~45 s."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from curation.processes import die_with_parent

    if cfg.pretrained_dir:
        return  # what a pretrained folder provides is not built; ensure_reference sorts out the rest
    slowest_first = ("fasttext_ultrafineweb", "fasttext_dclm")
    names = [n for n in slowest_first if n in cfg.raters and not getattr(cfg, n).pretrained_path][:workers - 1]
    if not names:
        return
    root = str(shared_model_root())
    with ProcessPoolExecutor(len(names), mp_context=multiprocessing.get_context("spawn"),
                             initializer=die_with_parent, initargs=(os.getpid(),)) as pool:
        futures = [pool.submit(_build_fasttext_artifact, name, cfg, root) for name in names]
        ensure_reference(replace(cfg, raters=[r for r in cfg.raters if r not in names]), embedding)
        for future in futures:
            future.result()
