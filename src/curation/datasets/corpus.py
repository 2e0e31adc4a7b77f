"""A user's corpus as lazily loaded shards: a file, a directory or a glob, local or fsspec.

Built on Kedro's ``PartitionedDataset`` so each shard is read by a Kedro
dataset (kedro-datasets' ``pandas.ParquetDataset``, or our tolerant
``JSONLinesDataset``); this class only decides *which* files are shards.
"""

from __future__ import annotations

import glob as _glob
import logging
from copy import deepcopy
from functools import partial
from pathlib import PurePosixPath
from typing import Any

import fsspec

from kedro_datasets.partitions import PartitionedDataset

from curation.errors import UserError

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".jsonl.zstd", ".json.gz", ".json.zst", ".ndjson")
PARQUET_SUFFIXES = (".parquet", ".pq")
SUFFIXES = {"parquet": PARQUET_SUFFIXES, "jsonl": JSONL_SUFFIXES}
READERS = {"parquet": "pandas.ParquetDataset", "jsonl": "curation.datasets.jsonl.JSONLinesDataset"}

log = logging.getLogger(__name__)


def file_format(name: str) -> str | None:
    """``parquet`` or ``jsonl`` from a file's suffix; None for any other file."""
    return next((fmt for fmt, suffixes in SUFFIXES.items() if name.endswith(suffixes)), None)


def _infer_format(names: list[str]) -> str:
    """The formats of ``names`` (``parquet``, ``jsonl`` or ``parquet+jsonl`` for a folder of both: each file is
    then read in its own format); refused when no file has a known suffix."""
    found = [fmt for fmt in SUFFIXES if any(file_format(n) == fmt for n in names)]
    if found:
        return "+".join(found)
    raise CorpusFormatError(
        "data.path matches no parquet (.parquet) or jsonl (.jsonl, .jsonl.gz, .jsonl.zst) files: "
        f"{names[:5]}{' ...' if len(names) > 5 else ''}. Fix: point data.path at .parquet or .jsonl files, a "
        "folder of them or a glob (docs/data.md)"
    )


class CorpusPathError(UserError, FileNotFoundError):
    """``data.path`` names nothing, or no parquet / JSON Lines file (a user's mistake: a short message)."""


class CorpusFormatError(UserError, ValueError):
    """``data.path`` holds files, but none in a format the corpus reader knows."""


class CorpusReadError(UserError, ValueError):
    """A shard of the corpus cannot be read in its format: empty, corrupt or cut short (a copy or a
    download that was interrupted)."""


def _first_line(err: BaseException) -> str:
    """The reader's own reason, without Kedro's ``Failed while loading data from dataset ...`` preamble."""
    cause: BaseException = err
    while cause.__cause__ is not None:
        cause = cause.__cause__
    lines = [line.strip() for line in str(cause).splitlines() if line.strip()]
    return lines[0] if lines else type(cause).__name__


def _load_checked(load, name: str, fmt: str):
    """``load()`` of one shard, with a reader's failure turned into one line naming the file (issue #39):
    pyarrow's "Parquet magic bytes not found" or gzip's "Unknown compression method" under a 30-line trace
    does not say which of a thousand shards is broken or what to do about it. (A module-level function
    under ``functools.partial``: worker processes receive it pickled.)"""
    try:
        return load()
    except UserError:
        raise
    except Exception as err:
        raise CorpusReadError(
            f"{name}: cannot be read as {fmt} ({_first_line(err)}). Fix: replace the file with a complete "
            f"copy (an interrupted copy or download leaves it cut short), remove it from data.path, or set "
            f"data.format if it is not {fmt}.") from err


