"""The cells of a data decision (issue #38): every candidate corpus x model size x training seed, trained on
the same tokens with no document repeated and evaluated on the same items (``curate experiment=decide``).

Plain Python over the cached stages (:mod:`curation.selection.corpus`, :mod:`curation.lm.cached`,
:mod:`curation.evaluation.runs`): each corpus pick, trained model and evaluation is cached by content, so a
killed run re-run loads its finished cells and resumes the unfinished ones. ``on_cell`` (the node passes
MLflow child runs) and ``on_progress`` are called after each cell. No Kedro or MLflow here.

The cells are independent (issue #51): after the corpus picks, made here, each cell's training and evaluation
is a task on the ``data`` group's engine (:func:`curation.shards.executor.run_tasks`: one after another in
this process, in local worker processes, or as Ray tasks with one GPU each where the cluster has GPUs), and
the table comes back in the sequential order whatever ran it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from curation.errors import UserError
from curation.lm.config import PretrainConfig, get_config

log = logging.getLogger(__name__)

OnCell = Callable[[str, dict[str, Any], dict[str, float]], None]  # (run name, params, metrics)


class TooSmallForBudget(UserError, ValueError):
    """A candidate holds fewer LM tokens than a cell trains on: it would be repeated (> 1 epoch)."""


# A candidate's LM tokens per reference token vary with what it selects (on the bundled corpus at one reference
# budget: 804k-890k LM tokens, +-5% around the corpus's ratio): the check before any selection asks this much
# room, so that the exact check after the selections (_check_one_epoch) does not fail late.
FIT_MARGIN = 1.15


def check_fits(documents: pd.DataFrame, budget: Mapping[str, Any], pretrain: PretrainConfig,
               rungs: Optional[list[int]], cache: Mapping[str, Any], seed: int = 0,
               sample_docs: int = 2000) -> dict[str, float]:
    """Before scoring and selection: will every candidate hold the top rung's training tokens (<= 1 epoch)?

    The corpus's reference tokens are counted (the cached count the budget uses), its LM tokens per
    reference token measured on up to ``sample_docs`` documents with the cells' own tokenizer (cached, the one
    the cells use), so a candidate of ``budget`` holds about ``budget x ratio`` LM tokens, less the validation
    windows a cell holds out. Raises :class:`TooSmallForBudget` with the numbers and the settings that work
    when that falls short of ``FIT_MARGIN`` x the top rung; returns the numbers as metrics otherwise."""
    from curation.lm.cached import cached_tokenizer
    from curation.selection.corpus import document_tokens, resolve_token_budget

    top = max(rungs or [pretrain.train.max_tokens])
    tokens = resolve_token_budget(documents, budget, cache)
    if tokens is None:
        raise TooSmallForBudget("decide: set a token budget (budget.token_ratio or budget.tokens): candidates are "
                                "compared at equal tokens, not equal documents")
    ref_total = float(tokens.n_tokens.sum())
    tokenizer, _ = cached_tokenizer(documents, pretrain.tokenizer, cache)
    sample = documents if len(documents) <= sample_docs else documents.sample(sample_docs, random_state=seed)
    lm_sample = sum(len(e.ids) + 1 for e in tokenizer.encode_batch(sample["text"].astype(str).tolist()))  # + EOS
    ref_sample = float(document_tokens(sample, cache).sum())
    ratio = lm_sample / max(ref_sample, 1.0)
    train = pretrain.train
    held_out = train.val_batches * train.batch_size * train.seq_len
    expected = tokens.budget * ratio - held_out
    need = FIT_MARGIN * top
    numbers = {"decide_corpus_reference_tokens": ref_total, "decide_lm_per_reference_token": ratio,
               "decide_candidate_lm_tokens_expected": expected, "decide_top_rung_tokens": float(top),
               "decide_epochs_expected": top / expected if expected > 0 else float("inf")}
    if expected >= need:
        log.info("decide: each candidate holds about %.0f LM training tokens; the top rung trains on %d (%.2f epochs)",
                 expected, top, numbers["decide_epochs_expected"])
        return numbers
    whole = ref_total * ratio - held_out
    ratio_needed = (need + held_out) / (ratio * ref_total)
    fit_tokens = int(max(expected, 0) / FIT_MARGIN) // train.tokens_per_step * train.tokens_per_step
    where = "decide.rungs" if rungs else "pretrain.train.max_tokens"
    fixes = []
    if ratio_needed <= 1.0:
        fixes.append(f"budget.token_ratio={min(1.0, np.ceil(ratio_needed * 100) / 100):g}")
    if fit_tokens >= train.tokens_per_step:
        fixes.append(f"{'the top of decide.rungs' if rungs else where} to at most {fit_tokens:,}")
    if ratio_needed > 1.0:
        fixes.append(f"a larger corpus (all of this one holds about {max(whole, 0):,.0f} LM training tokens)")
    raise TooSmallForBudget(
        f"decide: each candidate would hold about {max(expected, 0):,.0f} LM training tokens ({tokens.budget:,} "
        f"reference tokens of the corpus's {ref_total:,.0f}), a cell trains on {top:,} ({where}), which needs "
        f"{need:,.0f} with the {FIT_MARGIN:g}x margin for <= 1 epoch: set " + " or ".join(fixes))


def size_config(base: PretrainConfig, size: str) -> PretrainConfig:
    """The model of ``size`` trained as ``base`` is (same tokenizer, tokens, schedule): ``tiny`` is
    ``base`` itself (the ``pretrain`` group as composed); any other name a preset's model
    (:data:`curation.lm.config.PRESETS`) with ``base``'s tokenizer and ``train`` block: the same tokens."""
    if size == "tiny":
        return base
    preset = get_config(size)
    model = dataclasses.replace(preset.model, vocab_size=base.model.vocab_size,
                                max_seq_len=max(preset.model.max_seq_len, base.train.seq_len))
    return dataclasses.replace(base, name=size, model=model).validate()


