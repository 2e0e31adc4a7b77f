"""Ultra-FineWeb's verified-seed classifier loop (seeds/002 Sec. 2.1 Fig. 1(c), Sec. 2.3-2.5, Sec. 3.2 Table 3).

1. Candidate seed pools (the corpus's categories by default, or files the user names) are each checked by
   the efficient verification (Sec. 2.2, App. A; :mod:`curation.verification.anneal`): the WSD base model is
   annealed on a mix giving a seeded sample of the pool a share ``r`` of every batch, and on the default mix
   alone (the control), once per seed; the pool's gain is the mean over seeds of (pool - control) on the
   benchmark average, with its standard error over seeds (Table 7: three runs of one setting).
2. Pools whose gain exceeds ``z`` standard errors "help" (Sec. 2.3: "select those with clear effectiveness
   as positive samples") and become the positives; when none does, ``if_none`` says what happens.
3. Negatives are raw documents from every source, drawn uniformly over sources (Sec. 2.3: "raw data from
   diverse sources ... a uniform distribution strategy"), balanced with the positives (Sec. 2.5: evenly split).
4. The fastText classifier is trained with Sec. 2.5's recipe: the project's ``fasttext_ultrafineweb``
   trainer and preprocessing (:class:`curation.scoring.fasttext_rater.FastTextRater`, ``UltraFineWebConfig``).
5. Optionally one more round on its own predictions (Sec. 3.2, Table 3: the second iteration "process[es]
   the negative samples, and the inferred positive and negative samples are incorporated into the next
   round of training data"; the third brought nothing, so ``rounds`` is 1 or 2).
6. The corpus is scored and kept at P >= 0.5 (Sec. 2.5, ``FastTextRater.predict_keep``).

Plain Python: the ufw_classifier nodes adapt it to Kedro; MLflow sees only their metrics.
"""

from __future__ import annotations

import dataclasses
import glob
import logging
import re
from pathlib import Path
from typing import Any, Mapping, Optional

import numpy as np
import pandas as pd

from curation.errors import UserError
from curation.verification.config import (  # noqa: F401  (the loop's config lives there; re-exported)
    BASELINE,
    DEFAULT_MIX,
    IF_NONE,
    PoolSpec,
    SeedLoopConfig,
    parse_seed_loop,
)

log = logging.getLogger(__name__)


# --- 1. pools ---------------------------------------------------------------------------------------------


def read_texts(path: str) -> pd.DataFrame:
    """``id``, ``text`` of a parquet / JSONL file, a folder of them or a glob (ids made up where missing)."""
    p = Path(path)
    # glob.glob, not Path().glob: the latter refuses an absolute pattern (NotImplementedError), so a missing
    # absolute path would not reach the FileNotFoundError below
    files = sorted(p.glob("*.parquet")) + sorted(p.glob("*.jsonl")) if p.is_dir() else (
        [p] if p.exists() else sorted(Path(f) for f in glob.glob(path)))
    if not files:
        raise FileNotFoundError(f"seed pool {path!r}: no parquet or JSONL file")
    frames = [pd.read_parquet(f) if f.suffix == ".parquet" else pd.read_json(f, lines=True) for f in files]
    df = pd.concat(frames, ignore_index=True)
    if "text" not in df:
        raise ValueError(f"seed pool {path!r}: no 'text' column (columns: {list(df.columns)})")
    ids = df["id"].astype(str) if "id" in df else pd.Series([f"{p.name}/{i}" for i in range(len(df))])
    return pd.DataFrame({"id": ids.to_numpy(), "text": df["text"].astype(str).to_numpy()})


class SeedPoolError(UserError, ValueError):
    """The configured seed pools cannot be formed from the corpus; the message names the option to set."""


