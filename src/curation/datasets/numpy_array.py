"""A NumPy array in ``.npy`` format (kedro-datasets has none); memory-mapped on load by default."""

from __future__ import annotations

from typing import Any

import fsspec
import numpy as np
from kedro.io import AbstractDataset
from kedro.io.core import get_protocol_and_path


class NpyDataset(AbstractDataset):
    """Args:
        filepath: local path or fsspec URL of the ``.npy`` file.
        mmap: load local files with ``mmap_mode="r"`` so a 10 GB embedding
            matrix costs no memory until rows are touched.
    """

    def __init__(self, *, filepath: str, mmap: bool = True, metadata: dict[str, Any] | None = None) -> None:
        self._filepath = filepath
        self._protocol, self._path = get_protocol_and_path(filepath)
        self._mmap = mmap
        self.metadata = metadata

    def load(self) -> np.ndarray:
        if self._protocol == "file":
            return np.load(self._path, mmap_mode="r" if self._mmap else None, allow_pickle=False)
        with fsspec.open(self._filepath, "rb") as handle:
            return np.load(handle, allow_pickle=False)

    def save(self, data: np.ndarray) -> None:
        with fsspec.open(self._filepath, "wb", auto_mkdir=True) as handle:
            np.save(handle, np.asarray(data), allow_pickle=False)

    def _exists(self) -> bool:
        fs = fsspec.filesystem(self._protocol)
        return fs.exists(self._path)

    def _describe(self) -> dict[str, Any]:
        return {"filepath": self._filepath, "mmap": self._mmap}
