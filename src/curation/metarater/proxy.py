"""Proxy models of Meta-rater (seeds/004 Alg. 1 steps 3-5): held-out set, token table, one proxy run.

- :func:`held_out_sets` picks D_v and the judge set: by default each a slice of
  the corpus in its own category proportions, drawn from documents no rater
  trained on (:func:`proportional_holdout`); :func:`hold_out_validation` is the
  earlier high-quality D_v (encyclopedic, book and human-labelled-high rows).
  Held-out rows are never candidates.
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


VALIDATION, TEST = "validation", "test"  # the two held-out sets: D_v (regressed on) and the judge set


def _categories(documents: pd.DataFrame, column: str) -> pd.Series:
    if column in documents:
        return documents[column].astype("string").fillna("unknown")
    return pd.Series("all", index=documents.index, dtype="string")  # a corpus without categories: one


def proportional_holdout(documents: pd.DataFrame, config: ValidationConfig, trained: np.ndarray,
                         taken: np.ndarray, fraction: float, seed_offset: int) -> pd.Series:
    """``round(fraction * n_c)`` documents of each category c (n_c: the corpus's count), drawn at random from
    the rows that no rater trained on (``~trained``) and that no other set took (``~taken``); the category
    name per chosen row, ``<NA>`` elsewhere. The shares therefore equal the corpus's up to rounding."""
    rng = np.random.default_rng([config.seed, seed_offset])
    categories = _categories(documents, config.category_column)
    out = pd.Series(pd.NA, index=documents.index, dtype="string")
    free = ~np.asarray(trained, dtype=bool) & ~np.asarray(taken, dtype=bool)
    for name in sorted(categories.unique()):
        member = (categories == name).to_numpy(dtype=bool)
        need = int(round(fraction * member.sum()))
        pool = np.flatnonzero(member & free)
        if need > len(pool):
            raise ValueError(
                f"metarater.validation: category {name!r} needs {need} held-out documents but only {len(pool)} of "
                f"its {int(member.sum())} are free of every rater's training data. On the bundled corpus the "
                "raters train on every encyclopedic and book document unless scoring.training.holdout_fraction "
                "reserves a share (the Meta-rater experiments set 0.1); or lower metarater.validation.fraction")
        if need:
            out.iloc[np.sort(rng.choice(pool, size=need, replace=False))] = name
    return out


def held_out_sets(documents: pd.DataFrame, config: ValidationConfig, trained: Optional[np.ndarray] = None
                  ) -> pd.DataFrame:
    """``set`` (``validation`` | ``test`` | <NA>) and ``group`` of every document, aligned with ``documents``.

    ``trained``: bool per document, True where some rater trained on it (None: none did). D_v follows
    ``config.source`` (:class:`ValidationConfig`); the judge set is always the clean corpus-proportional
    kind, disjoint from D_v.
    """
    trained = np.zeros(len(documents), dtype=bool) if trained is None else np.asarray(trained, dtype=bool)
    sets = pd.Series(pd.NA, index=documents.index, dtype="string")
    groups = pd.Series(pd.NA, index=documents.index, dtype="string")
    if config.source == "holdout":
        chosen = proportional_holdout(documents, config, trained, np.zeros(len(documents), dtype=bool),
                                      config.fraction, 0)
    elif config.source == "high_quality":
        chosen = hold_out_validation(documents, config)
    else:  # file: D_v is read from config.path
        chosen = pd.Series(pd.NA, index=documents.index, dtype="string")
    sets[chosen.notna()] = VALIDATION
    groups[chosen.notna()] = chosen[chosen.notna()]
    if config.test_fraction > 0:
        test = proportional_holdout(documents, config, trained, chosen.notna().to_numpy(), config.test_fraction, 1)
        sets[test.notna()] = TEST
        groups[test.notna()] = test[test.notna()]
    return pd.DataFrame({"set": sets, "group": groups}, index=documents.index)


def makeup(documents: pd.DataFrame, held: pd.DataFrame, category_column: str = "category") -> dict[str, float]:
    """What each held-out set is made of: documents, share per category, and the corpus's shares beside them
    (``<set>_docs``, ``<set>_share_<category>``, ``corpus_share_<category>``, ``<set>_max_share_gap``)."""
    categories = _categories(documents, category_column)
    corpus = categories.value_counts(normalize=True)
    out = {f"corpus_share_{k}": float(v) for k, v in corpus.items()}
    for name in (VALIDATION, TEST):
        member = (held["set"] == name).fillna(False).to_numpy(dtype=bool)
        if not member.any():
            continue
        shares = categories[member].value_counts(normalize=True)
        out[f"{name}_docs"] = float(member.sum())
        for k in corpus.index:
            out[f"{name}_share_{k}"] = float(shares.get(k, 0.0))
        out[f"{name}_max_share_gap"] = float(max(abs(shares.get(k, 0.0) - corpus[k]) for k in corpus.index))
    return out


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
    """Everything a proxy run needs, built once: tokens of every document, the held-out sets, the LM config.

    ``validation`` (D_v) and ``test`` (the judge set) map a group (category) to its windows; the
    loss of a set is the token-weighted mean over its groups, i.e. the loss over all its windows.
    ``rows`` given to :meth:`evaluate` index the documents the token table was built on.
    """

    table: TokenTable
    validation: dict[str, TokenWindows]
    validation_groups: dict[str, int]  # tokens per validation group
    proxy: ProxyConfig
    tokenizer: Tokenizer
    test: dict[str, TokenWindows] = dataclasses.field(default_factory=dict)
    test_groups: dict[str, int] = dataclasses.field(default_factory=dict)  # tokens per judge-set group

    def pretrain_config(self, seed: Optional[int] = None) -> PretrainConfig:
        return self.proxy.pretrain_config(seed)

    def training_stream(self, rows: np.ndarray, seed: int) -> np.ndarray:
        """The selected documents in a seeded random order (the budget then samples windows of all of them)."""
        order = np.random.default_rng(seed).permutation(np.asarray(rows))
        return self.table.stream(order)

    @staticmethod
    def _losses(model, sets: dict[str, TokenWindows], batch_size: int, prefix: str) -> dict[str, float]:
        out, total, count = {}, 0.0, 0
        for group, windows in sets.items():
            loss = evaluate_loss(model, windows, batch_size)
            out[f"{prefix}_{group}"] = float(loss)
            total += loss * len(windows)
            count += len(windows)
        if count:
            out[prefix] = float(total / count)
        return out

    def evaluate(self, rows: np.ndarray, seed: Optional[int] = None,
                 on_step: Optional[Callable[[int, dict], None]] = None) -> dict[str, Any]:
        """Train one proxy on documents ``rows`` for the token budget; its losses on the held-out sets and run facts.

        Returns ``val_loss`` (nats/token over the whole D_v stream), ``val_loss_<group>``, ``test_loss``
        and ``test_loss_<group>`` (the judge set, when there is one), ``train_loss`` (last step),
        ``steps``, ``tokens``, ``selection_tokens`` (tokens the selection holds: below the budget it is
        repeated), ``epochs`` (budget / selection tokens), ``seconds``, ``cpu_seconds`` (process CPU time,
        comparable across loads) and ``history`` ([step, loss] pairs).
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
            losses = self._losses(result.model, self.validation, cfg.train.batch_size, "val_loss")
            losses.update(self._losses(result.model, self.test, cfg.train.batch_size, "test_loss"))
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)
        return {
            **losses,
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


def group_streams(table: TokenTable, groups: pd.Series, max_tokens: int, seed: int,
                  proportional: bool = True) -> dict[str, np.ndarray]:
    """One stream per group (each group's documents in a seeded order), cut at its token share of ``max_tokens``:
    the group's share of the documents (``proportional``: the set's own category proportions) or an equal
    share (the ``high_quality`` set, so long book passages do not outweigh short encyclopedia leads)."""
    names = sorted(groups.dropna().unique())
    sizes = {name: int((groups == name).fillna(False).sum()) for name in names}
    total = sum(sizes.values())
    rng = np.random.default_rng(seed)
    out = {}
    for name in names:
        rows = np.flatnonzero((groups == name).fillna(False).to_numpy(dtype=bool))
        share = int(round(max_tokens * sizes[name] / total)) if proportional else max_tokens // len(names)
        out[name] = table.stream(rng.permutation(rows), max_tokens=share)
    return out


def validation_stream(table: TokenTable, groups: pd.Series, max_tokens: int, seed: int) -> tuple[np.ndarray, dict]:
    """D_v of the ``high_quality`` kind as one stream: an equal share of ``max_tokens`` per group.
    Returns the stream and the tokens taken per group."""
    streams = group_streams(table, groups, max_tokens, seed, proportional=False)
    return np.concatenate(list(streams.values())), {k: int(len(v)) for k, v in streams.items()}


def _windows(streams: dict[str, np.ndarray], seq_len: int, what: str) -> tuple[dict[str, TokenWindows], dict]:
    windows = {k: TokenWindows(v, seq_len) for k, v in streams.items()}
    taken = {k: int(len(v)) for k, v in streams.items()}
    windows = {k: w for k, w in windows.items() if len(w)}  # a group shorter than one sequence cannot be scored
    if not windows:
        raise ValueError(f"the {what} set holds {sum(taken.values())} tokens, less than one sequence of {seq_len}")
    return windows, taken


def build_bench(texts: Sequence[str], held: pd.DataFrame | pd.Series, proxy: ProxyConfig, validation: ValidationConfig,
                cache_dir: Path, external_validation: Optional[Sequence[str]] = None) -> ProxyBench:
    """Tokenizer + token table of ``texts`` (cached under ``cache_dir/tokens-<key>``) and the held-out sets.

    ``held``: :func:`held_out_sets`' frame (``set``, ``group``), or a series of D_v groups alone.
    The tokenizer is trained on a seeded sample of ``proxy.tokenizer_docs`` documents of the whole
    corpus (not of any selection), so every proxy reads the same ids. ``external_validation`` (texts)
    replaces the held-out rows as D_v.
    """
    if isinstance(held, pd.Series):
        held = pd.DataFrame({"set": held.where(held.isna(), VALIDATION), "group": held})
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
    seq_len = cfg.train.seq_len
    in_set = lambda name: held["group"].where((held["set"] == name).fillna(False))  # noqa: E731
    if external_validation is not None:
        external = TokenTable.build(list(external_validation), tokenizer)
        streams = {"external": external.stream(range(len(external)), max_tokens=validation.max_tokens)}
    else:
        streams = group_streams(table, in_set(VALIDATION), validation.max_tokens, validation.seed,
                                proportional=validation.source != "high_quality")
    windows, taken = _windows(streams, seq_len, "validation")
    test, test_taken = {}, {}
    if (held["set"] == TEST).fillna(False).any():
        test, test_taken = _windows(group_streams(table, in_set(TEST), validation.test_max_tokens,
                                                  validation.seed + 1), seq_len, "test")
    return ProxyBench(table, windows, taken, proxy, tokenizer, test, test_taken)


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