def _pool_names(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _pool_name(source: str) -> str:
    """``source_<value>``, in the characters an MLflow metric name allows (pool metrics carry the name)."""
    return "source_" + re.sub(r"[^A-Za-z0-9_.-]+", "_", source)


def domain_pools(documents: pd.DataFrame, cfg: SeedLoopConfig) -> dict[str, PoolSpec]:
    """The pools to verify on this corpus: ``cfg.pools`` where the documents have the ``category`` column
    its category pools read. On a corpus without one (a user's plain id + text corpus) the category pools
    are replaced by the user's domains, each value of the ``source`` column a pool, when there are two or
    more; else by the file pools alone, when some are named. Raises :class:`SeedPoolError`, naming the
    option that adds a file pool, when neither gives a pool."""
    categories = [name for name, spec in cfg.pools.items() if spec.category is not None]
    if not categories or ("category" in documents and documents["category"].notna().any()):
        return dict(cfg.pools)
    files = {name: spec for name, spec in cfg.pools.items() if spec.category is None}
    sources = sorted(documents["source"].dropna().astype(str).unique()) if "source" in documents else []
    if len(sources) >= 2:
        log.warning("seed loop: the documents have no category column for the pools %s; verifying each of "
                    "their %d sources as a pool instead", _pool_names(categories), len(sources))
        return {**{_pool_name(value): PoolSpec(category=value) for value in sources}, **files}
    if files:
        log.warning("seed loop: the documents have no category column for the pools %s; verifying the file "
                    "pools %s alone", _pool_names(categories), _pool_names(list(files)))
        return files
    found = f"one source, {sources[0]!r}" if sources else "no source column"
    raise SeedPoolError(
        f"verification.seed_loop.pools: the seed pools {_pool_names(categories)} are corpus categories, but the "
        f"{len(documents)} ingested documents have no category column (ingest takes it from an `extra` "
        f"column's JSON) and {found}, so there is no domain to verify as a pool. Name a file of seed "
        f"documents: '+verification.seed_loop.pools.good={{path: /path/to/seeds.parquet}}' (parquet or JSONL "
        f"with a text column; the category pools are then skipped), or ingest a corpus with a source column "
        f"of 2 or more values (each becomes a pool).")


def seed_pools(documents: pd.DataFrame, cfg: SeedLoopConfig) -> pd.DataFrame:
    """Every candidate pool as rows (``pool``, ``id``, ``text``, ``in_corpus``): category pools are the
    corpus's documents of that category (on a corpus without categories, of each source:
    :func:`domain_pools`); file pools are read (``in_corpus`` where their id is a corpus id)."""
    parts = []
    pools = domain_pools(documents, cfg)
    column = "category" if "category" in documents and documents["category"].notna().any() else "source"
    for name, spec in pools.items():
        if spec.category is not None:
            rows = documents.loc[documents[column].astype("string") == spec.category, ["id", "text"]]
            if rows.empty:
                known = sorted(documents[column].dropna().astype(str).unique())
                raise SeedPoolError(f"verification.seed_loop.pools: seed pool {name!r} has no document of "
                                    f"{column} {spec.category!r} in the corpus (its {column} values: {known}); "
                                    f"name one of them, or a file (path: ...)")
        else:
            rows = read_texts(spec.path)
        parts.append(rows.assign(pool=name, in_corpus=rows["id"].isin(documents["id"]).to_numpy()))
    return pd.concat(parts, ignore_index=True)[["pool", "id", "text", "in_corpus"]]


def loop_verification(verification: Any, cfg: SeedLoopConfig) -> Any:
    """The verification config the loop runs: ``verification`` with the loop's scale (base run, verification
    data size, ratio, default mix, tasks, limit). The relations of Sec. 2.2 / App. A stay those of
    :class:`~curation.verification.config.VerificationConfig` (peak 0.1x, warmup, formula)."""
    return dataclasses.replace(
        verification, base_tokens=cfg.base_tokens, candidate_tokens=cfg.candidate_tokens, ratios=[cfg.ratio],
        default_docs=cfg.default_docs, tasks=cfg.tasks if cfg.tasks is not None else verification.tasks,
        limit=cfg.limit if cfg.limit is not None else verification.limit).validate()


def verify_pools(pools: pd.DataFrame, documents: pd.DataFrame, tokenizer: Any, pretrain: Any, verification: Any,
                 cfg: SeedLoopConfig, eval_config: Mapping[str, Any],
                 cache: Mapping[str, Any]) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, float]]:
    """Step 1: the efficient verification of every pool, once per seed (Sec. 2.2, App. A, Table 7).

    The loop's WSD base model is trained on the default mix (cached by content); then per seed each pool's
    seeded ``candidate_tokens`` sample and the default-only control are annealed for App. A's length and
    evaluated (:func:`curation.verification.anneal.anneal_candidates`). Returns the per-(pool, seed) gains
    (:func:`pool_gains`), the long evaluation results (with a ``seed`` column) and metrics."""
    from curation.lm.cached import pack_texts
    from curation.verification.anneal import anneal_candidates, pack_candidates, sample_tokens, train_base

    vcfg = loop_verification(verification, cfg)
    mix = documents if vcfg.default_docs is None or vcfg.default_docs >= len(documents) else documents.sample(
        n=vcfg.default_docs, random_state=vcfg.seed).sort_index()
    seq_len = pretrain.train.seq_len
    default, _ = pack_candidates(mix, pd.DataFrame({"candidate": DEFAULT_MIX, "id": mix["id"]}), tokenizer, seq_len)
    base, _, metrics = train_base(default, tokenizer, pretrain, vcfg, cache)
    results, averages = [], []
    for seed in cfg.seeds:
        seeded = dataclasses.replace(vcfg, seed=seed)
        tokens = dict(default)
        for name, group in pools.groupby("pool", sort=False):
            texts = sample_tokens(group["text"].tolist(), tokenizer, vcfg.candidate_tokens, seed)
            tokens[name] = pack_texts(texts, tokenizer, seq_len)
            metrics[f"{name}_s{seed}_verification_docs"] = float(len(texts))
            metrics[f"{name}_s{seed}_verification_tokens"] = float(tokens[name].n_tokens)
        log.info("seed loop: verifying %d pools at seed %d", len(tokens) - 1, seed)
        res, _, m = anneal_candidates(base, tokens, pretrain, seeded, eval_config, cache)
        metrics.update({f"s{seed}_{k}": v for k, v in m.items() if k.startswith(("anneal_", "base_peak"))})
        res = res.assign(seed=seed)
        results.append(res)
        annealed = res[res["dataset"] != "base"]
        avg = annealed.groupby("dataset", sort=False)["value"].mean().mul(100.0).rename("average").reset_index()
        averages.append(avg.assign(seed=seed))
    gains = pool_gains(pd.concat(averages, ignore_index=True), BASELINE)
    return gains, pd.concat(results, ignore_index=True), metrics


