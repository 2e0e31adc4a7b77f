"""Kedro glue for sharded datasets (:mod:`curation.shards`): a folder of shards + manifest.json.

``save`` takes either a finished :class:`curation.shards.ShardedDataset` (a streaming stage wrote
it shard by shard, resumably) and publishes it (a staging folder is renamed into place; one
opened with ``keep=True``, e.g. a result-cache entry, is published as hard links and stays), or a DataFrame / array, which it cuts into shards of ``rows_per_shard`` rows.

``load`` returns, by default, the whole dataset as one DataFrame (``load_as: frame``). That is
TRANSITIONAL: nodes that still take one frame (scoring, pruning, selection) keep working while
they are moved onto shards; new code asks for ``load_as: shards`` and iterates
:meth:`~curation.shards.ShardedDataset.iter_frames` with bounded memory.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from kedro.io import AbstractDataset

from curation.shards import ShardedDataset as Shards
from curation.shards import ShardWriter, shard_names


def _disk_error(err: BaseException, where: Path) -> BaseException:
    """``err`` as an ``OSError`` that carries its errno and names the dataset ``where`` being written: ``shutil.copytree`` gathers its failures into one
    ``shutil.Error`` whose errno is None and whose causes are strings, so a full disk during a copy was an
    "unexpected error" naming no file; with the errno, :func:`curation.errors.user_message` says "the disk is
    full while writing <file>" and the fix."""
    if not isinstance(err, shutil.Error):
        return err
    import errno as errno_
    import re

    for item in err.args[0] if err.args and isinstance(err.args[0], list) else []:
        found = re.search(r"\[Errno (\d+)\]", str(item[-1]) if isinstance(item, tuple) else str(item))
        if found:
            code = int(found.group(1))
            return OSError(code, os.strerror(code) if code in errno_.errorcode else str(item), str(where))
    return err


class ShardedDataset(AbstractDataset):
    """Args:
        path: the dataset folder (local; holds ``manifest.json``, ``shards/``, ``completions/``).
        load_as: ``frame`` (transitional whole-frame view) or ``shards`` (the reader).
        rows_per_shard: shard size when saving a whole frame or array.
        stage: recorded in the manifest when saving a whole frame or array.
    """

    def __init__(self, *, path: str, load_as: str = "frame", rows_per_shard: int = 100_000, stage: str = "",
                 metadata: dict[str, Any] | None = None) -> None:
        if load_as not in ("frame", "shards"):
            raise ValueError(f"load_as must be 'frame' or 'shards', got {load_as!r}")
        self._path = Path(path)
        self._load_as = load_as
        self._rows_per_shard = int(rows_per_shard)
        self._stage = stage
        self.metadata = metadata

    def load(self) -> pd.DataFrame | Shards:
        shards = Shards(self._path)
        if self._load_as == "shards":
            return shards
        if shards.manifest.kind == "array":
            return np.concatenate([a for _, a in shards.iter_arrays(mmap=False)]) if shards.names else np.empty(0)
        return shards.to_frame()

    def save(self, data: Any) -> None:
        if isinstance(data, Shards):
            # a folder that must stay (a result-cache entry) is published as hard links; a stage's
            # staging folder is moved into place
            staging = self._link_copy(data.root) if data.keep else data.root
            try:
                self._publish(staging)
            except BaseException:
                if data.keep and Path(staging).resolve() != Path(data.root).resolve():
                    shutil.rmtree(staging, ignore_errors=True)  # our hard-link copy, never the cache entry
                raise
            return
        staging = self._path.with_name(f".{self._path.name}.tmp-{uuid.uuid4().hex[:8]}")
        try:
            kind = "frame" if isinstance(data, pd.DataFrame) else "array"
            writer = ShardWriter(staging, kind)
            n = len(data)
            names = shard_names(max(1, -(-n // self._rows_per_shard)))
            for i, name in enumerate(names):
                part = data.iloc[i * self._rows_per_shard:(i + 1) * self._rows_per_shard] if kind == "frame" \
                    else np.asarray(data)[i * self._rows_per_shard:(i + 1) * self._rows_per_shard]
                writer.mark_complete(writer.write(name, part))
            writer.finalize(names, stage=self._stage)
            self._publish(staging)
        finally:
            if staging.exists():
                shutil.rmtree(staging)

    def _link_copy(self, folder: Path) -> Path:
        """A staging copy of ``folder`` made of hard links (no data copied; falls back to a copy
        across filesystems). The cache entry stays intact for the next run with the same inputs."""
        if folder.resolve() == self._path.resolve():
            return folder
        staging = self._path.with_name(f".{self._path.name}.tmp-{uuid.uuid4().hex[:8]}")

        def link(src: str, dst: str) -> None:
            try:
                os.link(src, dst)
            except OSError:
                shutil.copy2(src, dst)

        try:
            shutil.copytree(folder, staging, copy_function=link)
        except BaseException as err:
            shutil.rmtree(staging, ignore_errors=True)  # no half-copied dataset beside the others
            raise _disk_error(err, self._path) from err
        return staging

    def _publish(self, folder: Path) -> None:
        """Rename ``folder`` into place; the old dataset is moved aside first and deleted after,
        so a reader sees either the old or the new dataset, never a mix."""
        folder = Path(folder)
        if folder.resolve() == self._path.resolve():
            return
        self._path.parent.mkdir(parents=True, exist_ok=True)
        old = self._path.with_name(f".{self._path.name}.old-{uuid.uuid4().hex[:8]}")
        # moved to a hidden sibling first, then renamed into place: across file systems shutil.move copies, and
        # a disk that fills half-way used to leave a partial shard beside a copied manifest.json in the
        # dataset's own folder, where the next run trusted it (issue #52)
        incoming = self._path.with_name(f".{self._path.name}.new-{uuid.uuid4().hex[:8]}")
        try:
            shutil.move(str(folder), str(incoming))
        except BaseException as err:
            shutil.rmtree(incoming, ignore_errors=True)
            raise _disk_error(err, self._path) from err
        if self._path.exists():
            self._path.rename(old)
        try:
            incoming.rename(self._path)
        except BaseException:
            if old.exists() and not self._path.exists():
                old.rename(self._path)
            shutil.rmtree(incoming, ignore_errors=True)
            raise
        if old.exists():
            shutil.rmtree(old)
        try:
            folder.parent.rmdir()  # the stage's staging folder, once its last output is published
        except OSError:
            pass

    def _exists(self) -> bool:
        return (self._path / "manifest.json").is_file()

    def _describe(self) -> dict[str, Any]:
        return {"path": str(self._path), "load_as": self._load_as}
