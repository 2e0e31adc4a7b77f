"""Kedro datasets of the language-model pipelines: tokenizer, packed tokens, checkpoints.

``TokenizerDataset``      one ``tokenizer.json`` (HF ``tokenizers``); wrap it in
                          ``AtomicDataset`` like any single-file dataset.
``PackedTokensDataset``   a packed token folder (``tokens.bin`` + ``index.json``,
                          :mod:`curation.lm.packing`), or with ``partitions: true``
                          a folder of them, one per name (``{name: PackedDataset}``).
``LMCheckpointDataset``   a trained model as a folder (``model.pt``, ``config.json``,
                          ``tokenizer.json``) loaded as an :class:`LMCheckpoint`;
                          ``versioned: true`` keeps every run's checkpoint and
                          loads the latest one.

Folder datasets save atomically themselves: the folder is written under a
hidden temporary name next to the target and renamed into place, so a killed
run never leaves a half-written checkpoint that a later run would load.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from kedro.io import AbstractVersionedDataset, DatasetError
from kedro.io.core import AbstractDataset, Version, get_protocol_and_path

from curation.cache import atomic_folder
if TYPE_CHECKING:
    from curation.lm.checkpoint import LMCheckpoint  # the value LMCheckpointDataset stores


def __getattr__(name: str):
    # ``curation.lm`` imports torch; every process imports this module (the catalog's datasets, shard
    # workers included), so the checkpoint class is imported on first use (~1.3 s, ~200 MB saved)
    if name == "LMCheckpoint":
        from curation.lm.checkpoint import LMCheckpoint

        return LMCheckpoint
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

TOKENIZER_FILE = "tokenizer.json"


def _local_path(filepath: str, kind: str) -> Path:
    protocol, path = get_protocol_and_path(filepath)
    if protocol != "file":
        raise DatasetError(f"{kind} supports local paths only, got {filepath!r}")
    return Path(path)


class TokenizerDataset(AbstractDataset):
    """A ``tokenizer.json``; loads with ``<|endoftext|>`` checked (:func:`curation.lm.load_tokenizer`)."""

    def __init__(self, *, filepath: str, metadata: dict[str, Any] | None = None) -> None:
        self._filepath = filepath
        self._path = _local_path(filepath, "TokenizerDataset")
        self.metadata = metadata

    def load(self):
        from curation.lm import load_tokenizer

        return load_tokenizer(self._path)

    def save(self, data) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        data.save(str(self._path))

    def _exists(self) -> bool:
        return self._path.is_file()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": self._filepath}


class PackedTokensDataset(AbstractDataset):
    """Packed token folder(s) read by both trainers.

    Save takes a :class:`~curation.lm.packing.PackedDataset` (its folder is
    copied into place), or with ``partitions: true`` a dict ``{name: PackedDataset}``
    (one sub-folder per name). Load returns the same, memory-mapped.
    """

    def __init__(self, *, filepath: str, partitions: bool = False, metadata: dict[str, Any] | None = None) -> None:
        self._filepath = filepath
        self._path = _local_path(filepath, "PackedTokensDataset")
        self._partitions = partitions
        self.metadata = metadata

    def load(self):
        from curation.lm.packing import INDEX_FILE, PackedDataset

        if not self._partitions:
            return PackedDataset(self._path)
        return {p.name: PackedDataset(p) for p in sorted(self._path.iterdir()) if (p / INDEX_FILE).is_file()}

    def save(self, data) -> None:
        from curation.lm.packing import INDEX_FILE, TOKENS_FILE

        def copy_one(source, dest: Path) -> None:
            dest.mkdir(parents=True, exist_ok=True)
            for name in (TOKENS_FILE, INDEX_FILE):
                shutil.copyfile(Path(source.path) / name, dest / name)

        def write(tmp: Path) -> None:
            if self._partitions:
                if not isinstance(data, dict):
                    raise DatasetError(f"{self._filepath}: partitions=true needs a dict of PackedDataset")
                for name, packed in data.items():
                    copy_one(packed, tmp / name)
            else:
                copy_one(data, tmp)

        atomic_folder(self._path, write)

    def _exists(self) -> bool:
        return self._path.is_dir()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": self._filepath, "partitions": self._partitions}


class LMCheckpointDataset(AbstractVersionedDataset):
    """An :class:`LMCheckpoint` as a folder; with ``versioned: true`` one folder per run, the latest loaded."""

    def __init__(self, *, filepath: str, version: Version | None = None,
                 metadata: dict[str, Any] | None = None) -> None:
        super().__init__(PurePosixPath(_local_path(filepath, "LMCheckpointDataset").as_posix()), version)
        self._raw_filepath = filepath
        self.metadata = metadata

    def load(self) -> LMCheckpoint:
        from curation.lm import load_model, load_tokenizer
        from curation.lm.checkpoint import LMCheckpoint

        folder = Path(str(self._get_load_path()))
        meta = json.loads((folder / "config.json").read_text())
        return LMCheckpoint(model=load_model(folder), tokenizer=load_tokenizer(folder / TOKENIZER_FILE),
                            config=meta.get("pretrain") or {})

    def save(self, data: LMCheckpoint) -> None:
        from curation.lm import parse_config, save_model

        target = Path(str(self._get_save_path()))

        def write(tmp: Path) -> None:
            save_model(data.model, tmp, parse_config(data.config) if data.config else None)
            data.tokenizer.save(str(tmp / TOKENIZER_FILE))

        atomic_folder(target, write)

    def _exists(self) -> bool:
        try:
            return Path(str(self._get_load_path())).is_dir()
        except DatasetError:  # no version yet
            return False

    def _describe(self) -> dict[str, Any]:
        return {"filepath": self._raw_filepath, "version": self._version}
