"""A selection -> Megatron's indexed dataset (``curate-megatron convert``), and the tokenizer loaders.

``convert`` writes ``<prefix>.bin`` / ``<prefix>.idx`` with
``megatron.core.datasets.indexed_dataset.IndexedDatasetBuilder``: one sequence
per document, each ending with the tokenizer's ``<|endoftext|>`` (Megatron's
``--append-eod``), uint16 ids when the vocabulary has fewer than 65,500 entries
(int32 otherwise), as Megatron-LM's ``tools/preprocess_data.py`` does. Both
files are written under temporary names and renamed, so a killed conversion
leaves no prefix that a trainer would read. A blank text (null, empty or white
space only) is skipped and counted (``blank_skipped`` in the printed stats, and a
line on stderr); an existing ``<prefix>.bin``/``.idx`` is refused unless
``--force``; a prefix ending in ``/`` (or naming a folder) means inside that
folder, ``<folder>/<the input's name>``.

The tokenizer loaders (:func:`load_hf_tokenizer`, :func:`megatron_tokenizer`) serve training too.
"""

from __future__ import annotations

from curation.telemetry import disable as _disable_telemetry

_disable_telemetry()  # before Kedro, MLflow or the Hub load: nothing phones home (curation.telemetry)

import os
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from curation.errors import UserError


class LaunchInputError(UserError, ValueError):
    """An input of ``curate-megatron`` (``--input``, ``--tokenizer``) that is missing, unreadable or holds no
    documents: one line naming the file and the fix instead of a pyarrow or tokenizers trace (issue #39)."""


INPUT_KINDS = ("a parquet file of documents, a sharded documents folder (manifest.json, e.g. "
               "data/07_model_output/<namespace>/selected_documents) or a packed token folder (index.json)")

# --- tokenizer -------------------------------------------------------------------------------------


def load_hf_tokenizer(path: str | Path):
    """A ``tokenizers`` tokenizer.json (ours, or e.g. Qwen2.5's) that defines ``<|endoftext|>``."""
    from curation.lm import load_tokenizer

    if not Path(path).is_file():
        raise LaunchInputError(f"--tokenizer {path}: no such file. Fix: give the tokenizer.json the data was (or is "
                               f"to be) converted with, e.g. data/06_models/<namespace>/tokenizer.json")
    try:
        return load_tokenizer(path)
    except Exception as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise LaunchInputError(f"--tokenizer {path}: cannot be read as a tokenizer.json with <|endoftext|> "
                               f"({reason}). Fix: give a tokenizers-library tokenizer.json (e.g. the pretrain "
                               f"pipeline's data/06_models/<namespace>/tokenizer.json, or Qwen2.5's)") from err


def megatron_tokenizer(path: str | Path):
    """The tokenizer as megatron-core's datasets want it (``vocab_size``, ``eod``, ``unique_identifiers``)."""
    from megatron.core.tokenizers import MegatronTokenizerBase

    from curation.lm import eos_id

    class TokenizerJson(MegatronTokenizerBase):
        """A HF ``tokenizers`` tokenizer.json behind megatron-core's tokenizer interface."""

        def __init__(self, tokenizer_path: str) -> None:
            super().__init__(tokenizer_path, {"library": "tokenizers"})
            self._tokenizer = load_hf_tokenizer(tokenizer_path)

        def tokenize(self, text: str) -> list[int]:
            return self._tokenizer.encode(text, add_special_tokens=False).ids

        def detokenize(self, ids: list[int]) -> str:
            return self._tokenizer.decode(ids, skip_special_tokens=False)

        @property
        def vocab(self) -> dict[str, int]:
            return self._tokenizer.get_vocab()

        @property
        def vocab_size(self) -> int:
            return self._tokenizer.get_vocab_size()

        @property
        def eod(self) -> int:
            return eos_id(self._tokenizer)

        def apply_chat_template(self, *args, **kwargs):
            raise NotImplementedError("pre-training needs no chat template")

        @property
        def unique_identifiers(self) -> OrderedDict:
            return OrderedDict({"class": "curation.TokenizerJson", "tokenizer_path": str(self.path)})

    return TokenizerJson(str(path))


# --- conversion ------------------------------------------------------------------------------------


