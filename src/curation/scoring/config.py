"""``ScoringConfig``: every scoring knob in one tree, mirrored by conf/scoring/default.yaml.

The core takes plain dataclasses; ``scoring_config_from_dict`` builds them from
the mapping a Hydra node hands over (``OmegaConf.to_container(cfg.scoring)``)
with :func:`curation.configuration.parse_dataclass`, which refuses unknown keys
and wrong types, so a misspelt override fails instead of being ignored.
``ScoringConfig.__post_init__`` checks every numeric knob's range.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from curation.configuration import ConfigError, at_least, each, in_range, parse_dataclass
from curation.scoring.dsir import DSIRConfig
from curation.scoring.embedding_raters import EduConfig, WeakLabelRule, WikiConfig
from curation.scoring.fasttext_rater import FastTextConfig, UltraFineWebConfig
from curation.scoring.merge import MergeConfig
from curation.scoring.training_sets import TrainingSetConfig

ALL_RATERS = ("fasttext_dclm", "fasttext_ultrafineweb", "edu", "wiki", "dsir", "redpajama")
# None: follow data.engine; "inprocess" is the old name of "local" (still accepted)
ENGINES = ("local", "ray", "inprocess")


@dataclass
class DSIRTargets:
    """DSIR targets: score column prefix -> corpus categories forming that target."""

    targets: dict[str, list[str]] = field(default_factory=lambda: {"books": ["books"], "wikipedia": ["encyclopedic"]})
    # categories of the raw (source) model; None = the whole corpus
    raw_categories: list[str] | None = None
    model: DSIRConfig = field(default_factory=DSIRConfig)


@dataclass
class ScoringConfig:
    """The whole scoring step (issue 3, "Raters" and "Merged quality")."""

    # raters to run, from ALL_RATERS
    raters: list[str] = field(default_factory=lambda: list(ALL_RATERS))
    # who runs the per-shard embedding and scoring functions: None = data.engine (the one engine
    # knob of the per-shard stages) | local | ray; "inprocess" = local (its old name)
    engine: str | None = None
    # documents the raters and the 0-15 merge map are fitted on (a hash-chosen sample,
    # curation.scoring.sample); a corpus this small is fitted on every document
    fit_sample_docs: int = 50_000
    # a folder of fitted raters written by an earlier run (data/06_models/<namespace>/raters):
    # the raters it holds are loaded instead of fitted; null = fit every rater
    pretrained_dir: str | None = None
    training: TrainingSetConfig = field(default_factory=TrainingSetConfig)
    fasttext_dclm: FastTextConfig = field(default_factory=FastTextConfig)
    fasttext_ultrafineweb: FastTextConfig = field(default_factory=UltraFineWebConfig)
    edu: EduConfig = field(default_factory=EduConfig)
    wiki: WikiConfig = field(default_factory=WikiConfig)
    dsir: DSIRTargets = field(default_factory=DSIRTargets)
    merge: MergeConfig = field(default_factory=MergeConfig)

    def __post_init__(self) -> None:
        unknown = [r for r in self.raters if r not in ALL_RATERS]
        if unknown:
            raise ConfigError("raters", f"unknown rater(s) {unknown}; known: {list(ALL_RATERS)}", self.raters)
        if self.engine is not None and self.engine not in ENGINES:
            raise ConfigError("engine", f"must be null or one of the known engines {list(ENGINES)}", self.engine)
        at_least("fit_sample_docs", self.fit_sample_docs, 1)
        if self.training.source not in ("reference", "corpus"):
            raise ConfigError("training.source", "must be reference (train the raters that need labels on the "
                              "bundled reference corpus) or corpus (on the scored corpus's own labels)",
                              self.training.source)
        at_least("training.max_per_class", self.training.max_per_class, 1, optional=True)
        in_range("training.eval_fraction", self.training.eval_fraction, 0, 1, high_open=True)
        in_range("training.holdout_fraction", self.training.holdout_fraction, 0, 1, high_open=True)
        for name in ("fasttext_dclm", "fasttext_ultrafineweb"):
            ft = getattr(self, name)
            for key in ("dim", "word_ngrams", "min_count", "epoch", "bucket", "thread"):
                at_least(f"{name}.{key}", getattr(ft, key), 1)
            at_least(f"{name}.lr", ft.lr, 0, strict=True)
            at_least(f"{name}.nan_retries", ft.nan_retries, 0)
            at_least(f"{name}.quantize_cutoff", ft.quantize_cutoff, 0)
            at_least(f"{name}.quantize_dsub", ft.quantize_dsub, 1)
            in_range(f"{name}.threshold", ft.threshold, 0, 1, optional=True)
        at_least("edu.alpha", self.edu.alpha, 0, strict=True)
        at_least("edu.max_per_rule", self.edu.max_per_rule, 0)
        if not self.edu.max_score > self.edu.min_score:
            raise ConfigError("edu.max_score", f"must be > edu.min_score={self.edu.min_score}", self.edu.max_score)
        at_least("wiki.C", self.wiki.C, 0, strict=True)
        at_least("wiki.buckets", self.wiki.buckets, 1)
        at_least("wiki.max_iter", self.wiki.max_iter, 1)
        at_least("dsir.model.buckets", self.dsir.model.buckets, 1)
        at_least("dsir.model.max_ngram", self.dsir.model.max_ngram, 1)
        at_least("dsir.model.pseudocount", self.dsir.model.pseudocount, 0, strict=True)
        if not self.merge.scale_max > self.merge.scale_min:
            raise ConfigError("merge.scale_max", f"must be > merge.scale_min={self.merge.scale_min}",
                              self.merge.scale_max)
        each("edu.weak_rules", [r.score for r in self.edu.weak_rules],
             lambda key, v: in_range(f"{key}.score", v, self.edu.min_score, self.edu.max_score))


def scoring_config_from_dict(mapping: Mapping[str, Any], path: str = "scoring") -> ScoringConfig:
    """Nested mapping (e.g. from YAML) -> ``ScoringConfig`` via the one parser.

    Unknown keys raise ``ConfigError`` (a ``KeyError`` and a ``ValueError``)
    naming the key. ``fasttext_ultrafineweb`` is built on ``UltraFineWebConfig``
    (its field's default) so keys the mapping leaves out keep the Ultra-FineWeb
    defaults, not DCLM's.
    """
    return parse_dataclass(ScoringConfig, mapping, path=path)


__all__ = ["ALL_RATERS", "DSIRTargets", "ENGINES", "ScoringConfig", "WeakLabelRule", "scoring_config_from_dict"]


def rater_columns(cfg: ScoringConfig) -> list[str]:
    """The raters' own score columns in output order: fastText, edu, wiki, DSIR, RedPajama signals."""
    from curation.scoring.redpajama import SIGNALS

    cols = [c for c in ("fasttext_dclm", "fasttext_ultrafineweb", "edu", "wiki") if c in cfg.raters]
    if "dsir" in cfg.raters:
        cols += [f"{target}_importance" for target in cfg.dsir.targets]
    if "redpajama" in cfg.raters:
        cols += list(SIGNALS)
    return cols


def score_columns(cfg: ScoringConfig) -> list[str]:
    """The columns the scoring stage writes under ``cfg``, in output order (``id`` aside).

    :func:`rater_columns` plus the merge's ``<component>_0_5`` and
    ``quality`` (written when every merge component and the reference is a rater's column), so
    a stage that reads a column (``pruning.score_column``, ``selection.score``, a decide or
    Table 2 candidate's ``score``) is checked when the config is composed, not after ingest,
    scoring and pruning have run.
    """
    cols = rater_columns(cfg)
    if {*cfg.merge.components, cfg.merge.reference} <= set(cols):
        cols += [f"{c}_0_5" for c in cfg.merge.components] + [cfg.merge.output_column]
    return cols

