"""Selection engine: choose `budget` of N items from quality scores and embeddings.

Pure PyTorch/NumPy (no Kedro, MLflow or Hydra). Methods: ``datamask``
(DATAMASK Algorithm 1, seeds/000), ``greedy`` (DiSF Algorithm 1, seeds/001, and
greedy for every objective), ``topk_quality``, ``random``, ``semdedup``, ``dvrl``.

    from curation.selection import select
    sel = select("datamask", quality=q, embeddings=z, budget=1000, config={"lam": 0.3}, seed=0)
    sel.indices   # sorted int64, exactly `budget` unique ids
    sel.history   # pandas DataFrame, one row per recorded step
    sel.info      # dict: config, counts, timings

Modules, one job each: ``config`` (knobs + defaults), ``objectives`` (Eq. 3, 4, 12), ``datamask`` (the
block driver of Algorithm 1) with ``datamask_sampler`` (Eq. 7), ``datamask_policy`` (Eq. 9-11) and
``datamask_health``; ``greedy`` with ``greedy_batch`` (one batch of DiSF Algorithm 1) and ``greedy_disf``
(DiSF Eq. 3-5 in closed form); ``baselines``, ``semdedup``, ``dvrl``, ``diagnostics``, ``budget`` (exact budget
splits), ``tokens`` (token budgets), ``api`` (``select``); ``corpus`` (named corpus recipes) with
``corpus_budget``, ``corpus_pick`` and ``corpus_pick_shards`` (the selection stage in memory and on shards);
``sharded`` (blocks as tasks).
"""

from curation.lazy_exports import lazy_exports

# public name -> its module, imported on first use (curation.lazy_exports: what `curate`'s config check
# imports of this package stays light)
_LAZY = {
    "Selection": "curation.selection.api",
    "select": "curation.selection.api",
    "DATAMASK_PAPER": "curation.selection.config",
    "BudgetConfig": "curation.selection.config",
    "DataMaskConfig": "curation.selection.config",
    "DvrlConfig": "curation.selection.config",
    "GreedyConfig": "curation.selection.config",
    "RandomConfig": "curation.selection.config",
    "SemDeDupConfig": "curation.selection.config",
    "TopkQualityConfig": "curation.selection.config",
    "parse_selection_config": "curation.selection.config",
    "diagnose": "curation.selection.diagnostics",
    "dominance_scores": "curation.selection.diagnostics",
}

__all__ = list(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
