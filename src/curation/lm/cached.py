"""LM stages cached by content: the tokenizer, packed tokens and resumable training runs.

The pretrain, evaluate, verification and Table 2 paths share these. A stage's
result lives in ``cache.dir`` (:mod:`curation.cache`) under a key that hashes
everything it depends on: the same inputs and config load the earlier result;
a training run killed half-way resumes from its last Lightning checkpoint
(``pretrain.train.checkpoint_every_steps``). ``cache.enabled=false`` recomputes
(in a scratch folder).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping, Optional

import pandas as pd
import tokenizers
import torch
from torch.utils.data import Dataset, Subset

from curation.cache import atomic_write_text, cache_dir, config_key, file_digest, frame_fingerprint, model_digest
from curation.cache import text_digest
from curation.lm.checkpoint import LMCheckpoint
from curation.lm.config import PretrainConfig
from curation.lm.packing import PackedDataset, pack_documents
from curation.lm.tokenizer import TokenizerConfig, build_tokenizer, load_tokenizer
from curation.lm.train import load_model
from curation.lm.train import train as train_lm

log = logging.getLogger(__name__)


def tokenizer_digest(tokenizer: tokenizers.Tokenizer) -> str:
    return text_digest(tokenizer.to_str())


def packed_digest(packed: PackedDataset) -> str:
    return file_digest(Path(packed.path) / "tokens.bin")


# --- tokenizer and tokens ---


def cached_tokenizer(documents: pd.DataFrame, cfg: TokenizerConfig,
                     cache: Mapping[str, Any]) -> tuple[tokenizers.Tokenizer, dict[str, float]]:
    """Byte-level BPE on the first ``cfg.max_docs`` documents (all when None), or the shipped
    ``cfg.path``; cached by the texts and the tokenizer config."""
    if cfg.path is not None:
        tokenizer = build_tokenizer(cfg, [])
        return tokenizer, {"tokenizer_vocab_size": float(tokenizer.get_vocab_size()), "tokenizer_cache_hit": 0.0}
    texts = documents if cfg.max_docs is None else documents.head(cfg.max_docs)
    directory = cache_dir(cache)
    key = config_key("tokenizer-v1", dataclasses.asdict(cfg), tokenizers.__version__,
                     frame_fingerprint(texts, ["id", "text"]))
    path = directory / f"tokenizer-{key}.json" if directory else None
    hit = path is not None and path.is_file()
    if hit:
        tokenizer = load_tokenizer(path)
    else:
        tokenizer = build_tokenizer(cfg, texts["text"].tolist())
        if path is not None:
            atomic_write_text(path, tokenizer.to_str())
    log.info("tokenizer: %d ids (%s)", tokenizer.get_vocab_size(), "cached" if hit else f"trained on {len(texts)} docs")
    return tokenizer, {"tokenizer_vocab_size": float(tokenizer.get_vocab_size()), "tokenizer_docs": float(len(texts)),
                       "tokenizer_cache_hit": float(hit)}


def pack_texts(texts: list[str], tokenizer: tokenizers.Tokenizer, seq_len: int) -> PackedDataset:
    """Pack into a temporary folder that lives as long as the returned dataset (a Kedro
    ``PackedTokensDataset`` copies it into the catalog)."""
    tmp = tempfile.TemporaryDirectory(prefix="curation-tokens-")
    packed = pack_documents(texts, tokenizer, tmp.name, seq_len=seq_len)
    packed._tmpdir = tmp  # removed with the dataset object
    return packed


def tokenize_texts(texts: list[str], tokenizer: tokenizers.Tokenizer,
                   seq_len: int) -> tuple[PackedDataset, dict[str, float]]:
    """Each document's tokens, then EOS, back to back (:func:`curation.lm.pack_documents`), read as
    ``seq_len`` windows; with ``tokens_docs``, ``tokens_total``, ``tokens_sequences``, ``tokens_per_doc``."""
    packed = pack_texts(texts, tokenizer, seq_len)
    index = packed.index
    return packed, {"tokens_docs": float(index.n_docs), "tokens_total": float(index.n_tokens),
                    "tokens_sequences": float(index.n_sequences),
                    "tokens_per_doc": index.n_tokens / max(index.n_docs, 1)}


# --- training (cached by content, resumable) ---


@dataclasses.dataclass
class TrainedModel:
    model: Any  # CausalLM
    history: pd.DataFrame  # one row per optimizer step (+ validation rows), column "step"
    metrics: dict[str, float]
    cache_hit: bool


def _result_independent(cfg: PretrainConfig) -> dict[str, Any]:
    """The config that decides the trained weights (threads and checkpoint cadence do not)."""
    train = dataclasses.asdict(cfg.train)
    for key in ("num_threads", "checkpoint_every_steps", "val_every_steps"):
        train.pop(key)
    return {"model": dataclasses.asdict(cfg.model), "train": train}


def _read_history(path: Path) -> pd.DataFrame:
    if not path.is_file():
        return pd.DataFrame({"step": pd.Series(dtype="int64")})
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame({"step": pd.Series(dtype="int64")})
    # A resumed run repeats the steps after its last checkpoint: keep the latest row per step and kind.
    frame["_kind"] = frame["val_loss"].notna() if "val_loss" in frame else False
    frame = frame.drop_duplicates(["step", "_kind"], keep="last").drop(columns="_kind")
    return frame.sort_values("step", kind="stable").reset_index(drop=True)


def train_cached(
    cfg: PretrainConfig,
    train_data: Dataset | torch.utils.data.DataLoader,
    data_key: str,
    cache: Mapping[str, Any],
    val_data: Optional[Dataset] = None,
    init_from: Optional[torch.nn.Module] = None,
) -> TrainedModel:
    """:func:`curation.lm.train` in a work folder named by the content it depends on.

    data_key: a digest of the training data (and its mixing), given by the caller.
    A finished run in the cache is loaded (``cache_hit``); an unfinished one resumes.
    """
    init_key = model_digest(init_from) if init_from is not None else None
    key = config_key("lm-train-v2", _result_independent(cfg), data_key, init_key)
    directory = cache_dir(cache)
    scratch = None
    if directory is None:
        scratch = tempfile.TemporaryDirectory(prefix="curation-train-")
        work = Path(scratch.name)
    else:
        work = directory / f"lm-train-{key}"
    done, steps_file = work / "result.json", work / "history.jsonl"
    if done.is_file():
        log.info("cache hit: %s", work)
        return TrainedModel(load_model(work), _read_history(steps_file), json.loads(done.read_text()), True)

    work.mkdir(parents=True, exist_ok=True)
    init_path = None
    if init_from is not None:
        init_path = work / "init.pt"
        torch.save(init_from.state_dict(), init_path)
    with open(steps_file, "a") as handle:
        def on_step(step: int, metrics: dict) -> None:
            handle.write(json.dumps({"step": step, **metrics}) + "\n")
            handle.flush()

        result = train_lm(cfg, train_data, work, val_data=val_data, on_step=on_step, init_from=init_path, resume=True)
    model = result.model
    if result.steps != cfg.train.total_steps():  # e.g. Lightning stopped early on SIGTERM: not a finished run
        raise RuntimeError(f"training stopped at step {result.steps} of {cfg.train.total_steps()}; "
                           f"re-run to resume from {work / 'checkpoints'}")
    # Names differ from the per-step history's (tokens, tokens_per_s) so MLflow keeps both.
    metrics = {
        "final_loss": result.final_loss,
        "final_val_loss": result.val_loss if result.val_loss is not None else float("nan"),
        "train_steps": float(result.steps),
        "train_tokens": float(result.tokens),
        "train_tokens_per_s": result.tokens_per_s,
        "train_seconds": result.elapsed_s,
        "parameters": float(model.num_parameters()),
        "parameters_non_embedding": float(model.num_parameters(exclude_embeddings=True)),
        "torch_threads": float(torch.get_num_threads()),
    }
    history = _read_history(steps_file)
    if directory is not None:
        atomic_write_text(done, json.dumps(metrics))
        # Finished: the resume state (optimizer moments, ~3x the weights) is no longer needed.
        shutil.rmtree(work / "checkpoints", ignore_errors=True)
        if init_path is not None:
            init_path.unlink(missing_ok=True)
    if scratch is not None:
        scratch.cleanup()
    return TrainedModel(model, history, metrics, False)


def split_validation(packed: PackedDataset, batch_size: int, val_batches: int) -> tuple[Dataset, Optional[Dataset]]:
    """Hold out the last ``val_batches * batch_size`` windows when at least 4x as many remain."""
    n_val = val_batches * batch_size
    n = len(packed)
    if n - n_val < 4 * n_val:
        return packed, None
    return Subset(packed, range(n - n_val)), Subset(packed, range(n - n_val, n))


def pretrain(tokens: PackedDataset, tokenizer: tokenizers.Tokenizer, cfg: PretrainConfig,
             cache: Mapping[str, Any]) -> tuple[LMCheckpoint, pd.DataFrame, dict[str, float]]:
    """Train ``cfg.model`` for ``cfg.train`` (Lightning, :func:`curation.lm.train`) on packed tokens;
    return the checkpoint, the per-step history (``step``, ``loss``, ``lr``, ``tokens_per_s``;
    ``val_loss`` rows when ``val_every_steps`` is set) and the run's metrics (``final_loss``,
    ``final_val_loss``, ``train_tokens_per_s``, ``epochs`` ...).

    Validation: the last ``val_batches x batch_size`` sequences are held out when the data has at
    least 5x that many; the validation loss is then reported (``final_val_loss``), else NaN.
    """
    if tokenizer.get_vocab_size() > cfg.model.vocab_size:
        raise ValueError(f"tokenizer has {tokenizer.get_vocab_size()} ids, model.vocab_size is "
                         f"{cfg.model.vocab_size}")
    packed = PackedDataset(tokens.path, seq_len=cfg.train.seq_len)
    train_data, val_data = split_validation(packed, cfg.train.batch_size, cfg.train.val_batches)
    data_key = config_key(packed_digest(packed), cfg.train.seq_len, len(train_data))
    trained = train_cached(cfg, train_data, data_key, cache, val_data=val_data)
    train_tokens = len(train_data) * cfg.train.seq_len
    metrics = {
        **trained.metrics,
        "epochs": trained.metrics["train_tokens"] / max(train_tokens, 1),
        "train_sequences": float(len(train_data)),
        "val_sequences": float(len(val_data) if val_data is not None else 0),
        "pretrain_cache_hit": float(trained.cache_hit),
    }
    log.info("pretrained %s: %d steps, final loss %.3f, %.0f tokens/s%s", cfg.name, metrics["train_steps"],
             metrics["final_loss"], metrics["train_tokens_per_s"], " (cached)" if trained.cache_hit else "")
    checkpoint = LMCheckpoint(model=trained.model, tokenizer=tokenizer, config=dataclasses.asdict(cfg))
    return checkpoint, trained.history, metrics
