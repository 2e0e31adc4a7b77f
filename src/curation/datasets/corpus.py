"""A user's corpus as lazily loaded shards: a file, a directory or a glob, local or fsspec.

Built on Kedro's ``PartitionedDataset``; each shard is read by a Kedro dataset
(:class:`~curation.datasets.parquet.ParquetShardDataset` or the tolerant
:class:`~curation.datasets.jsonl.JSONLinesDataset`); this class decides *which* files are read (every file a
reader knows, or a refusal naming those it would leave out) and cuts a large file into pieces of bounded
text, each one shard.
"""

from __future__ import annotations

import glob as _glob
import logging
import os
from functools import partial
from pathlib import PurePosixPath
from typing import Any

import fsspec

from kedro_datasets.partitions import PartitionedDataset

from curation.data.pieces import PIECE, PIECE_MB, CorpusMemoryError, memory_message, out_of_memory
from curation.datasets.jsonl import CODECS, JSONLinesDataset, looks_like_json_lines, plan_lines
from curation.datasets.parquet import ParquetShardDataset, plan_rows
from curation.errors import UserError

# every suffix the readers know: parquet (".parquet.snappy": parquet whose pages are snappy-compressed, as some
# exporters name it), JSON Lines plain or compressed by any codec of jsonl.CODECS; a plain ".json" file is read as
# JSON Lines when it is one (its first line a JSON object), and is metadata otherwise
PARQUET_SUFFIXES = (".parquet", ".pq", ".parq", ".parquet.snappy")
JSONL_BASES = (".jsonl", ".ndjson", ".json")
JSONL_SUFFIXES = (".jsonl", ".ndjson") + tuple(base + codec for base in JSONL_BASES for codec in CODECS)
SUFFIXES = {"parquet": PARQUET_SUFFIXES, "jsonl": JSONL_SUFFIXES}
MAYBE_JSONL = ".json"
# files of a folder that are not documents, whatever their content: documentation and dataset cards, checksums;
# a path part starting with "." or "_" (.git, _SUCCESS, _delta_log) is not read either (Hadoop's convention), nor
# the completion markers of a sharded dataset (curation.shards: a run's ``documents`` folder can be a corpus)
NOT_DATA_SUFFIXES = (".md", ".rst", ".yaml", ".yml", ".crc", ".lock")
NOT_DATA_NAMES = ("readme", "license", "licence", "notice", "changelog", "citation")

log = logging.getLogger(__name__)


def file_format(name: str) -> str | None:
    """``parquet`` or ``jsonl`` from a file's suffix; None for any other file (``.json``: see :func:`_formats`)."""
    return next((fmt for fmt, suffixes in SUFFIXES.items() if name.endswith(suffixes)), None)


def _not_data(relative: str) -> bool:
    parts = PurePosixPath(relative).parts
    name = parts[-1].lower() if parts else ""
    return (any(p.startswith((".", "_")) for p in parts) or name.endswith(NOT_DATA_SUFFIXES)
            or name.startswith(NOT_DATA_NAMES) or "completions" in parts[:-1])


def _infer_format(names: list[str]) -> str:
    """The formats of ``names`` (``parquet``, ``jsonl`` or ``parquet+jsonl`` for a folder of both: each file is
    then read in its own format); refused when no file has a known suffix."""
    found = [fmt for fmt in SUFFIXES if any(file_format(n) == fmt for n in names)]
    if found:
        return "+".join(found)
    raise CorpusFormatError(
        "data.path matches no parquet (.parquet, .pq, .parquet.snappy) or jsonl (.jsonl, .ndjson, JSON Lines in "
        f".json; gz, bz2, xz, zst) files: {names[:5]}{' ...' if len(names) > 5 else ''}. Fix: point data.path at "
        "parquet or JSON Lines files, a folder of them or a glob (docs/data.md)"
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
    first = lines[0] if lines else type(cause).__name__
    # a damaged file's bytes can reach the reader's message (thrift: "don't know what type: \x8f"): escaped, so
    # that the one line stays one printable line
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in first)[:300]


