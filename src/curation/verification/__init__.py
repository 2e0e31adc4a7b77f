"""Efficient verification (Ultra-FineWeb, seeds/002 Sec. 2.2, App. A, C.3, Table 8).

``config``: the knobs (:class:`VerificationConfig`) and the Table 8 layout;
``anneal``: the experiment (candidate corpora -> WSD base model -> one annealing
run per (candidate, ratio) and the default-mix-only annealing per ratio, each
evaluated). Plain Python/PyTorch: the verification nodes adapt it to Kedro.
"""

from curation.verification.anneal import (
    anneal_candidates,
    annealing_length,
    sample_tokens,
    schedule_summary,
    select_candidates,
    tabulate,
    train_base,
)
from curation.verification.config import (
    BASE,
    BASELINE,
    DEFAULT_MIX,
    VerificationConfig,
    format_table8,
    parse_verification_config,
    ratio_label,
    verification_table,
)

__all__ = [
    "BASE",
    "BASELINE",
    "DEFAULT_MIX",
    "VerificationConfig",
    "anneal_candidates",
    "annealing_length",
    "sample_tokens",
    "schedule_summary",
    "format_table8",
    "parse_verification_config",
    "ratio_label",
    "select_candidates",
    "tabulate",
    "train_base",
    "verification_table",
]
