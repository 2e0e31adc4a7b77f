"""Efficient verification (Ultra-FineWeb, seeds/002 Sec. 2.2, App. A, C.3, Table 8).

``config``: the knobs (:class:`VerificationConfig`) and the Table 8 layout;
``anneal``: the experiment (candidate corpora -> WSD base model -> one annealing
run per (candidate, ratio) and the default-mix-only annealing per ratio, each
evaluated). Plain Python/PyTorch: the verification nodes adapt it to Kedro.
"""

from curation.lazy_exports import lazy_exports

# public name -> its module, imported on first use (curation.lazy_exports: what `curate`'s config check
# imports of this package stays light)
_LAZY = {
    "anneal_candidates": "curation.verification.anneal",
    "annealing_length": "curation.verification.anneal",
    "sample_tokens": "curation.verification.anneal",
    "schedule_summary": "curation.verification.anneal",
    "select_candidates": "curation.verification.anneal",
    "tabulate": "curation.verification.anneal",
    "train_base": "curation.verification.anneal",
    "BASE": "curation.verification.config",
    "BASELINE": "curation.verification.config",
    "DEFAULT_MIX": "curation.verification.config",
    "VerificationConfig": "curation.verification.config",
    "format_table8": "curation.verification.config",
    "parse_verification_config": "curation.verification.config",
    "ratio_label": "curation.verification.config",
    "verification_table": "curation.verification.config",
}

__all__ = list(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