@dataclass
class ConversionStats:
    prefix: str  # <prefix>.bin / <prefix>.idx
    documents: int  # sequences written (one per document)
    tokens: int  # tokens written, EOS included
    dtype: str  # token dtype in the .bin file
    eod_id: int
    vocab_size: int
    seconds: float
    blank_skipped: int = 0  # rows whose text is null, empty or white space only: not written (rows = documents + these)


def _parquet(path: Path, text_column: str):
    """``path`` opened as parquet, its ``text_column`` checked to be text (one line naming the file otherwise)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        handle = pq.ParquetFile(path)
    except Exception as err:
        raise LaunchInputError(f"--input {path}: cannot be read as parquet ({str(err).strip() or type(err).__name__})."
                               f" Fix: give {INPUT_KINDS}; a file cut short by an interrupted copy must be copied "
                               f"again") from err
    names = handle.schema_arrow.names
    if text_column not in names:
        raise LaunchInputError(f"--input {path} has no column {text_column!r} (columns: {names}). Fix: name the "
                               f"documents' text column with --text-column")
    kind = handle.schema_arrow.field(text_column).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise LaunchInputError(f"--input {path}: column {text_column!r} holds {kind} values, not text. Fix: name "
                               f"the documents' text column with --text-column")
    return handle


def _documents_from_parquet(path: Path, text_column: str, tokenizer, batch_size: int = 512,
                            counts: Optional[dict[str, int]] = None) -> Iterator[np.ndarray]:
    """The documents of ``path``, tokenized, each with its EOS; a blank text (null, empty or white space only, what
    ingest drops as ``empty_text``) is skipped and counted in ``counts["blank"]``."""
    from curation.lm import eos_id

    eod = eos_id(tokenizer)
    handle = _parquet(path, text_column)
    counts = {} if counts is None else counts
    for batch in handle.iter_batches(batch_size=batch_size, columns=[text_column]):
        column = batch.column(0).to_pylist()
        texts = [t for t in column if t is not None and t.strip()]
        counts["blank"] = counts.get("blank", 0) + len(column) - len(texts)
        for encoding in tokenizer.encode_batch(texts, add_special_tokens=False):
            yield np.asarray([*encoding.ids, eod], dtype=np.int64)


def _documents_from_packed(folder: Path) -> Iterator[np.ndarray]:
    """Split our packed stream (``doc EOS doc EOS ...``) back into documents, each with its EOS."""
    from curation.lm.packing import PackedDataset

    packed = PackedDataset(folder)
    tokens = packed.tokens
    ends = np.flatnonzero(tokens == packed.index.eos_id)
    start = 0
    for end in ends:
        yield np.asarray(tokens[start:end + 1], dtype=np.int64)
        start = end + 1


def resolve_prefix(output_prefix: str | Path, input_path: str | Path) -> Path:
    """``--output-prefix`` as the path the files get (minus ``.bin`` / ``.idx``). A prefix that ends in ``/``, or
    names an existing folder, means inside that folder: ``<folder>/<the input's name>`` (``selected_documents``,
    or a parquet file's name without ``.parquet``), not ``<folder>.bin`` beside it."""
    raw = str(output_prefix)
    prefix = Path(raw)
    if raw.endswith(("/", os.sep)) or prefix.is_dir():
        name = Path(input_path).name
        for suffix in (".parquet", ".pq"):
            name = name.removesuffix(suffix)
        prefix = prefix / (name or "documents")
    return prefix