# --- 2. decisions ------------------------------------------------------------------------------------------


def pool_gains(averages: pd.DataFrame, control: str) -> pd.DataFrame:
    """Per (pool, seed) gain over the control at the same seed: ``averages`` has ``dataset``, ``seed``,
    ``average`` (benchmark mean, percent) with the control under the name ``control``."""
    ctrl = averages[averages["dataset"] == control].set_index("seed")["average"]
    pools = averages[averages["dataset"] != control].copy()
    pools["control"] = pools["seed"].map(ctrl)
    if pools["control"].isna().any():
        raise ValueError("a pool was verified at a seed without its control run")
    pools["gain"] = pools["average"] - pools["control"]
    return pools.rename(columns={"dataset": "pool"})[["pool", "seed", "average", "control", "gain"]]


def decide_pools(gains: pd.DataFrame, z: float = 2.0, if_none: str = "best") -> pd.DataFrame:
    """One row per pool: ``mean_gain``, ``se`` (standard error over seeds, ddof 1), ``n_seeds``, ``t``
    (mean / se), ``helps`` (mean gain > z * se and > 0) and ``positive`` (used as seeds). When no pool
    helps, ``if_none="best"`` makes the pool with the largest mean gain positive (``fallback`` True on it),
    ``"fail"`` raises."""
    if if_none not in IF_NONE:
        raise ValueError(f"if_none={if_none!r}: one of {IF_NONE}")
    by = gains.groupby("pool", sort=False)["gain"]
    out = pd.DataFrame({"mean_gain": by.mean(), "se": by.std(ddof=1) / np.sqrt(by.count()),
                        "n_seeds": by.count()}).reset_index()
    if (out["n_seeds"] < 2).any():
        raise ValueError("every pool needs at least 2 seeds for a standard error")
    with np.errstate(divide="ignore", invalid="ignore"):
        out["t"] = out["mean_gain"] / out["se"]
    out["helps"] = (out["mean_gain"] > 0) & (out["mean_gain"] > z * out["se"])
    out["positive"] = out["helps"]
    out["fallback"] = False
    if not out["helps"].any():
        if if_none == "fail":
            raise ValueError("no seed pool helps (mean gain > %g SE):\n%s" % (z, out.to_string(index=False)))
        best = int(out["mean_gain"].to_numpy().argmax())
        out.loc[best, ["positive", "fallback"]] = True
    return out


# --- 3-5. training sets, classifier, second round -----------------------------------------------------------


