"""conf/scoring/default.yaml holds exactly ScoringConfig's defaults; bad keys are refused."""

import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from curation.scoring import ScoringConfig, scoring_config_from_dict

CONF = Path(__file__).resolve().parents[2] / "conf"


def _yaml(path):
    data = OmegaConf.to_container(OmegaConf.load(path))
    assert data.pop("defaults") == ["_schema", "_self_"]  # the Hydra schema entry, not a knob
    return data


def _types(tree):
    if isinstance(tree, dict):
        return {k: _types(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_types(v) for v in tree]
    return type(tree).__name__


def test_yaml_holds_exactly_the_dataclass_defaults():
    from_yaml = _yaml(CONF / "scoring" / "default.yaml")
    defaults = dataclasses.asdict(ScoringConfig())
    assert from_yaml == defaults
    # same types, so a Hydra override type-checks like the dataclass would
    assert _types(from_yaml) == _types(defaults)
    assert scoring_config_from_dict(from_yaml) == ScoringConfig()


def test_struct_mode_refuses_unknown_override():
    cfg = OmegaConf.create({"scoring": _yaml(CONF / "scoring" / "default.yaml")})
    OmegaConf.set_struct(cfg, True)
    cfg.scoring.fasttext_dclm.word_ngrams = 3  # known key: fine
    with pytest.raises(Exception):
        cfg.scoring.fasttext_dclm.wordngrams = 3


def test_unknown_keys_raters_and_engines_fail():
    with pytest.raises(KeyError, match="wordngrams"):
        scoring_config_from_dict({"fasttext_dclm": {"wordngrams": 3}})
    with pytest.raises(ValueError, match="unknown rater"):
        scoring_config_from_dict({"raters": ["dclm"]})
    with pytest.raises(ValueError, match="known engines"):
        scoring_config_from_dict({"engine": "spark"})
    # the Ray Data job's knobs are gone (Ray runs the per-shard functions at data.ray_address)
    with pytest.raises(KeyError, match="scoring.ray: unknown key"):
        scoring_config_from_dict({"ray": {"actors": 2}})
    with pytest.raises(ValueError, match="fit_sample_docs"):
        scoring_config_from_dict({"fit_sample_docs": 0})
    cfg = scoring_config_from_dict({"engine": "ray", "fit_sample_docs": 5000})
    assert (cfg.engine, cfg.fit_sample_docs) == ("ray", 5000)
    assert scoring_config_from_dict({}).engine is None  # null: follow data.engine


def test_partial_ultrafineweb_override_keeps_its_recipe_defaults():
    cfg = scoring_config_from_dict({"fasttext_ultrafineweb": {"bucket": 1000}})
    assert (cfg.fasttext_ultrafineweb.dim, cfg.fasttext_ultrafineweb.word_ngrams, cfg.fasttext_ultrafineweb.bucket) == (256, 3, 1000)


def test_embedding_yamls_match_the_embedder_config():
    from curation.embedding import EmbedderConfig

    assert _yaml(CONF / "embedding" / "minilm.yaml") == dataclasses.asdict(EmbedderConfig())
    e5 = _yaml(CONF / "embedding" / "e5_base_v2.yaml")
    assert set(e5) == {f.name for f in dataclasses.fields(EmbedderConfig)}
    assert EmbedderConfig(**e5).prefix == "passage: " and e5["dim"] == 768
