"""``DataConfig``: the ``data`` group (conf/data/corpus.yaml), i.e. which corpus is read and how."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from curation.configuration import at_least, check, one_of

FORMATS = ("auto", "parquet", "jsonl")


@dataclass
class DataConfig:
    path: str = "data/01_raw/corpus"  # file, folder or glob; relative to the project root, or any fsspec URL
    format: str = "auto"  # auto | parquet | jsonl (jsonl, jsonl.gz, jsonl.zst)
    id_column: str = "id"  # unique document id column
    text_column: str = "text"  # text column (FineWeb/DCLM convention: "text")
    max_docs: Optional[int] = None  # keep at most this many valid documents (None = all)
    max_chars: Optional[int] = 1_000_000  # longer documents are dropped and counted (None = no limit)
    keep_columns: list[str] = field(default_factory=lambda: ["source", "url", "quality_label", "extra"])
    engine: str = "local"  # local (one shard at a time) | ray (one Ray task per shard)
    ray_address: Optional[str] = None  # None = a local Ray instance; "auto" or "ray://host:10001" = a cluster
    dedup_buckets: int = 16  # hash buckets of the cross-shard duplicate-id pass (memory ~ ids / buckets)

    def __post_init__(self) -> None:
        check(bool(self.path), "path", self.path, "a file, folder, glob or URL (not empty)")
        one_of("format", self.format, FORMATS)
        at_least("max_docs", self.max_docs, 1, optional=True)  # 0 would ingest nothing
        at_least("max_chars", self.max_chars, 1, optional=True)
        one_of("engine", self.engine, ("local", "ray"))
        at_least("dedup_buckets", self.dedup_buckets, 1)
        check(bool(self.id_column) and bool(self.text_column), "text_column", self.text_column,
              "a column name, as id_column")
