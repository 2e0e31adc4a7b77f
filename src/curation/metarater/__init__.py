"""Meta-rater (Zhuang et al., Algorithm 1): learn weights over many quality scores.

1. :func:`dirichlet_weights` draws N weight vectors over the m raters.
2. :func:`aggregate` / :func:`select_top` build each proxy's training set.
3. :class:`ProxySweep` trains one proxy per vector (LM-agnostic: the caller
   passes the training function), resumable, one failure never loses the rest.
4. :func:`fit_regressor` fits LightGBM on (w_i -> loss_i) with separate
   train / early-stopping / test splits.
5. :func:`search_weights` predicts a dense Dirichlet sample and averages the
   top-k candidates into w*.

Around them (import them from their modules; they pull in torch via ``curation.lm``):
``config`` (MetaraterConfig, the quick / paper presets, strict parsing),
``proxy`` (the held-out validation set, the token table, one proxy run),
``compare`` (uniform / intersection / random / single-rater selections, cached
evaluations, w* from the first N proxies), ``analysis`` (weight PCA,
cross-validated Spearman rho).

No Kedro, MLflow or Hydra imports.
"""

from curation.lazy_exports import lazy_exports

# public name -> its module, imported on first use (curation.lazy_exports: what `curate`'s config check
# imports of this package stays light)
_LAZY = {
    "RegressionConfig": "curation.metarater.core",
    "aggregate": "curation.metarater.core",
    "dirichlet_weights": "curation.metarater.core",
    "fit_regressor": "curation.metarater.core",
    "minmax_scale": "curation.metarater.core",
    "search_weights": "curation.metarater.core",
    "select_top": "curation.metarater.core",
    "ProxyResult": "curation.metarater.sweep",
    "ProxySweep": "curation.metarater.sweep",
}

__all__ = list(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
