"""Write and read sharded datasets (see :mod:`curation.shards.manifest` for the layout).

Writing is per shard and atomic: the shard file, then its stats, then its completion
marker, each through :func:`curation.cache.atomic_write`. A process killed at any point
leaves either a finished shard (marker present) or one that the next run redoes.
Reading is per shard: memory is one shard at a time, and ``.npy`` shards can be
memory-mapped.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
import pandas as pd

from curation.cache import array_digest, atomic_write, atomic_write_text, frame_fingerprint, save_npy
from curation.shards.manifest import COMPLETIONS, SHARDS, STATS, Manifest, ShardInfo, read_manifest, write_manifest


def frame_digest(frame: pd.DataFrame) -> str:
    """Content hash of every column of one frame, in row order (for frames not yet written)."""
    return frame_fingerprint(frame, list(frame.columns)) if len(frame.columns) else "empty"


def file_digest(path: str | Path) -> str:
    """sha256 of a written shard file. Parquet written by the same pyarrow from the same frame
    is byte-identical (no timestamps), so this is a content hash at ~1 GB/s, 5x cheaper than
    hashing the frame's columns; a different pyarrow version may give another digest."""
    h = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def shard_names(n: int) -> list[str]:
    """``part-00000 .. part-<n-1>``: names sort in shard order."""
    return [f"part-{i:05d}" for i in range(n)]


class ShardWriter:
    """One output folder of a per-shard stage.

    ``kind`` is ``"frame"`` (parquet shards) or ``"array"`` (``.npy`` shards).
    """

    def __init__(self, root: str | Path, kind: str = "frame") -> None:
        if kind not in ("frame", "array"):
            raise ValueError(f"kind must be 'frame' or 'array', got {kind!r}")
        self.root = Path(root)
        self.kind = kind

    def shard_path(self, name: str) -> Path:
        return self.root / SHARDS / f"{name}.{'parquet' if self.kind == 'frame' else 'npy'}"

    def marker_path(self, name: str) -> Path:
        return self.root / COMPLETIONS / name

    def is_complete(self, name: str) -> bool:
        return self.marker_path(name).is_file()

    def write(self, name: str, value: pd.DataFrame | np.ndarray) -> ShardInfo:
        """Write one shard's data (atomic); the caller marks it complete afterwards."""
        if self.kind == "frame":
            if not isinstance(value, pd.DataFrame):
                raise TypeError(f"{self.root}: shard {name} must be a DataFrame, got {type(value).__name__}")
            frame = value.reset_index(drop=True)
            atomic_write(self.shard_path(name), lambda p: frame.to_parquet(p, index=False))
            return ShardInfo(name, len(frame), file_digest(self.shard_path(name)))
        array = np.asarray(value)
        atomic_write(self.shard_path(name), lambda p: save_npy(p, array))
        return ShardInfo(name, int(array.shape[0]), array_digest(array))

    def clear_staging(self, name: str) -> int:
        """Delete the temporary files (``.<file>.tmp-*``) of shard ``name`` that a killed writer left
        (a worker that died, or a pool shut down under a running shard); return how many. Only for a
        shard about to be re-run: one folder has one writer per shard, so none of these is in use."""
        removed = 0
        for folder in (self.root / SHARDS, self.root / COMPLETIONS, self.root / STATS):
            # the data file (.part-00001.parquet.tmp-*), the marker (.part-00001.tmp-*), the stats (.json.tmp-*)
            for stale in folder.glob(f".{name}.*tmp-*") if folder.is_dir() else ():
                stale.unlink(missing_ok=True)
                removed += 1
        return removed

    def write_stats(self, name: str, stats: dict) -> None:
        atomic_write_text(self.root / STATS / f"{name}.json", json.dumps(stats, sort_keys=True))

    def mark_complete(self, info: ShardInfo) -> None:
        atomic_write_text(self.marker_path(info.name), json.dumps({"rows": info.rows, "digest": info.digest}))

    def completed(self, name: str) -> ShardInfo:
        raw = json.loads(self.marker_path(name).read_text())
        return ShardInfo(name, int(raw["rows"]), raw["digest"])

    def stats(self, name: str) -> dict:
        path = self.root / STATS / f"{name}.json"
        return json.loads(path.read_text()) if path.is_file() else {}

    def finalize(
        self, names: Sequence[str], *, stage: str, inputs: dict[str, str] | None = None, config_digest: str = "",
        remake: str = "", aligned_with: str | None = None,
    ) -> Manifest:
        """Write ``manifest.json`` once every shard in ``names`` is complete; stats are summed."""
        missing = [n for n in names if not self.is_complete(n)]
        if missing:
            raise RuntimeError(f"{self.root}: {len(missing)} shard(s) not finished, e.g. {missing[:3]}; re-run the stage")
        shards = [self.completed(n) for n in names]
        totals: dict[str, float] = {}
        for n in names:
            for key, value in self.stats(n).items():
                if isinstance(value, (int, float)):
                    totals[key] = totals.get(key, 0) + value
        manifest = Manifest(
            stage=stage, kind=self.kind, shards=shards, schema=self._schema(shards), inputs=dict(inputs or {}),
            config_digest=config_digest, remake=remake, stats=totals, aligned_with=aligned_with,
        )
        write_manifest(self.root, manifest)
        return manifest

    def _schema(self, shards: list[ShardInfo]) -> dict[str, str]:
        if not shards:
            return {}
        if self.kind == "frame":
            import pyarrow.parquet as pq

            schema = pq.read_schema(self.shard_path(shards[0].name))
            return {f.name: str(f.type) for f in schema if not f.name.startswith("__")}
        head = np.load(self.shard_path(shards[0].name), mmap_mode="r")
        return {"dtype": str(head.dtype), "shape_tail": json.dumps(list(head.shape[1:]))}


