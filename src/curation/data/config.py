"""``DataConfig``: the ``data`` group (conf/data/corpus.yaml), i.e. which corpus is read and how."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from curation.configuration import at_least, check, in_range, one_of

FORMATS = ("auto", "parquet", "jsonl")
DECONTAMINATE = ("drop", "flag", "off")


@dataclass
class DedupConfig:
    """``data.dedup``: exact and MinHash near-duplicate removal at ingest (docs/data.md)."""

    exact: bool = True  # drop later copies of the same normalised text (NFKC, case-folded, white space collapsed)
    fuzzy: bool = True  # drop near-copies: MinHash + LSH on word 5-gram shingles
    threshold: float = 0.8  # Jaccard similarity of the shingle sets at which two documents are near-duplicates
    ngram: int = 5  # words per shingle
    bands: int = 14  # LSH bands x rows = hashes per signature (datatrove's 14 x 8 for ~0.8)
    rows: int = 8
    seed: int = 1  # the hash functions' draw
    verify: bool = True  # drop LSH false positives: check candidate pairs by their exact Jaccard

    def __post_init__(self) -> None:
        in_range("threshold", self.threshold, 0.0, 1.0, low_open=True)
        at_least("ngram", self.ngram, 1)
        at_least("bands", self.bands, 1)
        at_least("rows", self.rows, 1)


@dataclass
class DataConfig:
    path: str = "data/01_raw/corpus"  # file, folder or glob; relative to the project root, or any fsspec URL
    format: str = "auto"  # auto | parquet | jsonl (jsonl, jsonl.gz, jsonl.zst)
    id_column: str = "id"  # unique document id column
    text_column: str = "text"  # text column (FineWeb/DCLM convention: "text")
    max_docs: Optional[int] = None  # keep at most this many valid documents (None = all)
    max_chars: Optional[int] = 1_000_000  # longer documents are dropped and counted (None = no limit)
    language: str = "keep"  # documents outside the raters' language (English): keep | drop (both counted) | off
    keep_columns: list[str] = field(default_factory=lambda: ["source", "url", "quality_label", "extra"])
    engine: str = "local"  # local (worker processes on this machine) | ray (one Ray task per shard)
    workers: Optional[int] = None  # local: shards at once, one process each; None = the CPUs available; 1 = in the driver
    ray_address: Optional[str] = None  # None = a local Ray instance; "auto" or "ray://host:10001" = a cluster
    dedup_buckets: int = 16  # hash buckets of the cross-shard duplicate passes (memory ~ documents / buckets)
    dedup: DedupConfig = field(default_factory=DedupConfig)
    decontaminate: str = "drop"  # drop | flag | off: documents sharing a 13-gram with an evaluation item
    decontaminate_ngram: int = 13  # words per n-gram (GPT-3 App. C)
    decontaminate_min_words: int = 8  # shorter items are skipped; 8-12 words: the whole item is the n-gram
    decontaminate_tasks: Optional[list[str]] = None  # None = eval.tasks (those with offline data)

    def __post_init__(self) -> None:
        check(bool(self.path), "path", self.path, "a file, folder, glob or URL (not empty)")
        one_of("format", self.format, FORMATS)
        at_least("max_docs", self.max_docs, 1, optional=True)  # 0 would ingest nothing
        at_least("max_chars", self.max_chars, 1, optional=True)
        one_of("language", self.language, ("keep", "drop", "off"))
        one_of("engine", self.engine, ("local", "ray"))
        at_least("workers", self.workers, 1, optional=True)
        at_least("dedup_buckets", self.dedup_buckets, 1)
        one_of("decontaminate", self.decontaminate, DECONTAMINATE)
        at_least("decontaminate_ngram", self.decontaminate_ngram, 1)
        at_least("decontaminate_min_words", self.decontaminate_min_words, 1)
        check(bool(self.id_column) and bool(self.text_column), "text_column", self.text_column,
              "a column name, as id_column")