def convert(input_path: str | Path, output_prefix: str | Path, tokenizer_path: Optional[str | Path] = None,
            text_column: str = "text", force: bool = False) -> ConversionStats:
    """Write ``input_path`` as Megatron's indexed dataset ``<output_prefix>.bin/.idx``.

    input_path: a sharded documents folder (``manifest.json`` + ``shards/*.parquet``, e.g. the
        pipeline's ``selected_documents``; read shard by shard in manifest order) or a parquet file
        of documents (both need ``tokenizer_path``), or a packed token folder (``tokens.bin`` +
        ``index.json`` of :func:`curation.lm.pack_documents`, already tokenized).
    output_prefix: a folder (ending in ``/``, or an existing one) means inside it (:func:`resolve_prefix`). An
        existing ``<prefix>.bin`` or ``.idx`` is refused unless ``force`` (it may be another selection's).

    Blank texts (null, empty, white space only) are skipped and counted: ``blank_skipped``.
    """
    from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder

    t0 = time.perf_counter()
    source = Path(input_path)
    prefix = resolve_prefix(output_prefix, input_path)
    existing = [f"{prefix}{ext}" for ext in (".bin", ".idx") if Path(f"{prefix}{ext}").exists()]
    if existing and not force:
        raise LaunchInputError(f"--output-prefix {prefix}: {' and '.join(existing)} already exist"
                               f"{'s' if len(existing) == 1 else ''} (an earlier conversion, perhaps of another "
                               f"selection). Fix: pass --force to replace them, or give another --output-prefix")
    counts: dict[str, int] = {"blank": 0}
    sharded = source.is_dir() and (source / "manifest.json").is_file()
    if not source.exists() or (source.is_dir() and not sharded and not (source / "index.json").is_file()):
        what = "no such file or folder" if not source.exists() else "a folder without manifest.json or index.json"
        raise LaunchInputError(f"--input {source}: {what}. Fix: give {INPUT_KINDS}")
    if source.is_dir() and not sharded:
        from curation.lm.packing import PackedDataset

        index = PackedDataset(source).index
        vocab_size, eod = index.vocab_size, index.eos_id
        documents = _documents_from_packed(source)
    else:
        if tokenizer_path is None:
            raise LaunchInputError(f"--input {source} holds documents (text): converting them needs --tokenizer. Fix: "
                                   f"add --tokenizer <tokenizer.json>")
        from curation.lm import eos_id

        tokenizer = load_hf_tokenizer(tokenizer_path)
        vocab_size, eod = tokenizer.get_vocab_size(), eos_id(tokenizer)
        if sharded:
            from curation.shards import ShardedDataset

            shards = ShardedDataset(source)
            documents = (doc for name in shards.names
                         for doc in _documents_from_parquet(shards.shard_path(name), text_column, tokenizer,
                                                            counts=counts))
        else:
            _parquet(source, text_column)  # before any output: a bad input leaves nothing behind
            documents = _documents_from_parquet(source, text_column, tokenizer, counts=counts)
    dtype = DType.optimal_dtype(vocab_size)
    made = [p for p in reversed(prefix.parents) if not p.exists()]  # folders this call creates
    prefix.parent.mkdir(parents=True, exist_ok=True)
    tmp = prefix.with_name(f".{prefix.name}.tmp-{uuid.uuid4().hex[:8]}")
    n_docs = n_tokens = 0
    try:
        builder = IndexedDatasetBuilder(f"{tmp}.bin", dtype=dtype)
        for doc in documents:
            builder.add_document(doc, [len(doc)])  # a numpy array: the builder casts it to `dtype`
            n_docs += 1
            n_tokens += len(doc)
        builder.finalize(f"{tmp}.idx")
        if n_docs == 0:
            blank = f"{counts['blank']:,} rows, all blank" if counts["blank"] else "no row with text"
            raise LaunchInputError(f"--input {source} has no documents ({blank}). Fix: convert a selection "
                                   f"that holds documents")
        os.replace(f"{tmp}.bin", f"{prefix}.bin")
        os.replace(f"{tmp}.idx", f"{prefix}.idx")  # last: a prefix with an .idx is complete
    except BaseException as err:
        for ext in (".bin", ".idx"):
            Path(f"{tmp}{ext}").unlink(missing_ok=True)
        for folder in reversed(made):  # a failed conversion leaves no folder it made either
            try:
                folder.rmdir()
            except OSError:
                break
        if isinstance(err, OSError) and err.filename is None and err.errno is not None:
            # a write through the builder's handle names no file: name the output (a full disk, issue #39)
            raise OSError(err.errno, os.strerror(err.errno), f"{prefix}.bin") from err
        raise
    finally:
        for ext in (".bin", ".idx"):
            Path(f"{tmp}{ext}").unlink(missing_ok=True)
    return ConversionStats(str(prefix), n_docs, n_tokens, np.dtype(dtype).name, eod, vocab_size,
                           time.perf_counter() - t0, blank_skipped=counts["blank"])
