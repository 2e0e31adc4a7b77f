"""Proxy models of Meta-rater (seeds/004 Alg. 1 steps 3-5): held-out set, token table, one proxy run.

- :func:`hold_out_validation` picks D_v: a seeded slice of the encyclopedic and
  book documents plus the human-labelled high rows (whole url groups, so no
  book has passages on both sides); those rows are never candidates.
- :class:`TokenTable` tokenises every document once (each followed by EOS, the
  layout of :mod:`curation.lm.packing`), so a proxy's training stream is a
  concatenation of slices, not a re-tokenisation.
- :class:`TokenWindows` reads a stream as non-overlapping (x, y) windows, the
  windowing of :class:`~curation.lm.packing.PackedDataset`, from memory.
- :class:`ProxyBench` trains one proxy on a selection for the fixed token
  budget with :func:`curation.lm.train` and returns the mean next-token loss on
  the whole validation stream (nats/token).

No Kedro, MLflow or Hydra imports.
"""

from __future__ import annotations

import dataclasses
import json
import resource
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
import pandas as pd
import torch
from tokenizers import Tokenizer

from curation.cache import array_digest, atomic_write, atomic_write_text, config_key, save_npy, texts_digest
from curation.lm import evaluate_loss, load_tokenizer, save_tokenizer, train, train_tokenizer
from curation.lm.config import PretrainConfig
from curation.lm.packing import token_dtype
from curation.lm.tokenizer import eos_id
from curation.metarater.config import ProxyConfig, ValidationConfig

LABEL_GROUP = "label"  # group name prefix of human-labelled validation rows ("label_1.0")


# --- the held-out validation set (D_v) ---


def hold_out_validation(documents: pd.DataFrame, config: ValidationConfig) -> pd.Series:
    """Name of the validation group of each held-out row (``<NA>`` for candidates), aligned with ``documents``.

    Groups: each value of ``config.categories`` in ``config.category_column``
    and each human label in ``config.labels`` (``label_1.0``); a labelled row
    belongs to its label group first. Within a group, a seeded
    ``config.fraction`` of the ``group_column`` values (every row of a url
    together; rows without one count alone) is held out, at least one.
    """
    for column in (config.category_column, config.label_column):
        if column not in documents:
            raise KeyError(f"documents have no column {column!r} (metarater.validation: "
                           f"{'category_column' if column == config.category_column else 'label_column'})")
    rng = np.random.default_rng(config.seed)
    groups = pd.Series(pd.NA, index=documents.index, dtype="string")
    labels = pd.to_numeric(documents[config.label_column], errors="coerce")
    categories = documents[config.category_column].astype("string")
    membership: list[tuple[str, pd.Series]] = [
        (f"{LABEL_GROUP}_{float(label)}", labels == float(label)) for label in config.labels
    ]
    labelled = labels.isin([float(label) for label in config.labels]).fillna(False)
    membership += [(str(c), (categories == c).fillna(False) & ~labelled) for c in config.categories]
    for name, member in membership:
        rows = documents.index[member.fillna(False).to_numpy(dtype=bool)]
        if len(rows) == 0:
            raise ValueError(f"validation group {name!r} has no documents; change metarater.validation")
        if config.group_column is not None and config.group_column in documents:
            keys = documents.loc[rows, config.group_column].astype("string")
            keys = keys.fillna(pd.Series(rows.astype(str), index=rows, dtype="string"))  # no url: a group alone
        else:
            keys = pd.Series(rows.astype(str), index=rows, dtype="string")
        unique = np.sort(keys.unique().to_numpy(dtype=str))
        n_out = max(1, int(round(config.fraction * len(unique))))
        chosen = set(rng.choice(unique, size=n_out, replace=False).tolist())
        groups.loc[rows[keys.isin(chosen).to_numpy()]] = name
    return groups


# --- tokens ---


