"""The Meta-rater experiment (seeds/004 Alg. 1): held-out set and scaled raters, proxy sweep, LightGBM,
w* search and selection, comparisons (Table 4), the N curve (Fig. 2) and figures (Fig. 5).

Proxy runs are long and resumable, so the sweep, the comparisons and the N
curve write per-run JSON files under a work folder given by the caller (the
Kedro catalog's ``metarater_work_dir``, or ``metarater.work_dir``), so
``experiment=metarater_proxy`` jobs and a later ``pipeline=metarater`` share
them. Every proxy and comparison run is reported to an ``on_result`` callback
(:data:`OnResult`; the nodes pass :class:`curation.tracking.child_runs.ChildRuns`,
which logs each as an MLflow child run). Plain Python: no Kedro, MLflow or Hydra.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import pandas as pd

from curation.metarater.analysis import cross_validated_spearman, weight_pca
from curation.metarater.compare import EvalStore, ComparisonSelection, comparison_selections, gaps_to_metarater
from curation.metarater.compare import paired_differences, summarize, uniform_weights
from curation.metarater.compare import weights_for_n
from curation.metarater.config import MetaraterConfig
from curation.metarater.core import aggregate, dirichlet_weights, domain_token_shares, minmax_scale
from curation.metarater.core import fit_regressor, regression_warning, search_weights, select_domain_budget
from curation.metarater.core import validation_description  # noqa: F401  (re-exported for the nodes)
from curation.metarater.proxy import TEST, VALIDATION, ProxyBench, array_hash, build_bench, fingerprint
from curation.metarater.proxy import held_out_sets, makeup
from curation.metarater.sweep import ProxySweep
from curation.selection.corpus import top_fraction
from curation.errors import UserError
from curation.paths import project_root
from curation.reporting.metarater_plots import plot_comparisons, plot_loss_landscape, plot_num_proxies, plot_weights

log = logging.getLogger(__name__)

# on_result(name, kind, result, params, metrics): one proxy or comparison run finished (or was reused).
# kind: "proxy" | "comparison" | "num_proxies"; result: its losses, timings, history, status, reused, error.
OnResult = Callable[[str, str, dict[str, Any], dict[str, Any], dict[str, float]], None]


def _ignore(name: str, kind: str, result: dict[str, Any], params: dict[str, Any], metrics: dict[str, float]) -> None:
    pass


MERGE_COPY_SUFFIX = "_0_5"  # scoring.merge adds <rater>_0_5 copies of its components (monotone: not new raters)


# --- data: held-out set, raters scaled to [0, 5] ---


def rater_columns(scores: pd.DataFrame, raters: Optional[list[str]]) -> list[str]:
    """``raters``, or every numeric score column except ``quality`` and the ``*_0_5`` merge copies."""
    if raters is not None:
        missing = [r for r in raters if r not in scores]
        if missing:
            raise KeyError(f"metarater.raters: scores have no column {missing[0]!r}; columns: {list(scores.columns)}")
        return list(raters)
    numeric = scores.select_dtypes("number").columns
    return [c for c in numeric if c != "quality" and not c.endswith(MERGE_COPY_SUFFIX)]


def rater_training_ids(scoring: Any, documents: pd.DataFrame) -> set[str]:
    """Ids of every document some rater of ``scoring`` (a ``ScoringConfig`` or its mapping) trains on: the
    reference corpus's training rows (``scoring.training.source=reference``), or the scored corpus's own
    (``source=corpus``; it then needs ``quality_label`` and ``extra``/``category``)."""
    from curation.scoring.config import ScoringConfig, scoring_config_from_dict
    from curation.scoring.reference import training_ids

    cfg = scoring if isinstance(scoring, ScoringConfig) else scoring_config_from_dict(dict(scoring or {}))
    reference = None
    if cfg.training.source == "corpus":
        reference = documents.reset_index(drop=True)
        if "quality_label" not in reference:
            reference = reference.assign(quality_label=np.nan)
    ids = training_ids(cfg, reference)
    return set().union(*ids.values()) if ids else set()


def prepare_metarater_data(documents: pd.DataFrame, scores: pd.DataFrame, cfg: MetaraterConfig,
                           trained_ids: Optional[set[str]] = None
                           ) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, float]]:
    """Split off the held-out sets (D_v and the judge set, :func:`curation.metarater.proxy.held_out_sets`);
    return the candidates' raters min-max scaled to [0, 5] (``id``, ``doc_row`` = row in ``documents``,
    ``category``, one column per rater), the held-out ``id``/``set``/``group`` and counts (candidates,
    held-out documents per set and category with the corpus's shares beside them, NaN scores filled with
    the rater's minimum). ``trained_ids``: ids some rater trained on (:func:`rater_training_ids`); no held-out
    document is among them (checked)."""
    if len(scores) != len(documents) or not (scores["id"].to_numpy() == documents["id"].to_numpy()).all():
        raise ValueError("scores are not aligned with documents (same ids in the same order); re-run scoring")
    raters = rater_columns(scores, cfg.raters)
    unknown = [r for r in cfg.invert if r not in raters]
    if unknown:
        raise KeyError(f"metarater.invert: {unknown[0]!r} is not a rater; raters: {raters}")
    trained = documents["id"].isin(trained_ids or set()).to_numpy()
    held = held_out_sets(documents, cfg.validation, trained)
    clean_sets = [VALIDATION, TEST] if cfg.validation.source == "holdout" else [TEST]
    leaked = (held["set"].isin(clean_sets).fillna(False).to_numpy() & trained).sum()
    if leaked:  # held_out_sets draws from untrained rows only: this guards that promise
        raise AssertionError(f"{leaked} held-out documents are in a rater's training data")
    candidate = held["set"].isna().to_numpy()
    raw = scores.loc[candidate, raters].to_numpy(dtype="float64")
    metrics: dict[str, float] = {"candidates": float(candidate.sum()),
                                 "validation_docs": float((held["set"] == VALIDATION).sum()),
                                 "test_docs": float((held["set"] == TEST).sum()), "raters": float(len(raters)),
                                 "validation_clean": float(cfg.validation.source == "holdout"),
                                 "rater_training_docs_in_corpus": float(trained.sum())}
    for j, name in enumerate(raters):
        bad = ~np.isfinite(raw[:, j])
        if bad.any():  # a rater that could not score a document ranks it last
            raw[bad, j] = np.nanmin(np.where(np.isfinite(raw[:, j]), raw[:, j], np.nan))
        metrics[f"nan_filled_{name}"] = float(bad.sum())
    scaled = minmax_scale(raw)
    for name in cfg.invert:
        j = raters.index(name)
        scaled[:, j] = 5.0 - scaled[:, j]
    rater_scores = pd.DataFrame(scaled, columns=raters)
    categories = documents[cfg.validation.category_column].astype("string").fillna("unknown") \
        if cfg.validation.category_column in documents else pd.Series("all", index=documents.index)
    rater_scores.insert(0, "category", categories.to_numpy(dtype=str)[candidate])
    rater_scores.insert(0, "doc_row", np.flatnonzero(candidate))
    rater_scores.insert(0, "id", documents["id"].to_numpy()[candidate])
    out = held[held["set"].notna()]
    validation_ids = pd.DataFrame({"id": documents["id"].to_numpy()[~candidate],
                                   "set": out["set"].to_numpy(dtype=str), "group": out["group"].to_numpy(dtype=str)})
    metrics.update(makeup(documents, held, cfg.validation.category_column))
    if cfg.validation.source == "high_quality":
        for name, count in out.loc[out["set"] == VALIDATION, "group"].value_counts().items():
            metrics[f"validation_docs_{name}"] = float(count)
    return rater_scores, validation_ids, metrics


def _split(rater_scores: pd.DataFrame) -> tuple[list[str], np.ndarray, np.ndarray]:
    raters = [c for c in rater_scores.columns if c not in ("id", "doc_row", "category")]
    return raters, rater_scores[raters].to_numpy(dtype="float64"), rater_scores["doc_row"].to_numpy(dtype=np.int64)


def draw_proxy_weights(metarater_rater_scores: pd.DataFrame, cfg: MetaraterConfig) -> pd.DataFrame:
    """N Dirichlet weight vectors over the raters (Alg. 1 step 1): ``proxy_id`` + one ``w_<rater>`` column each."""
    raters, _, _ = _split(metarater_rater_scores)
    weights = dirichlet_weights(cfg.num_proxies, len(raters), alpha=cfg.alpha, seed=cfg.seed)
    table = pd.DataFrame(weights, columns=[f"w_{r}" for r in raters])
    table.insert(0, "proxy_id", np.arange(cfg.num_proxies))
    return table


# --- the proxy bench, work directory and MLflow child runs ---


@dataclass
class _Setup:
    cfg: MetaraterConfig
    raters: list[str]
    scaled: np.ndarray  # (candidates, raters) in [0, 5]
    doc_rows: np.ndarray  # candidate -> row of `documents`
    bench: ProxyBench
    work_dir: Path
    bench_key: str  # everything a proxy's loss depends on except its selection and seed
    categories: np.ndarray  # candidate -> category

    def rows(self, candidate_indices: np.ndarray) -> np.ndarray:
        return self.doc_rows[np.asarray(candidate_indices)]

    @property
    def lengths(self) -> np.ndarray:
        """Tokens (proxy tokenizer, EOS included) of each candidate."""
        return self.bench.table.lengths(self.doc_rows)

    @property
    def proportions(self) -> dict[str, float]:
        """The fixed domain proportions: ``metarater.domain_proportions`` or the candidates' token shares."""
        if self.cfg.domain_proportions is not None:
            return dict(self.cfg.domain_proportions)
        return domain_token_shares(self.categories, self.lengths)

    @property
    def budget_tokens(self) -> float:
        return float(self.cfg.keep_frac * self.lengths.sum())

    def select(self, score: np.ndarray) -> np.ndarray:
        """Candidates chosen by ``score`` under ``metarater.selection_rule``: the paper's token budget
        (keep_frac of the candidates' tokens) with fixed domain proportions, or the top keep_frac documents."""
        if self.cfg.selection_rule == "top_frac":
            return top_fraction(score, self.cfg.keep_frac)
        return select_domain_budget(score, self.categories, self.lengths, self.budget_tokens, self.proportions)

    @property
    def sweep_dir(self) -> Path:
        cfg = self.cfg
        rule = [cfg.selection_rule, cfg.domain_proportions] if cfg.selection_rule != "top_frac" else []
        key = fingerprint(self.bench_key, array_hash(self.scaled), cfg.keep_frac, cfg.alpha, cfg.seed, cfg.proxy.seed,
                          *rule)
        return self.work_dir / f"sweep-{key}"


def _held_frame(documents: pd.DataFrame, validation_ids: pd.DataFrame) -> pd.DataFrame:
    held = pd.DataFrame({"set": pd.Series(pd.NA, index=documents.index, dtype="string"),
                         "group": pd.Series(pd.NA, index=documents.index, dtype="string")})
    position = pd.Series(np.arange(len(documents)), index=documents["id"].to_numpy())
    at = position.loc[validation_ids["id"].to_numpy()].to_numpy()
    sets = validation_ids["set"].to_numpy(dtype=str) if "set" in validation_ids else np.full(len(at), VALIDATION)
    held.iloc[at, 0] = sets
    held.iloc[at, 1] = validation_ids["group"].to_numpy(dtype=str)
    return held


def _setup(documents: pd.DataFrame, rater_scores: pd.DataFrame, validation_ids: pd.DataFrame,
           cfg: MetaraterConfig, directory: Path) -> _Setup:
    raters, scaled, doc_rows = _split(rater_scores)
    held = _held_frame(documents, validation_ids)
    external = None
    if cfg.validation.source == "file":
        path = Path(cfg.validation.path)
        path = path if path.is_absolute() else project_root() / path
        frame = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_json(path, lines=True)
        if "text" not in frame:
            raise KeyError(f"metarater.validation.path {path} has no `text` column")
        external = frame["text"].astype(str).tolist()
    directory = Path(directory)
    bench = build_bench(documents["text"].astype(str).tolist(), held, cfg.proxy, cfg.validation, directory,
                        external_validation=external)
    pretrain = asdict(cfg.proxy.pretrain_config(seed=0))
    # Threads change a loss only in its last float digits: proxies trained by 1-thread parallel jobs
    # (experiment=metarater_proxy with joblib) must be found by a 2-thread pipeline run.
    pretrain["train"].pop("num_threads")
    streams = [array_hash(w.stream) for w in [*bench.validation.values(), *bench.test.values()]]
    bench_key = fingerprint("metarater-bench-v2", array_hash(bench.table.tokens), streams, sorted(bench.validation),
                            sorted(bench.test), pretrain, array_hash(doc_rows))
    categories = rater_scores["category"].to_numpy(dtype=str) if "category" in rater_scores \
        else np.full(len(rater_scores), "all")
    setup = _Setup(cfg, raters, scaled, doc_rows, bench, directory, bench_key, categories)
    check_proxy_budget(setup)
    return setup


class ProxyBudgetError(UserError, ValueError):
    """The proxies' training budget is more than one pass over the selection each proxy trains on."""


def check_proxy_budget(setup: _Setup) -> None:
    """Refuse a sweep whose proxies would train for more than one pass over their selections, before the
    first proxy trains.

    Each proxy trains on ``metarater.proxy.max_tokens`` tokens of the top ``keep_frac`` of the candidates'
    tokens (Alg. 1 steps 3-4); the paper's proxies see each selected token about once (3.2B tokens of a
    larger pool). On the bundled corpus a proxy sees 0.11 of its selection; on a 20-document corpus the
    defaults meant ~90 passes over ~3,000 tokens, for each of 64 proxies (~1.5 h), with losses that
    measure memorisation, not data quality (issue #44)."""
    cfg = setup.cfg
    train_tokens = cfg.proxy.pretrain_config().train.max_tokens
    selection = setup.budget_tokens
    if train_tokens is None or train_tokens <= selection:
        return
    candidates = float(setup.lengths.sum())
    raise ProxyBudgetError(
        f"metarater.proxy.max_tokens={train_tokens}: each proxy trains on {train_tokens:,} tokens, but its selection "
        f"(metarater.keep_frac={cfg.keep_frac} of the {len(setup.doc_rows):,} candidates' {candidates:,.0f} tokens) "
        f"holds about {selection:,.0f}: {train_tokens / max(selection, 1.0):,.1f} passes over it, where the paper's "
        f"proxies see each selected token about once. Fix: set metarater.proxy.max_tokens to at most "
        f"{int(selection):,}, raise metarater.keep_frac, or run on a larger corpus.")


# --- Alg. 1 steps 2-5: the proxy sweep ---


def _sweep(setup: _Setup, weights: np.ndarray, proxy_ids: Optional[list[int]], on_result: OnResult):
    """Run (or resume) the sweep over ``proxy_ids``; report every proxy to ``on_result``."""
    cfg, raters = setup.cfg, setup.raters
    sweep = ProxySweep(setup.sweep_dir, weights)
    ids = list(range(len(weights))) if proxy_ids is None else list(proxy_ids)
    reused = set()
    for i in ids:
        done = sweep.load(i)
        if done is None:
            continue
        if not np.allclose(done.weights, weights[i]):
            raise ValueError(f"{sweep.path(i)} holds other weights than proxy {i}: "
                             "remove it or change metarater.work_dir")
        if done.status == "ok" or not cfg.retry_failed:
            reused.add(i)

    def train_one(i: int, w: np.ndarray) -> dict[str, Any]:
        indices = setup.select(aggregate(setup.scaled, w))
        log.info("proxy %d/%d: %d documents", i + 1, len(weights), len(indices))
        return setup.bench.evaluate(setup.rows(indices))

    def progress(result) -> None:
        payload = {**asdict(result), **result.extra, "reused": result.proxy_id in reused}
        on_result(f"proxy {result.proxy_id:03d}", "proxy", payload, {"proxy_id": result.proxy_id},
                     {f"w_{r}": v for r, v in zip(raters, result.weights)})
        if result.status == "ok":
            log.info("proxy %d: val_loss %.4f in %.0fs", result.proxy_id, result.val_loss, result.seconds)

    for i in sorted(reused):  # already on disk: logged, not retrained
        progress(sweep.load(i))
    todo = [i for i in ids if i not in reused]
    results = {r.proxy_id: r for r in sweep.run(train_one, todo, retry_failed=cfg.retry_failed, progress=progress)}
    results.update({i: sweep.load(i) for i in reused})
    return [results[i] for i in ids], reused


def _results_table(results, reused: set[int], raters: list[str]) -> pd.DataFrame:
    rows = []
    for r in results:
        extra = {k: v for k, v in r.extra.items() if k != "history"}
        rows.append({"proxy_id": r.proxy_id, "status": r.status, "val_loss": r.val_loss, "seconds": r.seconds,
                     "reused": r.proxy_id in reused, "error": r.error or "",
                     **{k: extra.get(k) for k in ("train_loss", "cpu_seconds", "selection_docs", "selection_tokens",
                                                  "epochs", "tokens")},
                     **{k: v for k, v in extra.items() if k.startswith(("val_loss_", "test_loss"))},
                     **{f"w_{name}": w for name, w in zip(raters, r.weights)}})
    return pd.DataFrame(rows)


def train_proxies(documents: pd.DataFrame, metarater_rater_scores: pd.DataFrame,
                  metarater_validation_ids: pd.DataFrame, metarater_weights: pd.DataFrame,
                  cfg: MetaraterConfig, work_dir: Path,
                  on_result: OnResult = _ignore) -> tuple[pd.DataFrame, dict[str, float], pd.DataFrame]:
    """Train (or reuse from disk) one proxy per weight vector; return one row per proxy (status,
    val_loss, weights, timings), sweep counts, and the losses as a series over ``step`` = proxy id."""
    started = time.perf_counter()
    setup = _setup(documents, metarater_rater_scores, metarater_validation_ids, cfg, work_dir)
    weights = metarater_weights[[f"w_{r}" for r in setup.raters]].to_numpy(dtype="float64")
    results, reused = _sweep(setup, weights, None, on_result)
    table = _results_table(results, reused, setup.raters)
    ok = table[table["status"] == "ok"]
    failed = table[table["status"] != "ok"]
    for _, row in failed.iterrows():
        log.error("proxy %d failed: %s", row["proxy_id"], row["error"])
    trained = table[~table["reused"]]
    metrics = {
        "proxies_ok": float(len(ok)), "proxies_failed": float(len(failed)), "proxies_reused": float(len(reused)),
        "proxies_trained": float(len(trained)), "sweep_seconds": time.perf_counter() - started,
        "validation_tokens": float(sum(setup.bench.validation_groups.values())),
        **{f"validation_tokens_{k}": float(v) for k, v in setup.bench.validation_groups.items()},
        "test_tokens": float(sum(setup.bench.test_groups.values())),
    }
    if len(ok):
        metrics.update({"proxy_val_loss_min": float(ok["val_loss"].min()),
                        "proxy_val_loss_max": float(ok["val_loss"].max()),
                        "proxy_val_loss_mean": float(ok["val_loss"].mean()),
                        "proxy_val_loss_std": float(ok["val_loss"].std(ddof=1)) if len(ok) > 1 else 0.0,
                        "proxy_seconds_mean": float(ok["seconds"].mean()),
                        "proxy_cpu_seconds_mean": float(ok["cpu_seconds"].astype(float).mean()),
                        "proxy_epochs_mean": float(ok["epochs"].astype(float).mean())})
    history = ok[["proxy_id", "val_loss"]].rename(columns={"proxy_id": "step", "val_loss": "proxy_val_loss"})
    return table, metrics, history.reset_index(drop=True)


# --- regression and search ---


def _ok(results: pd.DataFrame, raters_from: list[str] | None = None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    ok = results[results["status"] == "ok"].sort_values("proxy_id")
    raters = raters_from or [c[2:] for c in results.columns if c.startswith("w_")]
    return ok[[f"w_{r}" for r in raters]].to_numpy(dtype="float64"), ok["val_loss"].to_numpy(dtype="float64"), raters


def fit_loss_regressor(metarater_proxy_results: pd.DataFrame,
                       cfg: MetaraterConfig) -> tuple[Any, dict[str, float]]:
    """LightGBM f(w) -> loss on the ok proxies (train / early-stop / test splits); Spearman rho on the
    test split (``regression_spearman_test``) and of 5-fold out-of-fold predictions (``regression_spearman_cv``)."""
    weights, losses, _ = _ok(metarater_proxy_results)
    model, metrics = fit_regressor(weights, losses, cfg.regression)
    try:
        rho_cv, _ = cross_validated_spearman(weights, losses, cfg.regression)
    except ValueError as exc:  # a fold's training part is too small for three splits
        log.warning("no cross-validated Spearman rho: %s", exc)
        rho_cv = float("nan")
    out = {f"regression_{k}": v for k, v in metrics.items()}
    out["regression_spearman_cv"] = rho_cv
    out["regression_proxies"] = float(len(losses))
    warning = regression_warning(metrics)
    out["regression_warning"] = float(warning is not None)
    if warning:
        log.warning("Meta-rater: %s", warning)
    log.info("regression on %d proxies: Spearman rho %.3f (test split, %d proxies), %.3f (5-fold CV)",
             len(losses), metrics["spearman_test"], int(metrics["n_test"]), rho_cv)
    return model, out


def search_optimal_weights(metarater_regressor: Any, metarater_rater_scores: pd.DataFrame,
                           cfg: MetaraterConfig) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, float]]:
    """w* = mean of the top_k of n_candidates Dirichlet vectors by predicted loss; the Table 10
    analogue (``rank``, ``rater``, ``weight_pct``), the top candidates, and predicted losses."""
    raters, _, _ = _split(metarater_rater_scores)
    started = time.perf_counter()
    w_star, top = search_weights(metarater_regressor, len(raters), n_candidates=cfg.search.n_candidates,
                                 top_k=cfg.search.top_k, alpha=cfg.alpha, seed=cfg.search.seed, batch=cfg.search.batch)
    top.columns = ["predicted_loss", *[f"w_{r}" for r in raters]]
    table = pd.DataFrame({"rater": raters, "weight_pct": 100.0 * w_star})
    table = table.sort_values("weight_pct", ascending=False, kind="stable").reset_index(drop=True)
    table.insert(0, "rank", np.arange(1, len(table) + 1))
    predicted = metarater_regressor.predict(np.vstack([w_star, uniform_weights(len(raters))]))
    metrics = {"search_seconds": time.perf_counter() - started, "predicted_loss_w_star": float(predicted[0]),
               "predicted_loss_uniform": float(predicted[1]),
               "predicted_loss_top_k_mean": float(top["predicted_loss"].mean()),
               **{f"w_star_{r}": float(w) for r, w in zip(raters, w_star)}}
    return table, top, metrics


