"""Pieces: how a large input file becomes several ingest shards (issue #52), and what ingest needs to know of it.

Memory is bounded per shard, and a shard used to be a file: a 2 GB FineWeb parquet file needed tens of GB per
worker. :class:`curation.datasets.CorpusShardsDataset` cuts a file of more than ``PIECE_MB`` of text into pieces
(parquet by row groups or rows, JSON Lines by lines), each its own shard named ``<file>#piece-<k>``; a smaller
file stays one shard under its own name, read as before (the same outputs, the same digests). A piece's frame
carries the file row of its first row in ``frame.attrs[ROW_OFFSET]``, so that rejected rows, and errors, name
rows of the file. These names live here, below both the readers (``curation.datasets``) and ingest
(``curation.data.ingest``), which both use them.
"""

from __future__ import annotations

import re

from curation.errors import UserError

PIECE_MB = 64  # uncompressed text per piece: ~0.6 GB of peak memory per worker while it is validated
PIECE = "#piece-"  # shard id of a piece: "<file>#piece-00003"
ROW_OFFSET = "row_offset"  # frame.attrs key: the file row (from 0) of the frame's first row


class CorpusMemoryError(UserError, MemoryError):
    """A shard ran out of memory while read or validated (a memory limit: a container's, ``ulimit -v``)."""


def source_file(shard_id: str) -> str:
    """The file a shard id names (a piece's id without its ``#piece-<k>``)."""
    return shard_id.split(PIECE, 1)[0]


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else ""


_OOM = re.compile(r"MemoryError|bad_alloc|out of memory|Cannot allocate memory|malloc of size \d+ failed")


def out_of_memory(err: BaseException) -> bool:
    """Whether ``err``, or an error it was raised from, is the process running out of memory (a ``MemoryError``,
    or a library's error that says so in words: pandas' JSON reader, Arrow's allocator)."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, MemoryError) or _OOM.search(str(current)):
            return True
        current = current.__cause__ or current.__context__
    return False


def memory_message(where: str, err: BaseException) -> str:
    """One line for a shard that ran out of memory: the file (and rows), the cause, the fix."""
    while err.__cause__ is not None:  # the reader's own error, not Kedro's "Failed while loading" around it
        err = err.__cause__
    detail = _first_line(err)
    detail = "" if detail == type(err).__name__ else detail
    return (f"{where}: ran out of memory ({type(err).__name__}{': ' + detail if detail else ''}). Fix: give the "
            f"run more memory, or lower data.workers (memory ~ data.workers x one shard; a large file is read "
            f"{PIECE_MB} MB of text at a time), then run the same command again: finished shards are kept.")
