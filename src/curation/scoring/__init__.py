"""Quality raters and the merged 0-15 quality score (issue 3), usable without Kedro.

One module per rater, each a small class with a config dataclass (paper
defaults), ``fit``, ``score(texts) -> np.ndarray`` (NaN for documents with
nothing to score), ``score_counted`` (scores plus bad-input counts) and
``save``/``load``:

- ``fasttext_rater``: DCLM and Ultra-FineWeb fastText classifiers
- ``embedding_raters``: Edu-style ridge regressor (0-5), Wiki-similarity logistic regression
- ``dsir``: DSIR hashed {1,2}-gram importance log-ratios
- ``redpajama``: the 11 RedPajama natural-language signals (Meta-rater Table 5)
- ``merge``: quantile mapping onto the Edu scale and the 0-15 ``quality`` (DATAMASK A.5)
- ``training_sets``: positives/negatives from config, the human-label split, eval ROC-AUC
- ``run``: ``fit_scoring`` (raters + merge map on a sample), ``apply_scoring`` (any rows),
  ``score_corpus`` (both on one frame)
- ``sample``: the fit sample (bounded, hash-chosen, independent of the sharding)
- ``sharded``: fit once, then score every document shard (local or Ray tasks)
- ``cached``: the scoring stage folder in the result cache (re-run = hit, killed run resumes)
- ``persistence``: fitted raters saved as one folder (``manifest.json`` + a file per rater) and loaded back
"""

from curation.scoring.config import ALL_RATERS, DSIRTargets, ScoringConfig, scoring_config_from_dict
from curation.scoring.dsir import DSIRConfig, DSIRImportance
from curation.scoring.embedding_raters import (
    EduConfig,
    EduRater,
    WeakLabelRule,
    WikiConfig,
    WikiRater,
    build_edu_annotations,
    wiki_training_config,
)
from curation.scoring.fasttext_rater import FastTextConfig, FastTextRater, UltraFineWebConfig, UltraFineWebTokenizer
from curation.scoring.merge import MergeConfig, MergeMap, merge_quality, quality_share, quantile_map
from curation.scoring.redpajama import SIGNALS, RedPajamaSignals, signals_of
from curation.scoring.run import FittedScoring, ScoringResult, apply_scoring, fit_scoring, score_corpus
from curation.scoring.training_sets import (
    TrainingSet,
    TrainingSetConfig,
    build_training_set,
    eval_roc_auc,
    human_label_split,
)

__all__ = [
    "ALL_RATERS",
    "DSIRConfig",
    "DSIRImportance",
    "DSIRTargets",
    "EduConfig",
    "EduRater",
    "FastTextConfig",
    "FastTextRater",
    "FittedScoring",
    "MergeConfig",
    "MergeMap",
    "RedPajamaSignals",
    "SIGNALS",
    "ScoringConfig",
    "ScoringResult",
    "TrainingSet",
    "TrainingSetConfig",
    "UltraFineWebConfig",
    "UltraFineWebTokenizer",
    "WeakLabelRule",
    "WikiConfig",
    "WikiRater",
    "apply_scoring",
    "build_edu_annotations",
    "build_training_set",
    "eval_roc_auc",
    "fit_scoring",
    "human_label_split",
    "merge_quality",
    "quality_share",
    "quantile_map",
    "score_corpus",
    "scoring_config_from_dict",
    "signals_of",
    "wiki_training_config",
]