def _w_star(weights_table: pd.DataFrame, raters: list[str]) -> np.ndarray:
    by_rater = weights_table.set_index("rater")["weight_pct"]
    missing = [r for r in raters if r not in by_rater]
    if missing:
        raise KeyError(f"the weights table has no rater {missing[0]!r}")
    w = by_rater.loc[raters].to_numpy(dtype="float64")
    return w / w.sum()


def selection_mix(setup: _Setup, chosen: np.ndarray) -> dict[str, float]:
    """Tokens of a selection against the budget, and its domain token shares against the fixed proportions."""
    lengths = setup.lengths
    tokens = float(lengths[chosen].sum())
    out = {"selected_docs": float(len(chosen)), "selected_tokens": tokens}
    if setup.cfg.selection_rule == "top_frac":
        return out
    target = setup.proportions
    out["budget_tokens"] = setup.budget_tokens
    out["budget_error"] = tokens / setup.budget_tokens - 1
    picked = pd.Series(lengths[chosen]).groupby(setup.categories[chosen]).sum() / max(tokens, 1.0)
    for name, share in target.items():
        out[f"selected_token_share_{name}"] = float(picked.get(name, 0.0))
        out[f"target_token_share_{name}"] = float(share)
    out["domain_share_max_gap"] = float(max(abs(picked.get(k, 0.0) - v) for k, v in target.items()))
    return out


