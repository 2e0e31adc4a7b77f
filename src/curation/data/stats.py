"""Document statistics per document and per source (the first processing step).

Definitions (per document):

``n_chars``         number of Unicode code points
``n_words``         number of white-space separated tokens
``n_lines``         number of ``\\n``-separated lines (a text without newline has 1)
``non_alpha_frac``  share of non-white-space characters that are not letters
                    (digits, punctuation, symbols, ``|`` table rules ...); a
                    high value flags menus, tables and code rather than prose
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from curation.data.codepoints import char_table, code_points, span_counts

_UNKNOWN_SOURCE = "unknown"


def document_statistics(documents: pd.DataFrame) -> pd.DataFrame:
    """One row per document: ``id, source, n_chars, n_words, n_lines, non_alpha_frac``.

    ``source`` is ``"unknown"`` when the corpus has no source column. The counts are the regex counts
    ``\\s`` (white space), ``\\S+`` (words), ``[^\\W\\d_]`` (letters, any script) and ``\\n``, taken
    with numpy over each chunk of documents' code points and per-code-point tables that those same
    regexes built (``curation.data.codepoints``): the pandas ``str.count`` of each regex, value for value (tested
    on the corpus), without a regex call per document.
    """
    text = documents["text"].astype("string")
    if text.isna().any():
        raise ValueError(f"document_statistics: {int(text.isna().sum())} documents have no text (validated "
                         "documents always have one)")
    counts = _char_counts(text.tolist())
    n_chars = counts["chars"]
    visible = n_chars - counts["space"]
    non_alpha = np.divide(
        visible - counts["alpha"], visible, out=np.zeros(len(text), dtype="float64"), where=visible > 0
    )
    if "source" in documents.columns:
        source = documents["source"].astype("string").fillna(_UNKNOWN_SOURCE)
    else:
        source = pd.Series([_UNKNOWN_SOURCE] * len(documents), dtype="string")
    return pd.DataFrame(
        {
            "id": documents["id"].astype("string").to_numpy(),
            "source": source.to_numpy(),
            "n_chars": n_chars,
            "n_words": counts["words"],
            "n_lines": counts["newlines"] + 1,
            "non_alpha_frac": non_alpha,
        }
    )


# code points per numpy pass: <= ~16 bytes of temporaries per code point
_CHUNK_CHARS = 1 << 23
_SPACE = re.compile(r"\s")
_LETTER = re.compile(r"[^\W\d_]")  # "a letter" in any script under Python's Unicode regex


def _char_counts(texts: list[str]) -> dict[str, np.ndarray]:
    """Per document (int64): code points, white-space characters, words (maximal non-white-space runs),
    letters and newlines."""
    space_of, letter_of = char_table(_SPACE), char_table(_LETTER)
    lengths = np.fromiter(map(len, texts), np.int64, len(texts))
    ends = np.cumsum(lengths)
    out = {k: np.zeros(len(texts), np.int64) for k in ("space", "words", "alpha", "newlines")}
    lo = 0
    while lo < len(texts):
        # a chunk of whole documents, at most _CHUNK_CHARS code points unless one document is longer
        before = ends[lo - 1] if lo else 0
        hi = max(lo + 1, int(np.searchsorted(ends, before + _CHUNK_CHARS, side="right")))
        codes = code_points("".join(texts[lo:hi]))
        bounds = np.concatenate(([0], ends[lo:hi] - before))
        space = space_of[codes]
        starts = ~space  # a word starts at a non-space character after a space or at its document's start
        starts[1:] &= space[:-1]
        first = bounds[:-1][bounds[:-1] < len(codes)]
        starts[first] = ~space[first]
        for key, flags in (("space", space), ("words", starts), ("alpha", letter_of[codes]),
                           ("newlines", codes == 10)):
            out[key][lo:hi] = span_counts(flags, bounds[:-1], bounds[1:])
        lo = hi
    return {"chars": lengths, **out}


def document_statistics_shard(frame: pd.DataFrame, name: str):
    """The per-shard function (:func:`curation.shards.run_shards`) of :func:`document_statistics_shards`."""
    from curation.shards.executor import ShardResult

    stats = document_statistics(frame)
    if "category" in frame.columns:
        stats["category"] = frame["category"].to_numpy()
    return ShardResult({"document_stats": stats}, {"docs": len(stats)})


def document_statistics_shards(documents, engine=None) -> pd.DataFrame:
    """:func:`document_statistics` (+ ``category`` when present) of a sharded documents dataset
    (:class:`curation.shards.ShardedDataset`), one shard in memory at a time: the result has
    ~100 bytes per document (no text), in shard-then-row order.

    ``engine`` (an :class:`curation.shards.EngineConfig`): the shards' statistics are computed by
    :func:`curation.shards.run_shards` (``data.workers`` processes, or Ray) into a temporary sharded
    dataset, then read back in order; None: in this process, shard after shard."""
    columns = set(documents.manifest.schema)
    wanted = tuple(c for c in ("id", "text", "source", "category") if c in columns)
    if engine is not None and documents.names:
        return _statistics_on_engine(documents, wanted, engine)
    parts = []
    for _, frame in documents.iter_frames(list(wanted)):
        parts.append(document_statistics_shard(frame, "").outputs["document_stats"])
    if not parts:
        return document_statistics(pd.DataFrame({"id": [], "text": []}))
    return pd.concat(parts, ignore_index=True)


def _read_shard(root: str, name: str, columns: tuple[str, ...]) -> pd.DataFrame:
    from curation.shards import ShardWriter

    return pd.read_parquet(ShardWriter(root, "frame").shard_path(name), columns=list(columns))


def _statistics_on_engine(documents, wanted: tuple[str, ...], engine) -> pd.DataFrame:
    import tempfile
    from functools import partial

    from curation.shards import ShardTask, ShardWriter, run_shards

    with tempfile.TemporaryDirectory(prefix="document_stats-") as work:
        tasks = [ShardTask(n, partial(_read_shard, str(documents.root), n, wanted)) for n in documents.names]
        run_shards(document_statistics_shard, tasks, {"document_stats": (work, "frame")}, engine,
                   desc="document statistics")
        writer = ShardWriter(work, "frame")
        parts = [pd.read_parquet(writer.shard_path(n)) for n in documents.names]
    return pd.concat(parts, ignore_index=True)


def token_lengths(texts: list[str], tokenizer_path: str, batch_size: int = 256) -> np.ndarray:
    """Untruncated token count of every text, ``batch_size`` texts at a time.

    Only the counts are kept: a ``tokenizers`` Encoding also holds token strings, offsets and
    masks (~100 bytes per token), so encoding 20k web documents in one batch held ~2 GB.
    """
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(tokenizer_path)
    tokenizer.no_truncation()
    tokenizer.no_padding()
    out = np.empty(len(texts), dtype=np.int64)
    for start in range(0, len(texts), batch_size):
        batch = tokenizer.encode_batch_fast(texts[start:start + batch_size])  # ids only: no offsets to track
        out[start:start + len(batch)] = [len(e.ids) for e in batch]
    return out


def source_statistics(doc_stats: pd.DataFrame) -> pd.DataFrame:
    """Per source: document count and share (the source mix), character totals, means.

    The last row, ``source == "__all__"``, aggregates the whole corpus.
    """
    def _agg(frame: pd.DataFrame) -> dict[str, float]:
        return {
            "docs": int(len(frame)),
            "chars": int(frame["n_chars"].sum()),
            "words": int(frame["n_words"].sum()),
            "mean_chars": float(frame["n_chars"].mean()) if len(frame) else 0.0,
            "median_chars": float(frame["n_chars"].median()) if len(frame) else 0.0,
            "mean_words": float(frame["n_words"].mean()) if len(frame) else 0.0,
            "mean_lines": float(frame["n_lines"].mean()) if len(frame) else 0.0,
            "mean_non_alpha_frac": float(frame["non_alpha_frac"].mean()) if len(frame) else 0.0,
        }

    rows = [{"source": src, **_agg(group)} for src, group in doc_stats.groupby("source", sort=True)]
    total = len(doc_stats)
    table = pd.DataFrame(rows, columns=["source", "docs", "chars", "words", "mean_chars", "median_chars",
                                        "mean_words", "mean_lines", "mean_non_alpha_frac"])
    table["share"] = table["docs"] / total if total else 0.0
    table = table.sort_values("docs", ascending=False, kind="stable")
    overall = pd.DataFrame([{"source": "__all__", **_agg(doc_stats), "share": 1.0}])
    return pd.concat([table, overall], ignore_index=True)