class ShardedDataset:
    """Read side of a finished sharded dataset (its manifest must exist)."""

    def __init__(self, root: str | Path, keep: bool = False) -> None:
        """``keep``: the folder must stay where it is when a Kedro dataset publishes it (a result-cache
        entry: published as hard links), instead of being moved into place (a staging folder)."""
        self.root = Path(root)
        self.keep = keep
        self.manifest: Manifest = read_manifest(self.root)
        self._writer = ShardWriter(self.root, self.manifest.kind)

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.manifest.shards]

    @property
    def fingerprint(self) -> str:
        return self.manifest.fingerprint

    def __len__(self) -> int:
        return self.manifest.rows

    def shard_path(self, name: str) -> Path:
        return self._writer.shard_path(name)

    def read(self, name: str, columns: Iterable[str] | None = None) -> pd.DataFrame:
        return pd.read_parquet(self.shard_path(name), columns=list(columns) if columns is not None else None)

    def array(self, name: str, mmap: bool = True) -> np.ndarray:
        """One ``.npy`` shard, memory-mapped read-only by default (pages load on touch)."""
        return np.load(self.shard_path(name), mmap_mode="r" if mmap else None, allow_pickle=False)

    def iter_frames(self, columns: Iterable[str] | None = None) -> Iterator[tuple[str, pd.DataFrame]]:
        """``(name, frame)`` one shard at a time: memory is bounded by the largest shard."""
        for name in self.names:
            yield name, self.read(name, columns)

    def iter_arrays(self, mmap: bool = True) -> Iterator[tuple[str, np.ndarray]]:
        for name in self.names:
            yield name, self.array(name, mmap)

    def to_frame(self, columns: Iterable[str] | None = None) -> pd.DataFrame:
        """The whole dataset as one frame. Transitional: for nodes that still take one
        DataFrame; holds the corpus in memory, which streaming code must not do."""
        parts = [frame for _, frame in self.iter_frames(columns)]
        if not parts:
            return pd.DataFrame()
        out = pd.concat(parts, ignore_index=True)
        out.attrs["fingerprint"] = self.fingerprint
        return out

    def check_aligned_with(self, documents: "ShardedDataset", *, name: str = "attributes") -> None:
        """Raise unless this attribute set has the same shards and row counts as ``documents``
        (dolma's convention) and was made from them (``aligned_with`` = their fingerprint)."""
        from curation.shards.lineage import LineageError

        ours = [(s.name, s.rows) for s in self.manifest.shards]
        theirs = [(s.name, s.rows) for s in documents.manifest.shards]
        if ours != theirs:
            raise LineageError(
                f"{name} ({self.root}) is not aligned with documents ({documents.root}): shards/rows "
                f"{ours[:3]}... vs {theirs[:3]}...; re-make it: {self.manifest.remake or 're-run its stage'}")
        if self.manifest.aligned_with not in (None, documents.fingerprint):
            raise LineageError(
                f"{name} ({self.root}) was made from documents {self.manifest.aligned_with}, not from the current "
                f"documents {documents.fingerprint}; re-make it: {self.manifest.remake or 're-run its stage'}")