def select_with_optimal_weights(metarater_weights_table: pd.DataFrame, metarater_rater_scores: pd.DataFrame,
                                documents: pd.DataFrame, metarater_validation_ids: pd.DataFrame,
                                cfg: MetaraterConfig, work_dir: Path) -> tuple[pd.DataFrame, dict[str, float]]:
    """The final Meta-rater selection by w* . q under ``metarater.selection_rule`` (default: keep_frac of the
    candidates' tokens with fixed domain proportions) (``id``, ``score``) and its mix (tokens against the
    budget, token share per category against the target, documents per category, characters)."""
    setup = _setup(documents, metarater_rater_scores, metarater_validation_ids, cfg, work_dir)
    q = aggregate(setup.scaled, _w_star(metarater_weights_table, setup.raters))
    chosen = setup.select(q)
    selected = pd.DataFrame({"id": metarater_rater_scores["id"].to_numpy()[chosen], "score": q[chosen]})
    picked = documents.iloc[setup.doc_rows[chosen]]
    metrics = {**selection_mix(setup, chosen), "selected_chars": float(picked["text"].str.len().sum()),
               "selected_score_mean": float(q[chosen].mean())}
    if "category" in picked:
        for name, count in picked["category"].astype("string").fillna("unknown").value_counts().items():
            metrics[f"selected_share_{name}"] = float(count / len(chosen))
    return selected, metrics


