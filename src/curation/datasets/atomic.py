"""Atomic saves for any file-based Kedro dataset: write a temporary file, then rename.

A run killed half-way through a save leaves only a ``.tmp-*`` file that no
later run reads, never a truncated parquet that looks complete.
"""

from __future__ import annotations

import uuid
from copy import deepcopy
from pathlib import PurePosixPath
from typing import Any

import fsspec
from kedro.io import AbstractDataset
from kedro.io.core import get_protocol_and_path, parse_dataset_definition


class AtomicDataset(AbstractDataset):
    """Wrap a dataset definition (``dataset:``) and save it through a temporary path.

    Example catalog entry::

        documents:
          type: curation.datasets.AtomicDataset
          filepath: data/02_intermediate/documents.parquet
          dataset: {type: pandas.ParquetDataset}
    """

    def __init__(self, *, filepath: str, dataset: dict[str, Any] | str, metadata: dict[str, Any] | None = None):
        self._filepath = filepath
        self._definition = {"type": dataset} if isinstance(dataset, str) else deepcopy(dataset)
        protocol, path = get_protocol_and_path(filepath)
        self._protocol = protocol
        self._fs = fsspec.filesystem(protocol)
        self._path = path
        self.metadata = metadata

    def _make(self, filepath: str) -> AbstractDataset:
        definition = {**self._definition, "filepath": filepath}
        dataset_type, config = parse_dataset_definition(definition)
        return dataset_type(**config)

    def load(self) -> Any:
        return self._make(self._filepath).load()

    def save(self, data: Any) -> None:
        target = PurePosixPath(self._path)
        self._fs.makedirs(str(target.parent), exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex[:8]}")
        tmp_url = str(tmp) if self._protocol == "file" else f"{self._protocol}://{tmp}"
        try:
            self._make(tmp_url).save(data)
            self._fs.mv(str(tmp), str(target))  # os.replace on local disks: atomic
        except BaseException:
            if self._fs.exists(str(tmp)):
                self._fs.rm(str(tmp), recursive=True)
            raise

    def _exists(self) -> bool:
        return self._fs.exists(self._path)

    def _describe(self) -> dict[str, Any]:
        return {"filepath": self._filepath, "dataset": self._definition.get("type")}