@dataclasses.dataclass
class Frames:
    """The default job's outputs a candidate is cut from (aligned as the selection stage leaves them)."""

    documents: pd.DataFrame
    scores: pd.DataFrame
    embeddings: np.ndarray
    pruned_scores: pd.DataFrame
    pruned_embeddings: np.ndarray


def candidate_corpora(frames: Frames, candidates: Mapping[str, Any], budget: Mapping[str, Any], seed: int,
             tokenizer: Any, seq_len: int, cache: Mapping[str, Any]) -> dict[str, tuple[Any, dict[str, float]]]:
    """Every candidate's pick (first: a bad budget fails before any training), packed for the LM."""
    from curation.cache import text_digest
    from curation.lm.cached import tokenize_texts
    from curation.selection.corpus import corpus_documents

    out = {}
    for name, spec in candidates.items():
        chosen, metrics = corpus_documents(frames.documents, frames.scores, frames.embeddings, frames.pruned_scores,
                                           frames.pruned_embeddings, spec, budget, seed, cache)
        packed, packing = tokenize_texts(chosen["text"].tolist(), tokenizer, seq_len)
        digest = text_digest("\n".join(sorted(chosen["id"].astype(str))))[:16]
        out[name] = (packed, {**metrics, "lm_tokens": packing["tokens_total"], "corpus_digest": digest})
        log.info("decide: %s holds %d documents, %.0f reference tokens, %.0f LM tokens", name,
                 metrics["corpus_docs"], metrics["corpus_tokens"], packing["tokens_total"])
    return out


def _check_one_epoch(name: str, packed: Any, cfg: PretrainConfig) -> int:
    from curation.lm.cached import split_validation

    train_part, _ = split_validation(packed, cfg.train.batch_size, cfg.train.val_batches)
    available = len(train_part) * cfg.train.seq_len
    wanted = cfg.train.total_steps() * cfg.train.tokens_per_step
    if wanted > available:
        raise TooSmallForBudget(
            f"decide: candidate {name!r} holds {available:,} LM training tokens, a cell trains on {wanted:,}: it "
            "would repeat documents (> 1 epoch). Raise budget.tokens / budget.token_ratio or lower "
            "pretrain.train.max_tokens")
    return wanted