# --- comparisons (Table 4) and the N curve (Fig. 2) ---


def _evaluate_all(setup: _Setup, selections: list[ComparisonSelection], on_result: OnResult, kind: str) -> list[dict]:
    store = EvalStore(setup.work_dir / "evals", setup.bench_key)
    rows = []
    for n, sel in enumerate(selections, start=1):
        log.info("%s %d/%d: %s, seed %d", kind, n, len(selections), sel.method, sel.seed)
        result = store.evaluate(sel, lambda idx, seed: setup.bench.evaluate(setup.rows(idx), seed=seed))
        on_result(f"{kind} {sel.method} seed {sel.seed}", kind, result, {"method": sel.method, "seed": sel.seed},
                     {f"info_{k}": v for k, v in sel.info.items()})
        rows.append({"method": sel.method, "seed": sel.seed, "val_loss": result["val_loss"],
                     "test_loss": result.get("test_loss", float("nan")),
                     **{k: v for k, v in result.items() if k.startswith(("val_loss_", "test_loss_"))},
                     "train_loss": result["train_loss"], "selection_docs": result["selection_docs"],
                     "selection_tokens": result["selection_tokens"], "epochs": result["epochs"],
                     "seconds": result["seconds"], "cpu_seconds": result["cpu_seconds"], "reused": result["reused"],
                     **{f"info_{k}": v for k, v in sel.info.items()}})
    return rows