class CorpusShardsDataset(PartitionedDataset):
    """Load returns ``{shard_id: callable -> DataFrame}`` in sorted shard order.

    Args:
        path: a file, a directory (searched recursively) or a glob such as
            ``s3://bucket/fineweb/*/part-*.parquet``.
        format: ``auto`` (each file in the format of its suffix: a folder of both is read whole), ``parquet``
            or ``jsonl`` (only the files of that format).
        load_args: passed to the per-shard dataset's ``load_args``.
        credentials, fs_args: as in ``PartitionedDataset``.

    JSONL shards are read by :class:`~curation.datasets.jsonl.JSONLinesDataset`,
    so one line with invalid UTF-8 or broken JSON reaches validation (which
    counts it) instead of failing the whole shard.
    """

    def __init__(
        self,
        *,
        path: str,
        format: str = "auto",  # noqa: A002 - the natural config key
        load_args: dict[str, Any] | None = None,
        credentials: dict[str, Any] | None = None,
        fs_args: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        if format not in ("auto", "parquet", "jsonl"):
            raise ValueError(f"data.format must be auto, parquet or jsonl, got {format!r}")
        self._pattern = path if _glob.has_magic(path) else None
        self._given = path  # data.path as the user wrote it (a single file's folder becomes the root below)
        self._file: str | None = None
        prefix = path.split("://", 1)[0] + "://" if "://" in path else ""
        bare = path.split("://", 1)[-1]
        if self._pattern is not None:
            parts = PurePosixPath(bare).parts
            first_magic = next(i for i, p in enumerate(parts) if _glob.has_magic(p))
            base = prefix + (str(PurePosixPath(*parts[:first_magic])) if first_magic else ".")
        else:
            fs, fs_path = fsspec.core.url_to_fs(path, **(credentials or {}), **(fs_args or {}))
            if fs.isfile(fs_path):
                # One file is one partition; PartitionedDataset wants its folder as the root.
                self._file = fs_path
                base = prefix + str(PurePosixPath(bare).parent)
            else:
                base = path
        self._requested_format = format
        self._shard_load_args = dict(load_args or {})
        super().__init__(
            path=base,
            dataset={"type": "pandas.ParquetDataset"},  # replaced once the format is known
            filename_suffix="",
            credentials=credentials,
            fs_args=fs_args,
            metadata=metadata,
        )

    def _candidate_files(self) -> list[str]:
        if self._pattern is not None:
            found = self._filesystem.glob(self._pattern.split("://", 1)[-1])
            return sorted(p for p in found if self._filesystem.isfile(p))
        if self._file is not None:
            return [self._file]
        if not self._filesystem.exists(self._normalized_path):
            raise CorpusPathError(f"data.path does not exist: {self._path}. Fix: give data.path a parquet or "
                                  "JSON Lines file, a folder of them or a glob (docs/data.md).")
        return sorted(self._filesystem.find(self._normalized_path))

    def _list_partitions(self) -> list[str]:
        if self._cached_partitions is not None:
            return self._cached_partitions
        files = self._candidate_files()
        # auto: every file in the format of its suffix (a folder of parquet and JSON Lines files is read whole,
        # issue #44: it used to be read as parquet alone, its JSON Lines files skipped without a word)
        fmt = self._requested_format if self._requested_format != "auto" else _infer_format(files)
        wanted = fmt.split("+")
        self._formats = {f: file_format(f) for f in files if file_format(f) in wanted}
        self._cached_partitions = list(self._formats)
        if not self._cached_partitions:
            raise CorpusPathError(f"no {fmt} shards under data.path={self._given}. Fix: point "
                                  f"data.path at {fmt} files, or set data.format to the files' format")
        left_out = [f for f in files if file_format(f) not in (None, *wanted)]
        if left_out:  # data.format chose one format of a mixed folder: said, not silent
            log.warning("data.format=%s: %d file(s) of the other format under data.path=%s are not read (%s%s); "
                        "data.format=auto reads every parquet and JSON Lines file", fmt, len(left_out), self._given,
                        ", ".join(left_out[:3]), " ..." if len(left_out) > 3 else "")
        self._format = fmt
        return self._cached_partitions

    @staticmethod
    def _resolve(type_name: str, load_args: dict[str, Any]) -> tuple[type, dict[str, Any]]:
        from kedro.io.core import parse_dataset_definition

        dataset_type, config = parse_dataset_definition({"type": type_name, "load_args": load_args})
        return dataset_type, config

    def load(self) -> dict[str, Any]:
        """``{shard_id: callable}``, each shard read by the dataset of its own format."""
        self._invalidate_caches()
        readers = {fmt: self._resolve(READERS[fmt], self._shard_load_args) for fmt in SUFFIXES}
        shards = {}
        for path in self._list_partitions():
            fmt = self._formats[path]
            dataset_type, config = readers[fmt]
            kwargs = deepcopy(config)
            kwargs[self._filepath_arg] = self._join_protocol(path)
            shards[self._path_to_partition(path)] = (dataset_type(**kwargs).load, fmt)
        return {name: partial(_load_checked, load, name, fmt) for name, (load, fmt) in sorted(shards.items())}