@dataclass
class TokenTable:
    """Every document's tokens followed by one EOS, back to back (the packed-stream layout).

    Document ``i`` is ``tokens[offsets[i]:offsets[i + 1]]`` (EOS included).
    """

    tokens: np.ndarray  # (n_tokens,) uint16 (uint32 above 65,536 ids)
    offsets: np.ndarray  # (n_docs + 1,) int64

    @classmethod
    def build(cls, texts: Sequence[str], tokenizer: Tokenizer, batch_docs: int = 512) -> "TokenTable":
        eos = eos_id(tokenizer)
        dtype = token_dtype(tokenizer.get_vocab_size())
        pieces, lengths = [], []
        for start in range(0, len(texts), batch_docs):
            for enc in tokenizer.encode_batch(list(texts[start:start + batch_docs]), add_special_tokens=False):
                ids = np.asarray(enc.ids + [eos], dtype=dtype)
                pieces.append(ids)
                lengths.append(len(ids))
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        tokens = np.concatenate(pieces) if pieces else np.empty(0, dtype=dtype)
        return cls(tokens, offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def lengths(self, rows: np.ndarray | None = None) -> np.ndarray:
        lengths = np.diff(self.offsets)
        return lengths if rows is None else lengths[np.asarray(rows)]

    def stream(self, rows: Sequence[int], max_tokens: Optional[int] = None) -> np.ndarray:
        """The documents ``rows``, in that order, as one stream (cut after ``max_tokens`` if given)."""
        out, total = [], 0
        for row in rows:
            piece = self.tokens[self.offsets[row]:self.offsets[row + 1]]
            if max_tokens is not None and total + len(piece) >= max_tokens:
                out.append(piece[:max_tokens - total])
                total = max_tokens
                break
            out.append(piece)
            total += len(piece)
        return np.concatenate(out) if out else np.empty(0, dtype=self.tokens.dtype)

    def save(self, directory: Path) -> None:
        for name, value in (("tokens", self.tokens), ("offsets", self.offsets)):
            atomic_write(directory / f"{name}.npy", lambda p, v=value: save_npy(p, v))

    @classmethod
    def load(cls, directory: Path) -> "TokenTable":
        return cls(np.load(directory / "tokens.npy"), np.load(directory / "offsets.npy"))


class TokenWindows(torch.utils.data.Dataset):
    """Non-overlapping windows ``stream[i*T : i*T + T]`` with targets shifted by one (PackedDataset's layout)."""

    def __init__(self, stream: np.ndarray, seq_len: int):
        self.stream = np.asarray(stream)
        self.seq_len = seq_len

    def __len__(self) -> int:
        return max(len(self.stream) - 1, 0) // self.seq_len

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= i < len(self):
            raise IndexError(f"sequence {i} out of range [0, {len(self)})")
        start = i * self.seq_len
        window = torch.from_numpy(self.stream[start:start + self.seq_len + 1].astype(np.int64))
        return window[:-1], window[1:]


# --- one proxy ---


@dataclass
class ProxyBench:
    """Everything a proxy run needs, built once: tokens of every document, D_v, the LM config.

    ``rows`` given to :meth:`evaluate` index the documents the token table was built on.
    """

    table: TokenTable
    validation: TokenWindows
    validation_groups: dict[str, int]  # tokens per validation group
    proxy: ProxyConfig
    tokenizer: Tokenizer

    def pretrain_config(self, seed: Optional[int] = None) -> PretrainConfig:
        return self.proxy.pretrain_config(seed)

    def training_stream(self, rows: np.ndarray, seed: int) -> np.ndarray:
        """The selected documents in a seeded random order (the budget then samples windows of all of them)."""
        order = np.random.default_rng(seed).permutation(np.asarray(rows))
        return self.table.stream(order)

    def evaluate(self, rows: np.ndarray, seed: Optional[int] = None,
                 on_step: Optional[Callable[[int, dict], None]] = None) -> dict[str, Any]:
        """Train one proxy on documents ``rows`` for the token budget; its loss on D_v and run facts.

        Returns ``val_loss`` (nats/token over the whole validation stream),
        ``train_loss`` (last step), ``steps``, ``tokens``, ``selection_tokens``
        (tokens the selection holds: below the budget it is repeated),
        ``epochs`` (budget / selection tokens), ``seconds``, ``cpu_seconds``
        (process CPU time, comparable across loads) and ``history`` ([step, loss] pairs).
        """
        cfg = self.pretrain_config(seed)
        stream = self.training_stream(rows, cfg.train.seed)
        data = TokenWindows(stream, cfg.train.seq_len)
        if len(data) < cfg.train.batch_size:
            raise ValueError(f"the selection holds {len(stream)} tokens, less than one batch of "
                             f"{cfg.train.batch_size} x {cfg.train.seq_len}")
        started, cpu0 = time.perf_counter(), _cpu_seconds()
        out_dir = Path(tempfile.mkdtemp(prefix="metarater-proxy-"))
        try:
            result = train(cfg, data, out_dir, on_step=on_step, resume=False)
            val_loss = evaluate_loss(result.model, self.validation, cfg.train.batch_size)
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)
        return {
            "val_loss": float(val_loss),
            "train_loss": float(result.final_loss),
            "steps": int(result.steps),
            "tokens": int(result.tokens),
            "selection_docs": int(len(rows)),
            "selection_tokens": int(len(stream)),
            "epochs": float(result.tokens / max(len(stream), 1)),
            "seed": int(cfg.train.seed),
            "seconds": time.perf_counter() - started,
            "cpu_seconds": _cpu_seconds() - cpu0,
            "history": [[int(r["step"]), float(r["loss"])] for r in result.history if "loss" in r],
        }


