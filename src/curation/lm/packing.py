"""Pack documents into one token stream and read it as fixed-length sequences.

On disk, a packed dataset is a folder with

- ``tokens.bin``: every document's tokens followed by one EOS, documents back to
  back (GPT-2/nanoGPT style: ``doc0 EOS doc1 EOS ...``), as a flat uint16 array
  (uint32 when the vocabulary exceeds 65,536 ids), read with ``np.memmap``;
- ``index.json``: dtype, counts and the tokenizer's EOS id / vocabulary size.

Sequence ``i`` is the window ``tokens[i*T : i*T + T]`` with targets shifted by one
(``tokens[i*T + 1 : i*T + T + 1]``), so windows do not overlap and a document may
span two of them; the few tokens after the last full window are not used
(``index["unused_tail_tokens"]``). This is the format both trainers read.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import torch
from tokenizers import Tokenizer

from curation.lm.tokenizer import eos_id

TOKENS_FILE = "tokens.bin"
INDEX_FILE = "index.json"


@dataclass
class PackedIndex:
    seq_len: int  # tokens per training sequence (T)
    n_tokens: int  # tokens in tokens.bin, EOS included
    n_docs: int  # documents packed (= EOS tokens written)
    n_sequences: int  # (n_tokens - 1) // seq_len full windows
    unused_tail_tokens: int  # tokens after the last full window (+ its one-token target shift)
    dtype: str  # "uint16" or "uint32"
    eos_id: int  # id placed after every document
    vocab_size: int  # tokenizer vocabulary size


def token_dtype(vocab_size: int) -> np.dtype:
    """Smallest unsigned dtype that holds every id of the vocabulary."""
    return np.dtype(np.uint16) if vocab_size <= 2**16 else np.dtype(np.uint32)


def _batches(texts: Iterable[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for text in texts:
        batch.append(text)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def pack_documents(
    texts: Iterable[str],
    tokenizer: Tokenizer,
    out_dir: str | Path,
    seq_len: int,
    batch_docs: int = 512,
) -> "PackedDataset":
    """Tokenise ``texts`` in order, append EOS to each, stream them into ``out_dir/tokens.bin``.

    Memory stays at one batch of ``batch_docs`` documents, so selections larger
    than RAM pack too. Returns the opened :class:`PackedDataset`.
    """
    if seq_len < 1:
        raise ValueError(f"seq_len={seq_len} must be >= 1")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    eos = eos_id(tokenizer)
    vocab_size = tokenizer.get_vocab_size()
    dtype = token_dtype(vocab_size)
    n_tokens = n_docs = 0
    tmp = out_dir / (TOKENS_FILE + ".tmp")  # renamed at the end: a killed run leaves no half file
    with open(tmp, "wb") as f:
        for batch in _batches(texts, batch_docs):
            encodings = tokenizer.encode_batch(batch, add_special_tokens=False)
            pieces = []
            for enc in encodings:
                pieces.append(np.asarray(enc.ids, dtype=dtype))
                pieces.append(np.asarray([eos], dtype=dtype))
            chunk = np.concatenate(pieces)
            chunk.tofile(f)
            n_tokens += chunk.size
            n_docs += len(batch)
    if n_docs == 0:
        tmp.unlink()
        raise ValueError("no documents to pack")
    tmp.replace(out_dir / TOKENS_FILE)
    n_sequences = max(n_tokens - 1, 0) // seq_len
    index = PackedIndex(
        seq_len=seq_len,
        n_tokens=n_tokens,
        n_docs=n_docs,
        n_sequences=n_sequences,
        unused_tail_tokens=n_tokens - n_sequences * seq_len,
        dtype=dtype.name,
        eos_id=eos,
        vocab_size=vocab_size,
    )
    (out_dir / INDEX_FILE).write_text(json.dumps(asdict(index), indent=2))
    return PackedDataset(out_dir)


class PackedDataset(torch.utils.data.Dataset):
    """Fixed-length (x, y) windows over a packed token stream (see module docstring).

    ``seq_len`` may be given to re-window the same stream at another length.
    """

    def __init__(self, path: str | Path, seq_len: int | None = None):
        self.path = Path(path)
        meta = json.loads((self.path / INDEX_FILE).read_text())
        self.index = PackedIndex(**meta)
        self.seq_len = seq_len or self.index.seq_len
        self.tokens = np.memmap(self.path / TOKENS_FILE, dtype=self.index.dtype, mode="r", shape=(self.index.n_tokens,))

    def __len__(self) -> int:
        return max(self.index.n_tokens - 1, 0) // self.seq_len

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= i < len(self):
            raise IndexError(f"sequence {i} out of range [0, {len(self)})")
        start = i * self.seq_len
        window = torch.from_numpy(self.tokens[start : start + self.seq_len + 1].astype(np.int64))
        return window[:-1], window[1:]  # inputs, next-token targets

    @property
    def n_tokens(self) -> int:
        return self.index.n_tokens
