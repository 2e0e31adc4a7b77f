"""The one cache service: the cache folder, content digests and atomic writes.

A result is stored under ``<cache_dir>/<name>-<key>.<ext>`` where ``key``
hashes everything the result depends on: the input rows (ids and texts) and
the config that produced it. Unchanged inputs and config give the same key,
so a re-run loads instead of recomputing; any change gives a new key, so a
stale result is never reused. Writes are atomic (temporary file or folder,
rename). Every cached stage (embeddings, scores, tokenizer, corpus picks,
LM training, evaluation, Meta-rater proxies) goes through this module:

- :func:`cache_dir` / :func:`result_cache`: the ``cache`` config group
  (``dir`` against the project root, ``enabled``);
- digests: :func:`config_key`, :func:`frame_fingerprint`, :func:`array_digest`,
  :func:`file_digest`, :func:`text_digest`, :func:`texts_digest`,
  :func:`model_digest` (all sha256);
- atomic writes: :func:`atomic_write`, :func:`atomic_write_text`,
  :func:`replace_directory`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import pandas as pd

log = logging.getLogger(__name__)


# --- the cache folder ---


def cache_dir(cache: Mapping[str, Any]) -> Optional[Path]:
    """``cache.dir`` resolved against the project root, or None when ``cache.enabled`` is false."""
    if not cache.get("enabled", True):
        return None
    if "dir" not in cache:
        raise KeyError("cache.dir is not set (the `cache` config group names the cache folder)")
    directory = Path(cache["dir"])
    if directory.is_absolute():
        return directory
    from curation.paths import project_root

    return project_root() / directory


def result_cache(cache: Mapping[str, Any]) -> "ResultCache":
    """A :class:`ResultCache` on :func:`cache_dir`; disabled (computes every time) when ``cache.enabled``
    is false."""
    directory = cache_dir(cache)
    if directory is None:
        import tempfile

        return ResultCache(Path(tempfile.gettempdir()), enabled=False)
    return ResultCache(directory, enabled=True)


# --- digests ---


def frame_fingerprint(frame: pd.DataFrame, columns: list[str]) -> str:
    """Order-sensitive hash of ``columns`` of ``frame`` (row order matters to arrays aligned with it)."""
    hashed = pd.util.hash_pandas_object(frame[columns], index=False).to_numpy()
    return hashlib.sha256(hashed.tobytes()).hexdigest()


def config_key(*parts: Any) -> str:
    """Hash of JSON-serialisable parts (configs, fingerprints, version strings)."""
    payload = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(payload).hexdigest()[:20]


def array_digest(values: np.ndarray) -> str:
    """sha256 of an array's bytes (C order)."""
    return hashlib.sha256(np.ascontiguousarray(values).tobytes()).hexdigest()


def file_digest(path: str | Path) -> str:
    """sha256 of a file's bytes, read in 4 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def text_digest(text: str) -> str:
    """sha256 of a string's UTF-8 bytes (e.g. a tokenizer's JSON)."""
    return hashlib.sha256(text.encode()).hexdigest()


def texts_digest(texts: Sequence[str]) -> str:
    """Order-sensitive sha256 over the sha256 of each text (surrogates kept, so no text fails)."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest())
    return digest.hexdigest()


def model_digest(model: Any) -> str:
    """sha256 of every tensor of a torch module's state dict (names and bytes), in name order."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().view(-1).view(_uint8()).numpy().tobytes())
    return h.hexdigest()


def _uint8():
    import torch  # only the LM stages hash models; the rest of the cache needs no torch

    return torch.uint8


# --- atomic writes ---


def save_npy(path: Path, value: np.ndarray) -> None:
    with Path(path).open("wb") as handle:  # a file object: np.save would append ".npy" to a path
        np.save(handle, value, allow_pickle=False)


def atomic_write(path: str | Path, write: Callable[[Path], Any]) -> None:
    """``write(tmp)`` to a temporary sibling of ``path``, then rename it into place: a killed
    process never leaves a half-written file that a later run would trust."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as err:
        if err.filename is None and err.errno is not None:
            # pyarrow's and numpy's write errors name no file: a full disk would be reported without the
            # file it stopped at (issue #39); the same error, with the file
            raise OSError(err.errno, os.strerror(err.errno), str(path)) from err
        raise
    finally:
        if tmp.exists():
            tmp.unlink()


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write(path, lambda p: p.write_text(text))


def replace_directory(new: str | Path, target: str | Path) -> None:
    """Put the complete folder ``new`` at ``target`` by renames (same file system).

    An existing ``target`` is renamed aside first and deleted after, so at no
    moment does ``target`` hold a mix of old and new files.
    """
    new, target = Path(new), Path(target)
    old = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:8]}")
    if target.exists():
        os.replace(target, old)
    try:
        os.replace(new, target)
    except BaseException:
        if old.exists() and not target.exists():
            os.replace(old, target)  # put the previous folder back
        raise
    if old.exists():
        shutil.rmtree(old)


def atomic_folder(target: str | Path, write: Callable[[Path], Any]) -> None:
    """``write(tmp)`` fills a temporary sibling folder, which then replaces ``target``
    (:func:`replace_directory`); a failed write leaves ``target`` as it was."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        tmp.mkdir()
        write(tmp)
        replace_directory(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


class ResultCache:
    def __init__(self, directory: str | Path, enabled: bool = True) -> None:
        self.directory = Path(directory)
        self.enabled = enabled
        self.hits = 0
        self.misses = 0

    def _path(self, name: str, key: str, ext: str) -> Path:
        return self.directory / f"{name}-{key}.{ext}"

    def array(self, name: str, key: str, compute: Callable[[], np.ndarray]) -> np.ndarray:
        path = self._path(name, key, "npy")
        if self.enabled and path.exists():
            self.hits += 1
            log.info("cache hit: %s", path)
            return np.load(path, allow_pickle=False)
        self.misses += 1
        value = np.asarray(compute())
        if self.enabled:
            atomic_write(path, lambda p: save_npy(p, value))
        return value

    def frame(self, name: str, key: str, compute: Callable[[], pd.DataFrame]) -> pd.DataFrame:
        path = self._path(name, key, "parquet")
        if self.enabled and path.exists():
            self.hits += 1
            log.info("cache hit: %s", path)
            return pd.read_parquet(path)
        self.misses += 1
        value = compute()
        if self.enabled:
            atomic_write(path, lambda p: value.to_parquet(p, index=False))
        return value


def package_versions(packages: tuple[str, ...]) -> dict[str, str]:
    """Installed version of each package ("absent" if not installed): part of an artifact's provenance."""
    from importlib import metadata

    out = {}
    for name in packages:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out