def _load_checked(load, name: str, fmt: str):
    """``load()`` of one shard, with a reader's failure turned into one line naming the file (issue #39):
    pyarrow's "Parquet magic bytes not found" or gzip's "Unknown compression method" under a 30-line trace
    does not say which of a thousand shards is broken or what to do about it; nor does a memory limit's
    bare ``MemoryError`` (issue #52). ``name``: the file, and the rows or lines of a piece. (A module-level
    function under ``functools.partial``: worker processes receive it pickled.)"""
    try:
        return load()
    except UserError:
        raise
    except MemoryError as err:
        raise CorpusMemoryError(memory_message(name, err)) from err
    except Exception as err:
        raise _read_error(name, fmt, err) from err


def _read_error(name: str, fmt: str, err: BaseException, path: str | None = None) -> UserError:
    if out_of_memory(err):  # a parser that turned the MemoryError into its own error (pandas' JSON reader)
        return CorpusMemoryError(memory_message(name, err))
    if path is not None and isinstance(err, FileNotFoundError) and os.path.islink(path):
        # a link whose target is gone was called "an interrupted copy or download" (issue #52)
        return CorpusReadError(
            f"{name}: is a symbolic link to {os.readlink(path)}, which does not exist. Fix: restore the file it "
            f"points to (a moved or unmounted folder?), or remove the link from data.path.")
    return CorpusReadError(
        f"{name}: cannot be read as {fmt} ({_first_line(err)}). Fix: replace the file with a complete "
        f"copy (an interrupted copy or download leaves it cut short or damaged), remove it from data.path, "
        f"or set data.format if it is not {fmt}.")


