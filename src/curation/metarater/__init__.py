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

from curation.metarater.core import (
    RegressionConfig,
    aggregate,
    dirichlet_weights,
    fit_regressor,
    minmax_scale,
    search_weights,
    select_top,
)
from curation.metarater.sweep import ProxyResult, ProxySweep

__all__ = [
    "RegressionConfig",
    "aggregate",
    "dirichlet_weights",
    "fit_regressor",
    "minmax_scale",
    "search_weights",
    "select_top",
    "ProxyResult",
    "ProxySweep",
]