def scale_label(size: str, tokens: int) -> str:
    """``<size>@<training tokens>``: one rung of the compute ladder (the same selections trained longer)."""
    return f"{size}@{int(tokens)}"


def rung_config(cfg: PretrainConfig, tokens: int) -> PretrainConfig:
    """``cfg`` trained on ``tokens`` tokens (a rung of the ladder: same model, batch and schedule shape)."""
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, max_tokens=int(tokens), max_steps=None))


def draw_seeds(seed: int, seeds: list[int], draws: str) -> dict[int, int]:
    """Training seed -> selection seed. ``per_seed``: each training seed gets its own selection draw
    (``seed + training seed``), so a stochastic candidate's seed-to-seed spread includes its selection's own
    randomness; ``one``: every training seed trains on the one draw made with ``seed``."""
    return {int(s): (int(seed) + int(s) if draws == "per_seed" else int(seed)) for s in seeds}


@dataclasses.dataclass(frozen=True)
class Cell:
    """One (rung, size, candidate, seed) cell as a task: where its packed tokens are and the config it trains
    with. The tokens are a file (the pick's packed folder), so a task pickles a path, not the corpus."""

    packed_path: str
    cfg: PretrainConfig


class CellJob:
    """Train and evaluate one :class:`Cell` (what every cell shares: the tokenizer, the evaluation config, the
    cache). Pickles as the tokenizer's JSON, so it reaches a pool worker or the Ray object store once."""

    def __init__(self, tokenizer: Any, eval_config: Any, cache: Mapping[str, Any]):
        self.tokenizer, self.eval_config, self.cache = tokenizer, eval_config, dict(cache)

    def __getstate__(self) -> dict:
        return {"tokenizer": self.tokenizer.to_str(), "eval_config": self.eval_config, "cache": self.cache}

    def __setstate__(self, state: dict) -> None:
        import tokenizers

        self.tokenizer = tokenizers.Tokenizer.from_str(state["tokenizer"])
        self.eval_config, self.cache = state["eval_config"], state["cache"]

    def __call__(self, cell: Cell) -> tuple[dict[str, float], dict[str, float], dict]:
        """(training metrics, evaluation metrics, per-item values). Each is cached by content
        (:func:`curation.lm.cached.pretrain`, :func:`curation.evaluation.runs.run_evaluation`): a finished cell
        loads, a half-trained one resumes from its checkpoint."""
        import torch

        from curation.evaluation.config import parse_eval_config
        from curation.evaluation.runs import run_evaluation
        from curation.lm.cached import pretrain as pretrain_lm
        from curation.lm.packing import PackedDataset
        from curation.shards.executor import task_cpus

        cfg, eval_cfg = cell.cfg, self.eval_config
        cpus = task_cpus()
        if cpus is not None:
            # a worker's share of the CPUs (a pool worker's, a Ray task's reservation): torch's threads within
            # it, so N cells at once on N x threads cores do not oversubscribe. Threads are not part of a
            # cell's cache keys (they change float rounding, not what is trained on)
            cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train,
                                                                     num_threads=min(cfg.train.num_threads, cpus)))
            parsed = parse_eval_config(eval_cfg)
            eval_cfg = dataclasses.replace(parsed, num_threads=min(parsed.num_threads, cpus))
        packed = PackedDataset(cell.packed_path, seq_len=cfg.train.seq_len)
        checkpoint, _, train_metrics = pretrain_lm(packed, self.tokenizer, cfg, self.cache)
        if torch.cuda.is_available():
            # the trainer returns the model on the CPU; where the cell trained on a GPU (Lightning's accelerator
            # is auto; a Ray task sees only the GPU it reserved) it is scored there too, as the earlier GPU cells
            # were (benchmarks/pretraining/gpu_cells.py): on these records scoring took longer than training
            checkpoint.model.to("cuda")
        items: dict = {}
        eval_metrics, _ = run_evaluation(checkpoint, eval_cfg, self.cache, items_out=items)
        return train_metrics, eval_metrics, items


