"""The manifest of a sharded dataset: which shards, how many rows, which inputs and config made it.

A sharded dataset is a folder::

    <root>/
      manifest.json          written last, atomically: the dataset is complete iff it exists
      shards/<name>.parquet  one file per shard (or <name>.npy for an array dataset)
      completions/<name>     JSON marker {rows, digest} written after the shard (datatrove's
                             ``completions/`` habit): a shard without one is redone on re-run
      stats/<name>.json      per-shard counts; the manifest holds their sum

Attributes (scores, embeddings) are their own sharded datasets whose shard names and row
counts equal those of the documents they describe (dolma's "attributes" convention): row ``i``
of ``scores/shards/part-00003.parquet`` is row ``i`` of ``documents/shards/part-00003.parquet``,
and both carry the caller's ``id``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from curation.cache import atomic_write_text

MANIFEST = "manifest.json"
SHARDS = "shards"
COMPLETIONS = "completions"
STATS = "stats"
FORMAT_VERSION = 1


@dataclass
class ShardInfo:
    name: str  # file stem under shards/, e.g. "part-00003"
    rows: int
    digest: str  # content hash of the shard (curation.cache.frame_fingerprint / array_digest)


@dataclass
class Manifest:
    stage: str  # the stage that wrote it, e.g. "ingest"
    kind: str  # "frame" (parquet shards) | "array" (.npy shards)
    shards: list[ShardInfo]
    schema: dict[str, str]  # column -> dtype (frame), or {"dtype": ..., "width": ...} (array)
    inputs: dict[str, str] = field(default_factory=dict)  # input dataset name -> its fingerprint
    config_digest: str = ""  # curation.cache.config_key of the stage's config
    remake: str = ""  # the command that re-makes this dataset (named in lineage errors)
    stats: dict[str, float] = field(default_factory=dict)  # per-shard stats, summed
    aligned_with: str | None = None  # fingerprint of the documents this attribute set is aligned with
    version: int = FORMAT_VERSION

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.shards)

    @property
    def fingerprint(self) -> str:
        """Content fingerprint: the ordered shard digests (a re-run that writes the same rows
        gives the same fingerprint, whatever engine wrote them)."""
        payload = json.dumps([(s.name, s.rows, s.digest) for s in self.shards]).encode()
        return hashlib.sha256(payload).hexdigest()[:20]

    def to_json(self) -> str:
        out = asdict(self)
        out["fingerprint"] = self.fingerprint
        out["rows"] = self.rows
        return json.dumps(out, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        raw: dict[str, Any] = json.loads(text)
        raw.pop("fingerprint", None)
        raw.pop("rows", None)
        raw["shards"] = [ShardInfo(**s) for s in raw["shards"]]
        return cls(**raw)


def write_manifest(root: str | Path, manifest: Manifest) -> None:
    atomic_write_text(Path(root) / MANIFEST, manifest.to_json())


def read_manifest(root: str | Path) -> Manifest:
    path = Path(root) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(
            f"{root} is not a finished sharded dataset (no {MANIFEST}); a run that was stopped "
            "before its last shard leaves no manifest: re-run the stage to finish it")
    return Manifest.from_json(path.read_text())