def uniform_by_source(frame: pd.DataFrame, n: int, rng: np.random.Generator, by: str = "source") -> pd.DataFrame:
    """``n`` rows drawn as evenly over ``frame[by]`` as the groups allow (Sec. 2.3's uniform distribution
    strategy): each group gives an equal quota, small groups all they have, the rest fill the remainder. Without
    a ``by`` column the frame is one group."""
    if n >= len(frame):
        return frame
    if by not in frame:  # no such column (a corpus without sources): one group
        return frame.iloc[np.sort(rng.permutation(len(frame))[:n])]
    groups = {k: rng.permutation(idx) for k, idx in frame.groupby(by, sort=True).indices.items()}
    taken: dict[Any, int] = dict.fromkeys(groups, 0)
    left = n
    while left > 0:
        open_groups = [k for k in groups if taken[k] < len(groups[k])]
        quota = max(1, left // len(open_groups))
        for k in open_groups:
            add = min(quota, len(groups[k]) - taken[k], left)
            taken[k] += add
            left -= add
            if left == 0:
                break
    rows = np.concatenate([groups[k][: taken[k]] for k in groups])
    return frame.iloc[np.sort(rows)]


def seed_training_set(documents: pd.DataFrame, pools: pd.DataFrame, decisions: pd.DataFrame, cfg: SeedLoopConfig,
                      held_out: Optional[pd.Series] = None) -> pd.DataFrame:
    """Round 1 (Sec. 2.3, 2.5): positives = the positive pools' documents (an equal share per pool), negatives =
    raw corpus documents from every source, uniformly over sources, outside the positives; as many of each as
    the smaller side allows, at most ``train_docs``. ``held_out``: a boolean Series over ``documents`` rows
    kept out of both classes. Rows: ``id``, ``text``, ``label`` (1 / 0), ``origin`` (pool or source)."""
    rng = np.random.default_rng(cfg.seed)
    chosen = decisions.loc[decisions["positive"], "pool"].tolist()
    pos = pools[pools["pool"].isin(chosen)].drop_duplicates("id")
    if held_out is not None:
        pos = pos[~pos["id"].isin(documents.loc[held_out.to_numpy(), "id"])]
    raw = documents if held_out is None else documents[~held_out.to_numpy()]
    raw = raw[~raw["id"].isin(pos["id"])]
    n = min(cfg.train_docs, len(pos), len(raw))
    if n == 0:
        raise ValueError(f"cannot build a training set: {len(pos)} positive and {len(raw)} negative documents")
    pos = uniform_by_source(pos, n, rng, by="pool")
    neg = uniform_by_source(raw, n, rng, by="source")
    return pd.concat([pd.DataFrame({"id": pos["id"], "text": pos["text"], "label": 1, "origin": pos["pool"]}),
                      pd.DataFrame({"id": neg["id"], "text": neg["text"], "label": 0, "origin": _origin(neg)})],
                     ignore_index=True)


def _origin(frame: pd.DataFrame) -> Any:
    """A negative's origin: its source, or ``corpus`` on a corpus without sources."""
    return frame["source"] if "source" in frame else "corpus"


def second_round_set(documents: pd.DataFrame, first: pd.DataFrame, scores: np.ndarray, threshold: float,
                     cfg: SeedLoopConfig, held_out: Optional[pd.Series] = None) -> pd.DataFrame:
    """Round 2 (Sec. 3.2, Table 3): the round-1 classifier has processed the raw documents (``scores``, aligned
    with ``documents``); the positives are round 1's seeds plus the raw documents it keeps (P >= threshold),
    the negatives are raw documents it rejects, uniformly over sources; balanced, at most ``train_docs`` each."""
    rng = np.random.default_rng(cfg.seed + 1)
    keep = np.where(np.isfinite(scores), scores >= threshold, False)
    usable = np.ones(len(documents), bool) if held_out is None else ~held_out.to_numpy()
    seeds = first[first["label"] == 1]
    raw = ~documents["id"].isin(seeds["id"]).to_numpy() & usable
    inferred = documents[raw & keep]
    rejected = documents[raw & ~keep]
    pos = pd.concat([pd.DataFrame({"id": seeds["id"], "text": seeds["text"], "origin": seeds["origin"]}),
                     pd.DataFrame({"id": inferred["id"], "text": inferred["text"], "origin": "inferred"})],
                    ignore_index=True)
    n = min(cfg.train_docs, len(pos), len(rejected))
    if n == 0:
        raise ValueError(f"round 2: {len(pos)} positive and {len(rejected)} negative documents")
    pos = uniform_by_source(pos, n, rng, by="origin")
    neg = uniform_by_source(rejected, n, rng, by="source")
    return pd.concat([pos.assign(label=1)[["id", "text", "label", "origin"]],
                      pd.DataFrame({"id": neg["id"], "text": neg["text"], "label": 0, "origin": _origin(neg)})],
                     ignore_index=True)


def train_classifier(training: pd.DataFrame, fasttext_cfg: Any):
    """Sec. 2.5's fastText classifier on a training set (``label`` 1 / 0): the project's trainer."""
    from curation.scoring.fasttext_rater import FastTextRater

    return FastTextRater(fasttext_cfg).fit(training.loc[training["label"] == 1, "text"].tolist(),
                                           training.loc[training["label"] == 0, "text"].tolist())


def run_rounds(documents: pd.DataFrame, pools: pd.DataFrame, decisions: pd.DataFrame, cfg: SeedLoopConfig,
               fasttext_cfg: Any) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, float]]:
    """Steps 3-6: training set(s), the classifier of each round, the corpus scored by the last one and kept at
    its threshold (P >= 0.5, Sec. 2.5; the rule of ``FastTextRater.predict_keep``, applied to the scores
    computed once). Returns the training sets (``round`` column, no text), the scores (``id``, ``category`` and
    ``source`` where the documents have them, ``ufw_score``, ``keep``, and per round ``ufw_score_round<k>``)
    and metrics."""
    from curation.scoring.training_sets import EVAL, human_label_split

    held_out = None
    if cfg.exclude_eval_labels and "quality_label" in documents:
        held_out = human_label_split(documents) == EVAL
    fasttext_cfg = dataclasses.replace(fasttext_cfg, bucket=cfg.bucket, quantize=cfg.quantize, epoch=cfg.epoch)
    threshold = fasttext_cfg.threshold if fasttext_cfg.threshold is not None else 0.5
    scores = documents[[c for c in ("id", "category", "source") if c in documents]].copy()
    training = seed_training_set(documents, pools, decisions, cfg, held_out)
    sets, metrics = [], {}
    prepared_corpus = None
    for k in range(1, cfg.rounds + 1):
        if k == 2:
            try:
                training = second_round_set(documents, training, scores["ufw_score_round1"].to_numpy(), threshold,
                                            cfg, held_out)
            except ValueError as err:  # round 1 kept (or dropped) every raw document: nothing to learn from
                log.warning("seed loop: no second round (%s)", err)
                metrics["round2_skipped"] = 1.0
                break
        rater = train_classifier(training, fasttext_cfg)
        if prepared_corpus is None:
            prepared_corpus = rater.preprocess(documents["text"].tolist())
        s = rater.score_prepared(prepared_corpus)
        scores[f"ufw_score_round{k}"] = s
        keep = np.where(np.isfinite(s), s >= threshold, False)
        metrics[f"round{k}_positives"] = float((training["label"] == 1).sum())
        metrics[f"round{k}_negatives"] = float((training["label"] == 0).sum())
        metrics[f"round{k}_keep_rate"] = float(keep.mean())
        sets.append(training.drop(columns="text").assign(round=k))
        log.info("seed loop round %d: %d positives, %d negatives, keeps %.1f%% of the corpus", k,
                 metrics[f"round{k}_positives"], metrics[f"round{k}_negatives"], 100 * keep.mean())
    metrics["rounds_run"] = float(len(sets))
    scores["ufw_score"] = scores[f"ufw_score_round{len(sets)}"]
    scores["keep"] = np.where(np.isfinite(scores["ufw_score"]), scores["ufw_score"] >= threshold, False)
    metrics["threshold"] = float(threshold)
    return pd.concat(sets, ignore_index=True), scores, metrics


def keep_rates(frame: pd.DataFrame, by: str = "category") -> pd.DataFrame:
    """Share kept (``keep``) and mean score per domain, plus ``all``, in a column named ``by``: the domains are
    the ``by`` column's values, else the ``source`` column's, else there is only ``all``."""
    column = by if by in frame else "source" if "source" in frame else None
    groups = frame.groupby(column, sort=True) if column is not None else []
    rows = [{by: k, "docs": len(g), "kept": int(g["keep"].sum()), "keep_rate": float(g["keep"].mean()),
             "mean_score": float(g["ufw_score"].mean())} for k, g in groups]
    rows.append({by: "all", "docs": len(frame), "kept": int(frame["keep"].sum()),
                 "keep_rate": float(frame["keep"].mean()), "mean_score": float(frame["ufw_score"].mean())})
    return pd.DataFrame(rows)