def compare_selections(documents: pd.DataFrame, metarater_rater_scores: pd.DataFrame,
                       metarater_validation_ids: pd.DataFrame, metarater_weights_table: pd.DataFrame,
                       cfg: MetaraterConfig, work_dir: Path,
                       on_result: OnResult = _ignore) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, float]]:
    """One proxy per (method, seed): w*, uniform mean, intersection, random, each rater alone.
    Returns every run, the mean/std per method (best first) and ``val_loss_<method>_mean|std`` metrics
    with the gaps of w* to uniform and random in units of their standard error."""
    c = cfg.comparisons
    if not c.enabled:
        return pd.DataFrame(columns=["method", "seed", "val_loss"]), \
            pd.DataFrame(columns=["method", "val_loss_mean", "val_loss_std", "seeds"]), {}
    setup = _setup(documents, metarater_rater_scores, metarater_validation_ids, cfg, work_dir)
    selections = comparison_selections(setup.scaled, setup.raters, _w_star(metarater_weights_table, setup.raters),
                                       cfg.keep_frac, methods=c.methods, seeds=c.seeds, single_raters=c.single_raters,
                                       single_rater_seeds=c.single_rater_seeds,
                                       intersection_raters=c.intersection_raters, select=setup.select)
    table = pd.DataFrame(_evaluate_all(setup, selections, on_result, "comparison"))
    summary = summarize(table)
    metrics: dict[str, float] = {"comparison_runs_trained": float((~table["reused"]).sum())}
    for _, row in summary.iterrows():
        name = str(row["method"]).replace(":", "_")
        metrics[f"val_loss_{name}_mean"] = float(row["val_loss_mean"])
        metrics[f"val_loss_{name}_std"] = float(row["val_loss_std"])
    means = summary.set_index("method")
    if "metarater" in means.index:
        best = summary["method"].iloc[0]
        metrics["metarater_rank"] = float(summary.index[summary["method"] == "metarater"][0] + 1)
        log.info("comparisons: best %s; metarater rank %d of %d", best, metrics["metarater_rank"], len(summary))
        metrics.update(gaps_to_metarater(summary))
        # judged on the held-out judge set (data w* never saw), paired by proxy seed, mean and per category
        columns = ["test_loss", *sorted(k for k in table.columns if k.startswith("test_loss_"))]
        for row in paired_differences(table, columns).itertuples():
            name = f"diff_{str(row.method).replace(':', '_')}_minus_metarater_{row.loss}"
            metrics[f"{name}_mean"] = row.diff_mean
            metrics[f"{name}_se"] = row.diff_se
    if "info_per_rater_top_frac" in table:
        values = table["info_per_rater_top_frac"].dropna()
        if len(values):
            metrics["intersection_per_rater_top_frac"] = float(values.iloc[0])
    return table, summary, metrics


