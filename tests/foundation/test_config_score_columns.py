"""What composition refuses and what it lets through: a score column no rater writes is refused when the config is
composed (issue #52 item 4: a decide candidate with an unknown ``score:`` was found only after ingest, scoring and
pruning had run); an experiment that is a sweep by its config is not refused as ambiguous."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from curation.config_schema import SCORE_READERS, register_configs, validate_config
from curation.configuration import ConfigError
from curation.scoring.config import ScoringConfig, score_columns
from curation.scoring.redpajama import SIGNALS

CONF = Path(__file__).resolve().parents[2] / "conf"


def _compose(overrides: list[str]):
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def test_the_columns_follow_the_raters_dsir_targets_and_merge():
    cols = score_columns(ScoringConfig())
    assert cols[:4] == ["fasttext_dclm", "fasttext_ultrafineweb", "edu", "wiki"]
    assert {"books_importance", "wikipedia_importance", *SIGNALS} <= set(cols)
    assert cols[-4:] == ["fasttext_dclm_0_5", "edu_0_5", "wiki_0_5", "quality"]
    no_wiki = score_columns(ScoringConfig(raters=["fasttext_dclm", "edu"]))
    assert no_wiki == ["fasttext_dclm", "edu"]  # a merge component is missing: no quality column


@pytest.mark.parametrize("overrides, key", [
    (["experiment=decide_smoke", "+decide.candidates.bad={method: topk_quality, pool: raw, score: edu_score, "
      "config: {}}"], "decide.candidates.bad.score='edu_score'"),
    (["experiment=decide_smoke", "scoring.raters=[fasttext_dclm,edu]"], "pruning.score_column='quality'"),
    (["pipeline=table2", "+table2.corpora.bad={method: topk_quality, pool: raw, score: wikii, config: {}}"],
     "table2.corpora.bad.score='wikii'"),
    (["selection=topk_quality", "selection.score=dclm"], "selection.score='dclm'"),
    (["pruning.score_column=merged"], "pruning.score_column='merged'"),
])
def test_a_score_column_no_rater_writes_is_refused_at_composition(overrides, key):
    with pytest.raises(ConfigError) as err:
        validate_config(_compose(overrides))
    message = str(err.value)
    assert message.startswith(key), message
    assert "is not a column the scoring stage writes" in message and "Fix: name one of them" in message
    if "'quality'" in key:  # the merged column names the raters it needs
        assert "quality is the merge of ['edu', 'fasttext_dclm', 'wiki']" in message


def test_only_the_stages_that_run_are_checked():
    # scoring alone reads no score column: a pruning column for a later run is not its business
    typed = validate_config(_compose(["pipeline=scoring", "pruning.score_column=merged"]))
    assert typed["pruning"].score_column == "merged"
    # a rater's own column that exists passes, also with the merge switched off
    validate_config(_compose(["experiment=decide_smoke", "scoring.raters=[fasttext_dclm,edu,wiki,redpajama]",
                              "+decide.candidates.wordy={method: topk_quality, pool: raw, score: doc_word_count, "
                              "config: {}}"]))


def test_the_readers_map_matches_the_registered_pipelines():
    """SCORE_READERS names, per block, the pipelines whose nodes take ``params:<block>``."""
    from kedro.framework.project import configure_project

    configure_project("curation")
    from curation.pipeline_registry import register_pipelines

    pipelines = register_pipelines()
    for block, readers in SCORE_READERS.items():
        actual = {name for name, p in pipelines.items() if f"params:{block}" in p.inputs()}
        assert actual == set(readers), block


def test_an_experiment_that_sweeps_by_config_is_not_refused_as_ambiguous():
    """``curate experiment=table2_tiny table2.corpus=raw,edu``: the experiment sets hydra.mode MULTIRUN, so the
    comma is a sweep; composed as one run it was refused with Hydra's "Ambiguous value" (the opt-in Table 2 sweep
    test failed on it). Without such an experiment the same comma is still named."""
    from curation.config_schema import register_configs
    from curation.hydra_app import composition_error

    register_configs()
    assert composition_error(["experiment=table2_tiny", "table2.corpus=raw,edu"], CONF) is None
    message = composition_error(["selection=datamask", "selection.lam=0.1,0.3"], CONF)
    assert message is not None and "Ambiguous value for argument 'selection.lam=0.1,0.3'" in message