def cell_threads(pretrain: PretrainConfig, eval_config: Any) -> int:
    """CPUs a cell asks of Ray: the torch threads its training and evaluation are configured with."""
    from curation.evaluation.config import parse_eval_config

    return max(pretrain.train.num_threads, parse_eval_config(eval_config).num_threads)


def engine_settings(data: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    """:func:`run_cells`' engine keywords from the ``data`` group (``data.engine``, ``data.workers``,
    ``data.ray_address``; ``inprocess`` is the old name of ``local``)."""
    data = data or {}
    name = data.get("engine") or "local"
    return {"engine": "local" if name == "inprocess" else str(name), "workers": data.get("workers"),
            "ray_address": data.get("ray_address")}


def _sequential(engine: Any) -> bool:
    return engine.engine == "local" and engine.workers <= 1


def run_cells(frames: Frames, candidates: Mapping[str, Any], sizes: list[str], seeds: list[int],
              budget: Mapping[str, Any], pretrain: PretrainConfig, eval_config: Any, seed: int,
              cache: Mapping[str, Any], on_cell: Optional[OnCell] = None,
              on_progress: Optional[Callable[[int, int, str], None]] = None, rungs: Optional[list[int]] = None,
              draws: str = "one", *, engine: str = "local", workers: Optional[int] = 1,
              ray_address: Optional[str] = None) -> tuple[pd.DataFrame, dict]:
    """Train and evaluate every (candidate, size, rung, seed) cell: one row per cell (the evaluation's metrics and
    what the cell was made from: ``scale``, ``draw_seed``, ``corpus_digest``) and each cell's per-item values
    ((scale, candidate, seed) -> items). ``rungs``: training tokens per cell, cheapest first (default: the
    ``pretrain`` block's ``max_tokens``); ``draws``: :func:`draw_seeds`.
    Refuses a candidate whose corpus is smaller than the largest rung's training tokens before any cell trains
    (:class:`TooSmallForBudget`).

    Where the cells run (issue #51; the ``data`` group's engine, :func:`curation.shards.executor.run_tasks`):
    ``engine="local"`` with ``workers`` 1 (the default) trains them one after another here, as before;
    ``workers`` > 1 that many at once in worker processes, each cell's torch threads capped at its share of the
    CPUs; None as many as the CPUs hold at the cells' configured threads (:func:`cell_threads`); on a machine
    with CUDA the local engine stays at one cell at a time (N processes would share one GPU; Ray places one
    cell per GPU). ``engine="ray"`` (``ray_address``: a
    running cluster, None = a local instance) one Ray task per cell, reserving the CPUs of its configured
    threads and one GPU when the cluster has GPUs. The corpus picks stay here (cached selections, packed into
    files a task reads); the table and items come back in the sequential order whatever the engine, with
    equal values at equal thread counts (tests/pipelines/test_decide_engines.py); ``on_cell`` and
    ``on_progress`` are called here as each cell finishes (in completion order when cells run at once), so a
    worker never writes to MLflow."""
    from curation.cache import cache_dir
    from curation.lm.cached import cached_tokenizer, packed_digest
    from curation.shards.executor import EngineConfig, cpus_available, run_tasks

    rungs = sorted(int(r) for r in (rungs or [pretrain.train.max_tokens]))
    tokenizer, _ = cached_tokenizer(frames.documents, pretrain.tokenizer, cache)
    by_seed = draw_seeds(seed, seeds, draws)
    picks: dict[int, dict] = {}
    for draw in dict.fromkeys(by_seed.values()):
        picks[draw] = candidate_corpora(frames, candidates, budget, draw, tokenizer, pretrain.train.seq_len, cache)
    for size in sizes:  # every candidate and draw against the top rung: fail before any cell trains
        top = rung_config(size_config(pretrain, size), rungs[-1])
        for draw, corpora in picks.items():
            for name, (packed, _) in corpora.items():
                _check_one_epoch(name, packed, top)
    if workers is not None and int(workers) < 1:
        raise ValueError(f"data.workers must be >= 1 or null, got {workers}")
    # null: as many cells at once as the CPUs hold at their configured threads (a 2-core machine at the
    # default 2 threads: one, as before)
    at_once = max(1, cpus_available() // cell_threads(pretrain, eval_config)) if workers is None else int(workers)
    run = EngineConfig(engine=engine, ray_address=ray_address, workers=at_once, progress=False)
    if run.engine == "local" and run.workers > 1:
        import torch

        if torch.cuda.is_available():
            log.info("decide: CUDA is available: the local engine trains one cell at a time (data.engine=ray "
                     "places one cell per GPU)")
            run.workers = 1
    cells: list[Cell] = []
    rows: list[dict] = []  # each cell's row before its training and evaluation metrics
    labels: list[str] = []  # the MLflow child run's name
    shown: list[str] = []  # the progress line's
    params: list[dict] = []
    keys: list[tuple] = []  # what decides a cell's trained model (two cells with equal keys train one model)
    digests: dict[int, str] = {}
    for tokens in rungs:
        for size in sizes:
            size_cfg = rung_config(size_config(pretrain, size), tokens)
            scale = scale_label(size, tokens)
            for name in candidates:
                for train_seed in seeds:
                    draw = by_seed[int(train_seed)]
                    packed, corpus_metrics = picks[draw][name]
                    cell_cfg = dataclasses.replace(size_cfg, train=dataclasses.replace(size_cfg.train,
                                                                                       seed=int(train_seed)))
                    cells.append(Cell(str(Path(packed.path).resolve()), cell_cfg))
                    rows.append({"candidate": name, "size": size, "scale": scale, "rung_tokens": int(tokens),
                                 "seed": int(train_seed), "draw_seed": draw,
                                 "corpus_digest": corpus_metrics.get("corpus_digest", ""),
                                 **{k: v for k, v in corpus_metrics.items() if k != "corpus_digest"}})
                    labels.append(f"{name} / {scale} / seed {train_seed}")
                    shown.append(f"{name}, {scale}, seed {train_seed}")
                    params.append({"candidate": name, "size": size, "rung_tokens": tokens, "seed": train_seed,
                                   "draw_seed": draw})
                    if not _sequential(run) and id(packed) not in digests:
                        digests[id(packed)] = packed_digest(packed)
                    keys.append((digests.get(id(packed)), size, int(tokens), int(train_seed)))

    if not _sequential(run):
        # a task may run on another machine or in another working directory: the cache by its absolute path
        directory = cache_dir(cache)
        cache = {**cache, "dir": str(directory)} if directory is not None else dict(cache)
    job = CellJob(tokenizer, eval_config, cache)
    total, done = len(cells), [0]
    out: list[Optional[dict]] = [None] * total
    found: list[Optional[dict]] = [None] * total

    def finished(i: int, result: tuple[dict[str, float], dict[str, float], dict]) -> None:
        train_metrics, eval_metrics, cell_items = result
        row = {**rows[i], **train_metrics, **eval_metrics}
        out[i] = row
        found[i] = cell_items
        if on_cell is not None:
            on_cell(labels[i], params[i], row)
        done[0] += 1
        if on_progress is not None:
            remaining = [(rows[j]["size"], int(rows[j]["rung_tokens"])) for j in range(total) if out[j] is None]
            on_progress(done[0], total, shown[i] + ": " + ", ".join(
                f"{m} {row[m]:.4g}" for m in ("mc_correct_prob_per_char", "ref_bits_per_byte") if m in row),
                row=row, remaining=remaining)

    # Cells that would train the same model (two candidates that picked the same tokens) must not train it at
    # once in one cache folder: the first of each key in the sequential order runs in the first wave, the
    # others after it (cache hits, as in a sequential run).
    first_of: dict[tuple, int] = {}
    for i, key in enumerate(keys):
        first_of.setdefault(key, i)
    waves = [list(range(total))] if _sequential(run) else [
        [i for i in range(total) if first_of[keys[i]] == i], [i for i in range(total) if first_of[keys[i]] != i]]
    gpus = "auto"  # one GPU per cell where Ray sees GPUs (Lightning's accelerator is auto: the cell trains there)
    threads = cell_threads(pretrain, eval_config)
    session = nullcontext()
    if run.engine == "ray" and waves[-1]:
        from curation.shards.executor import ray_session

        session = ray_session(run)  # both waves in one Ray session
    with session:
        for chosen in (w for w in waves if w):
            run_tasks(job, [cells[i] for i in chosen], run, names=[labels[i] for i in chosen], desc="decide",
                      what="cell", num_cpus=threads, num_gpus=gpus,
                      on_result=lambda j, result, chosen=chosen: finished(chosen[j], result))
    items = {(row["scale"], row["candidate"], row["seed"]): cell_items for row, cell_items in zip(rows, found)}
    return pd.DataFrame(out), items


def progress_printer(started: Optional[float] = None) -> Callable[..., None]:
    """``[decide] cell k/n: <what> (elapsed, ~left)`` on stdout and in the log, after each cell.

    The time left is each remaining cell's own cost: its training tokens at its size's measured seconds per
    token, plus its size's evaluation seconds. Cells cost 4x more per rung, so the old uniform rate (elapsed / cells done) read
    the cheap first rung and then jumped (issue #53: 4,725 s left, then 9,682 s). What the wall clock has spent
    beyond those costs is a cost per cell (one cell at a time); less than them, cells running at once (a factor).
    Cache hits cost nothing."""
    t0 = time.perf_counter() if started is None else started
    first: list[float] = []
    per_token: dict[str, list[float]] = {}  # size -> seconds per training token of cells that trained
    evals: dict[str, list[float]] = {}  # size -> evaluation seconds of cells that evaluated
    predicted_done = [0.0]  # the model's cost of the cells finished after the first

    def cost(size: str, tokens: int) -> Optional[float]:
        if size not in per_token:
            return None
        return float(np.median(per_token[size])) * tokens + (float(np.median(evals[size])) if evals.get(size) else 0.0)

    def show(done: int, total: int, what: str, row: Optional[Mapping[str, Any]] = None,
             remaining: Optional[Sequence[tuple[str, int]]] = None) -> None:
        now = time.perf_counter()
        first.append(now)
        if row is not None:
            size = str(row.get("size"))
            tokens = row.get("rung_tokens") or row.get("train_tokens")
            if not row.get("pretrain_cache_hit") and tokens and row.get("train_seconds"):
                per_token.setdefault(size, []).append(float(row["train_seconds"]) / float(tokens))
            if not row.get("eval_cache_hit") and row.get("eval_seconds"):
                evals.setdefault(size, []).append(float(row["eval_seconds"]))
            if done > 1 and not row.get("pretrain_cache_hit"):
                own = cost(size, int(row.get("rung_tokens") or row.get("train_tokens") or 0))
                predicted_done[0] += own or 0.0
        # the rate from the first finished cell on (the first cell also carries the corpus picks)
        rate = (now - first[0]) / (done - 1) if done > 1 else now - t0
        eta = rate * (total - done)
        costs = [cost(size, tokens) for size, tokens in (remaining or [])]
        if remaining is not None and all(c is not None for c in costs):
            eta = float(sum(costs))
            if done > 1 and predicted_done[0] > 0:
                elapsed = now - first[0]
                if elapsed >= predicted_done[0]:  # one cell at a time: a cost per cell besides training and evaluation
                    eta += (elapsed - predicted_done[0]) / (done - 1) * len(costs)
                else:  # cells at once: the wall clock runs slower than their summed costs
                    eta *= elapsed / predicted_done[0]
        log.info("decide: cell %d/%d done (%s); %.0f s so far, ~%.0f s left", done, total, what, now - t0, eta)
        print(f"[decide] cell {done}/{total}: {what} ({now - t0:.0f} s, ~{eta:.0f} s left)", flush=True)

    return show