def evaluate_num_proxies(documents: pd.DataFrame, metarater_proxy_results: pd.DataFrame,
                         metarater_rater_scores: pd.DataFrame, metarater_validation_ids: pd.DataFrame,
                         metarater_weights_table: pd.DataFrame, cfg: MetaraterConfig, work_dir: Path,
                         on_result: OnResult = _ignore) -> tuple[pd.DataFrame, dict[str, float]]:
    """Fig. 2 analogue: for each N in ``comparisons.num_proxies`` (at most the ok proxies), regress on the
    first N proxies, search w*, select, and train a proxy per seed on that selection. At N = all ok
    proxies that is the run's own w* (its comparison runs are reused, not retrained)."""
    c = cfg.comparisons
    weights, losses, raters = _ok(metarater_proxy_results)
    ns = sorted({n for n in c.num_proxies if n <= len(losses)})
    columns = ["num_proxies", "val_loss_mean", "test_loss_mean", "val_loss_std", "seeds", "spearman_test"]
    if not c.enabled or not ns:
        return pd.DataFrame(columns=columns), {}
    setup = _setup(documents, metarater_rater_scores, metarater_validation_ids, cfg, work_dir)
    rows = []
    for n in ns:
        try:
            w_star, reg = weights_for_n(weights, losses, n, cfg.regression, n_candidates=cfg.search.n_candidates,
                                        top_k=cfg.search.top_k, alpha=cfg.alpha, seed=cfg.search.seed,
                                        batch=cfg.search.batch)
        except ValueError as exc:  # too few proxies for the three splits
            log.warning("N=%d skipped: %s", n, exc)
            continue
        if n == len(losses):  # the same regression and search as the run's w*: use it exactly
            w_star = _w_star(metarater_weights_table, setup.raters)
        chosen = setup.select(aggregate(setup.scaled, w_star))
        sels = [ComparisonSelection(f"metarater@N={n}", chosen, seed, {}) for seed in c.num_proxies_seeds]
        runs = pd.DataFrame(_evaluate_all(setup, sels, on_result, "num_proxies"))
        rows.append({"num_proxies": n, "val_loss_mean": float(runs["val_loss"].mean()),
                     "test_loss_mean": float(runs["test_loss"].mean()),
                     "val_loss_std": float(runs["val_loss"].std(ddof=1)) if len(runs) > 1 else 0.0,
                     "seeds": float(len(runs)), "spearman_test": reg["spearman_test"]})
    curve = pd.DataFrame(rows, columns=columns)
    metrics = {f"num_proxies_{int(r.num_proxies)}_val_loss": float(r.val_loss_mean) for r in curve.itertuples()}
    return curve, metrics