def validation_stream(table: TokenTable, groups: pd.Series, max_tokens: int, seed: int) -> tuple[np.ndarray, dict]:
    """D_v as one stream: each group's documents in a seeded order, an equal share of ``max_tokens`` per group.

    Equal shares keep long book passages from outweighing short encyclopedia
    leads. Returns the stream and the tokens taken per group.
    """
    names = sorted(groups.dropna().unique())
    share = max_tokens // len(names)
    rng = np.random.default_rng(seed)
    parts, taken = [], {}
    for name in names:
        rows = np.flatnonzero((groups == name).fillna(False).to_numpy(dtype=bool))
        part = table.stream(rng.permutation(rows), max_tokens=share)
        parts.append(part)
        taken[name] = int(len(part))
    return np.concatenate(parts), taken


def build_bench(texts: Sequence[str], groups: pd.Series, proxy: ProxyConfig, validation: ValidationConfig,
                cache_dir: Path, external_validation: Optional[Sequence[str]] = None) -> ProxyBench:
    """Tokenizer + token table of ``texts`` (cached under ``cache_dir/tokens-<key>``) and D_v.

    The tokenizer is trained on a seeded sample of ``proxy.tokenizer_docs``
    documents of the whole corpus (not of any selection), so every proxy reads
    the same ids. ``external_validation`` (texts) replaces the held-out rows as D_v.
    """
    cfg = proxy.pretrain_config()
    key = fingerprint("metarater-tokens-v1", dataclasses.asdict(cfg.tokenizer), proxy.tokenizer_docs,
                      texts_digest(texts))
    directory = Path(cache_dir) / f"tokens-{key}"
    tokenizer_path = directory / "tokenizer.json"
    if (directory / "offsets.npy").exists() and tokenizer_path.exists():
        tokenizer, table = load_tokenizer(tokenizer_path), TokenTable.load(directory)
    else:
        sample = np.random.default_rng(0).permutation(len(texts))[:proxy.tokenizer_docs]
        tokenizer = train_tokenizer([texts[i] for i in np.sort(sample)], cfg.tokenizer.vocab_size,
                                    cfg.tokenizer.min_frequency)
        table = TokenTable.build(texts, tokenizer)
        directory.mkdir(parents=True, exist_ok=True)
        table.save(directory)
        atomic_write(tokenizer_path, lambda p: save_tokenizer(tokenizer, p))
    if external_validation is not None:
        external = TokenTable.build(list(external_validation), tokenizer)
        stream = external.stream(range(len(external)), max_tokens=validation.max_tokens)
        taken = {"external": int(len(stream))}
    else:
        stream, taken = validation_stream(table, groups, validation.max_tokens, validation.seed)
    windows = TokenWindows(stream, cfg.train.seq_len)
    if len(windows) == 0:
        raise ValueError(f"the validation set holds {len(stream)} tokens, less than one sequence of "
                         f"{cfg.train.seq_len}")
    return ProxyBench(table, windows, taken, proxy, tokenizer)


# --- small helpers: hashing, atomic files, CPU time ---


def fingerprint(*parts: Any) -> str:
    """A short stable hash of JSON-serialisable parts (configs, arrays as lists, other hashes):
    :func:`curation.cache.config_key` cut to 16 hex digits, the length existing sweep folders carry."""
    return config_key(*parts)[:16]


array_hash = array_digest


def write_json(path: Path, payload: Any) -> None:
    atomic_write_text(path, json.dumps(payload))


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
