"""A work folder named in the catalog: loads as its absolute path, for stages that manage their own files.

The Meta-rater sweep writes one resumable JSON file per proxy; the folder it
writes them to is a catalog entry, so its place follows the catalog's
conventions (``${namespace:...}``: a sweep job reads the folder of the
namespace the sweep started from, since the entry is an input no node produces).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kedro.io import AbstractDataset, DatasetError
from kedro.io.core import get_protocol_and_path


class WorkFolderDataset(AbstractDataset):
    """``filepath``: a local folder (relative paths are under the project root); loads as a ``Path``."""

    def __init__(self, *, filepath: str, metadata: dict[str, Any] | None = None) -> None:
        protocol, path = get_protocol_and_path(filepath)
        if protocol != "file":
            raise DatasetError(f"WorkFolderDataset supports local folders only, got {filepath!r}")
        self._filepath = filepath
        self._path = Path(path)
        self.metadata = metadata

    def load(self) -> Path:
        if self._path.is_absolute():
            return self._path
        from curation.paths import project_root

        return project_root() / self._path

    def save(self, data: Any) -> None:
        raise DatasetError(f"{self._filepath} is a work folder: its stage writes the files itself")

    def _exists(self) -> bool:
        return True  # created on first use

    def _describe(self) -> dict[str, Any]:
        return {"filepath": self._filepath}