def plot_metarater(metarater_proxy_results: pd.DataFrame, metarater_weights_table: pd.DataFrame,
                   metarater_num_proxies_table: pd.DataFrame,
                   metarater_comparison_summary_table: pd.DataFrame) -> tuple[Any, Any, Any, Any]:
    """Loss landscape over the weight PCA with w* and uniform marked (Fig. 5), val loss vs N (Fig. 2),
    the comparison bars (Table 4) and the weights (Table 10)."""
    weights, losses, raters = _ok(metarater_proxy_results)
    coords, components, mean, explained = weight_pca(weights)
    w_star = _w_star(metarater_weights_table, raters)
    marks = {name: (w - mean) @ components.T for name, w in (("w*", w_star), ("uniform", uniform_weights(len(raters))))}
    summary = metarater_comparison_summary_table
    references = summary[summary["method"].isin(["uniform", "random", "intersection"])] if len(summary) else None
    return (plot_loss_landscape(coords, losses, explained, marks),
            plot_num_proxies(metarater_num_proxies_table, references),
            plot_comparisons(summary), plot_weights(metarater_weights_table))


# --- experiment=metarater_proxy: one proxy per Hydra job ---


def train_one_proxy(documents: pd.DataFrame, scores: pd.DataFrame, cfg: MetaraterConfig,
                    work_dir: Path, trained_ids: Optional[set[str]] = None) -> tuple[dict[str, float], pd.DataFrame]:
    """Train proxy ``metarater.proxy_id`` only and store it in ``work_dir``, where ``pipeline=metarater``
    looks for it; its metrics (weights, losses) and loss curve are returned for the job's own run."""
    if cfg.proxy_id is None:
        raise ValueError("metarater.proxy_id is not set: run `curate -m experiment=metarater_proxy "
                         "metarater.proxy_id=range(0,32)`")
    rater_scores, validation_ids, _ = prepare_metarater_data(documents, scores, cfg, trained_ids)
    weights_table = draw_proxy_weights(rater_scores, cfg)
    setup = _setup(documents, rater_scores, validation_ids, cfg, work_dir)
    weights = weights_table[[f"w_{r}" for r in setup.raters]].to_numpy(dtype="float64")

    # No child run: the job's own run is the proxy's record.
    [result], reused = _sweep(setup, weights, [cfg.proxy_id], _ignore)
    if result.status != "ok":
        raise RuntimeError(f"proxy {cfg.proxy_id} failed: {result.error}")
    metrics = {"proxy_id": float(cfg.proxy_id), "val_loss": float(result.val_loss), "seconds": float(result.seconds),
               "reused": float(cfg.proxy_id in reused),
               **{k: float(v) for k, v in result.extra.items() if k != "history" and isinstance(v, (int, float))},
               **{f"w_{r}": float(w) for r, w in zip(setup.raters, result.weights)}}
    history = pd.DataFrame(result.extra.get("history", []), columns=["step", "train_loss_curve"])
    log.info("proxy %d: val_loss %.4f (%s)", cfg.proxy_id, result.val_loss, setup.sweep_dir)
    return metrics, history
