"""Content-addressed cache for expensive node results (embeddings, scores).

A result is stored under ``<cache_dir>/<name>-<key>.<ext>`` where ``key``
hashes everything the result depends on: the input rows (ids and texts) and
the config that produced it. Unchanged inputs and config give the same key,
so a re-run loads instead of recomputing; any change gives a new key, so a
stale result is never reused. Writes are atomic (temporary file, rename).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

log = logging.getLogger(__name__)


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
    finally:
        if tmp.exists():
            tmp.unlink()


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write(path, lambda p: p.write_text(text))


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