class CorpusShardsDataset(PartitionedDataset):
    """Load returns ``{shard_id: callable -> DataFrame}`` in sorted shard order.

    Args:
        path: a file, a directory (searched recursively) or a glob such as
            ``s3://bucket/fineweb/*/part-*.parquet``.
        format: ``auto`` (each file in the format of its suffix: a folder of both is read whole), ``parquet``
            or ``jsonl`` (only the files of that format).
        load_args: passed to the per-shard dataset's ``load_args``.
        piece_mb: text per shard; a larger file is read as several shards (pieces) of about this much
            uncompressed text each, parquet by row groups or rows, JSON Lines by lines (issue #52).
        credentials, fs_args: as in ``PartitionedDataset``.

    JSONL shards are read by :class:`~curation.datasets.jsonl.JSONLinesDataset`,
    so one line with invalid UTF-8 or broken JSON reaches validation (which
    counts it) instead of failing the whole shard; parquet shards by
    :class:`~curation.datasets.parquet.ParquetShardDataset`, which reads a text value that is not UTF-8 as bytes
    (counted as ``invalid_utf8``, not a failure of the shard).
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
        piece_mb: float = PIECE_MB,
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
        self._piece_mb = float(piece_mb)
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

    def _relative(self, path: str) -> str:
        root = self._normalized_path.rstrip("/") + "/"
        return path[len(root):] if path.startswith(root) else PurePosixPath(path).name

    def _classify(self, files: list[str]) -> tuple[dict[str, str], list[str], list[str]]:
        """``({file: format}, not documents, unknown)``: every file a reader knows, in its format (a ``.json``
        file when it holds JSON Lines); the files that are not documents (documentation, metadata ``.json``,
        hidden or ``_`` files); the rest, which no reader knows."""
        known, skipped, unknown = {}, [], []
        for f in files:
            fmt = file_format(f)
            if fmt is None and f.endswith(MAYBE_JSONL):
                fmt = "jsonl" if looks_like_json_lines(self._join_protocol(f), self._storage) else None
                if fmt is None and self._file is None:
                    skipped.append(f)
                    continue
            if fmt is not None and (self._file is not None or not _not_data(self._relative(f))):
                known[f] = fmt
            elif self._file is None and _not_data(self._relative(f)):
                skipped.append(f)
            else:
                unknown.append(f)
        return known, skipped, unknown

    def _list_partitions(self) -> list[str]:
        if self._cached_partitions is not None:
            return self._cached_partitions
        files = self._candidate_files()
        known, skipped, unknown = self._classify(files)
        if not known:
            _infer_format(files)  # raises: no file in a format the reader knows
        if unknown:
            # issue #52: a folder lost every file whose suffix was not the one it picked, while the summary said
            # "1 of 1 shards"; now a folder is read whole or refused, naming what would be left out
            names = ", ".join(self._relative(f) for f in unknown[:5]) + (" ..." if len(unknown) > 5 else "")
            raise CorpusFormatError(
                f"data.path={self._given}: {len(unknown)} of its {len(known) + len(unknown)} files "
                f"{'is' if len(unknown) == 1 else 'are'} in no format "
                f"the corpus reader knows and would be left out: {names}. Fix: convert them to parquet or JSON "
                f"Lines, move them out of data.path, or point data.path at a glob of the files to read (e.g. "
                f"'{self._given.rstrip('/')}/**/*.parquet'); read: .parquet, .pq, .parquet.snappy, .jsonl, .ndjson, "
                f"JSON Lines .json, each JSON Lines one also .gz, .bz2, .xz or .zst")
        if skipped:
            log.info("data.path=%s: %d file(s) not read, not documents (documentation, metadata, hidden): %s%s",
                     self._given, len(skipped), ", ".join(self._relative(f) for f in skipped[:5]),
                     " ..." if len(skipped) > 5 else "")
        found = "+".join(fmt for fmt in SUFFIXES if fmt in known.values())
        # auto: every file in the format of its suffix (a folder of parquet and JSON Lines files is read whole,
        # issue #44: it used to be read as parquet alone, its JSON Lines files skipped without a word)
        fmt = self._requested_format if self._requested_format != "auto" else found
        wanted = fmt.split("+")
        self._formats = {f: known[f] for f in known if known[f] in wanted}
        self._cached_partitions = list(self._formats)
        if not self._cached_partitions:
            raise CorpusPathError(f"no {fmt} shards under data.path={self._given}. Fix: point "
                                  f"data.path at {fmt} files, or set data.format to the files' format")
        left_out = [f for f in known if known[f] not in wanted]
        if left_out:  # data.format chose one format of a mixed folder: said, not silent
            log.warning("data.format=%s: %d file(s) of the other format under data.path=%s are not read (%s%s); "
                        "data.format=auto reads every parquet and JSON Lines file", fmt, len(left_out), self._given,
                        ", ".join(left_out[:3]), " ..." if len(left_out) > 3 else "")
        self._format = fmt
        return self._cached_partitions

    @property
    def _storage(self) -> dict[str, Any]:
        return {**self._credentials, **self._fs_args}

    def _pieces(self, path: str, fmt: str) -> list[tuple[str, Any]]:
        """``[(suffix of the shard id, dataset)]``: one for a file of at most ``piece_mb`` of text (its own id,
        read whole as before pieces existed), one per piece for a larger one."""
        url = self._join_protocol(path)
        args = {"filepath": url, "load_args": self._shard_load_args, "credentials": self._credentials or None}
        limit = int(self._piece_mb * (1 << 20))
        if fmt == "parquet":
            rows = plan_rows(url, limit, self._storage)
            if rows is None:
                return [("", ParquetShardDataset(**args), "")]
            return [(f"{PIECE}{k:05d}", ParquetShardDataset(**args, rows=r), f" (rows {r[0]}-{r[1] - 1}, from 0)")
                    for k, r in enumerate(rows)]
        compressed = any(path.endswith(c) for c in CODECS)
        if not compressed and self._filesystem.size(path) <= limit:
            return [("", JSONLinesDataset(**args), "")]
        lines = plan_lines(url, limit, self._storage)
        if lines is None:
            return [("", JSONLinesDataset(**args), "")]
        ends = [p[2] for p in lines[1:]] + [None]
        return [(f"{PIECE}{k:05d}", JSONLinesDataset(**args, piece=p),
                 f" (lines {p[2]}-{end - 1 if end else 'end'}, from 1)") for k, (p, end) in enumerate(zip(lines, ends))]

    def load(self) -> dict[str, Any]:
        """``{shard_id: callable}`` in file order, each shard read by the dataset of its own format; a file of
        more than ``piece_mb`` of text is several shards, ``<file>#piece-<k>`` (issue #52: memory per shard is
        bounded whatever a file's size)."""
        self._invalidate_caches()
        shards = {}
        for path in sorted(self._list_partitions(), key=self._path_to_partition):
            fmt = self._formats[path]
            name = self._path_to_partition(path)
            try:  # planning reads a parquet file's footer, or scans a large JSON Lines file: it can fail too
                pieces = self._pieces(path, fmt)
            except UserError:
                raise
            except Exception as err:
                raise _read_error(name, fmt, err, path if self._protocol == "file" else None) from err
            for suffix, dataset, where in pieces:
                shards[name + suffix] = partial(_load_checked, dataset.load, name + where, fmt)
        return shards
