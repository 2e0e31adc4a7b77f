"""Meta-rater nodes (seeds/004 Alg. 1): adapters of :mod:`curation.metarater.experiment`.

The sweep's own files live in ``metarater.work_dir`` when set, else in the
catalog's ``metarater_work_dir``; each proxy and comparison run is also an MLflow
child run of the pipeline's run (:class:`curation.tracking.child_runs.ChildRuns`).
What D_v is made of and a regressor that learned nothing are also MLflow tags of the run
(``curation.metarater.validation``, ``curation.metarater.regression_warning``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from curation.metarater.config import parse_metarater_config
from curation.metarater.core import regression_warning
from curation.paths import project_root

VALIDATION_TAG = "curation.metarater.validation"
WARNING_TAG = "curation.metarater.regression_warning"


def _core():
    """:mod:`curation.metarater.experiment` (the LM, torch), imported when a node runs, not when `curate` lists
    the pipelines."""
    from curation.metarater import experiment

    return experiment


def _child_runs():
    from curation.tracking.child_runs import ChildRuns

    return ChildRuns()


def _folder(metarater: dict[str, Any], metarater_work_dir: Path) -> Path:
    """``metarater.work_dir`` (relative: under the project root) or the catalog's folder."""
    chosen = parse_metarater_config(metarater).work_dir
    if chosen is None:
        return Path(metarater_work_dir)
    return Path(chosen) if Path(chosen).is_absolute() else project_root() / chosen


def _tag(key: str, value: str) -> None:
    """An MLflow tag on the pipeline's run (none without an active run)."""
    import mlflow

    if mlflow.active_run() is not None:
        mlflow.set_tag(key, value[:5000])


def prepare_metarater_data(documents: pd.DataFrame, scores: pd.DataFrame, metarater: dict[str, Any],
                           scoring: dict[str, Any]):
    """Candidates' raters scaled to [0, 5] (``id``, ``doc_row``, ``category``, one column per rater), the
    held-out ids (D_v and the judge set, free of every rater's training rows), counts and makeup."""
    cfg = parse_metarater_config(metarater)
    core = _core()
    trained = core.rater_training_ids(scoring, documents)
    rater_scores, validation_ids, metrics = core.prepare_metarater_data(documents, scores, cfg, trained)
    _tag(VALIDATION_TAG, core.validation_description(metrics, cfg.validation.source))
    return rater_scores, validation_ids, metrics


def draw_proxy_weights(metarater_rater_scores: pd.DataFrame, metarater: dict[str, Any]) -> pd.DataFrame:
    return _core().draw_proxy_weights(metarater_rater_scores, parse_metarater_config(metarater))


def train_proxies(documents, metarater_rater_scores, metarater_validation_ids, metarater_weights,
                  metarater: dict[str, Any], metarater_work_dir: Path):
    """One proxy per weight vector (reused from disk when done): per-proxy table, sweep counts, loss series."""
    return _core().train_proxies(documents, metarater_rater_scores, metarater_validation_ids, metarater_weights,
                                 parse_metarater_config(metarater), _folder(metarater, metarater_work_dir),
                                 _child_runs())


def fit_loss_regressor(metarater_proxy_results: pd.DataFrame, metarater: dict[str, Any]):
    model, metrics = _core().fit_loss_regressor(metarater_proxy_results, parse_metarater_config(metarater))
    warning = regression_warning(metrics, prefix="regression_")
    if warning:
        _tag(WARNING_TAG, warning)
    return model, metrics


def search_optimal_weights(metarater_regressor: Any, metarater_rater_scores: pd.DataFrame, metarater: dict[str, Any]):
    return _core().search_optimal_weights(metarater_regressor, metarater_rater_scores,
                                          parse_metarater_config(metarater))


def select_with_optimal_weights(metarater_weights_table, metarater_rater_scores, documents, metarater_validation_ids,
                                metarater: dict[str, Any], metarater_work_dir: Path):
    return _core().select_with_optimal_weights(metarater_weights_table, metarater_rater_scores, documents,
                                               metarater_validation_ids, parse_metarater_config(metarater),
                                               _folder(metarater, metarater_work_dir))


def compare_selections(documents, metarater_rater_scores, metarater_validation_ids, metarater_weights_table,
                       metarater: dict[str, Any], metarater_work_dir: Path):
    """Table 4: one proxy per (method, seed); every run, the per-method summary and the gaps as metrics."""
    return _core().compare_selections(documents, metarater_rater_scores, metarater_validation_ids,
                                      metarater_weights_table, parse_metarater_config(metarater),
                                      _folder(metarater, metarater_work_dir), _child_runs())


def evaluate_num_proxies(documents, metarater_proxy_results, metarater_rater_scores, metarater_validation_ids,
                         metarater_weights_table, metarater: dict[str, Any], metarater_work_dir: Path):
    """Fig. 2: validation loss of the w* selection regressed on the first N proxies."""
    return _core().evaluate_num_proxies(documents, metarater_proxy_results, metarater_rater_scores,
                                        metarater_validation_ids, metarater_weights_table,
                                        parse_metarater_config(metarater), _folder(metarater, metarater_work_dir),
                                        _child_runs())


def plot_metarater(metarater_proxy_results, metarater_weights_table, metarater_num_proxies_table,
                   metarater_comparison_summary_table):
    return _core().plot_metarater(metarater_proxy_results, metarater_weights_table, metarater_num_proxies_table,
                                  metarater_comparison_summary_table)


def train_one_proxy(documents: pd.DataFrame, scores: pd.DataFrame, metarater: dict[str, Any],
                    scoring: dict[str, Any], metarater_work_dir: Path) -> tuple[dict[str, float], pd.DataFrame]:
    """experiment=metarater_proxy: proxy ``metarater.proxy_id`` only; the job's own run records it."""
    core = _core()
    return core.train_one_proxy(documents, scores, parse_metarater_config(metarater),
                                _folder(metarater, metarater_work_dir), core.rater_training_ids(scoring, documents))
