"""conf/pretrain/*.yaml equal the presets; Hydra composes them; bad keys and types are refused."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from curation.lm import PRESETS, get_config, parse_config

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["tiny", "tiny_moe"])
def test_yaml_mirrors_the_preset(name):
    data = yaml.safe_load((REPO / "conf" / "pretrain" / f"{name}.yaml").read_text())
    assert data.pop("defaults")[0] == "_schema"  # the Hydra schema entry, not a knob
    assert data == dataclasses.asdict(PRESETS[name])
    assert parse_config(data) == PRESETS[name]


def test_hydra_composes_the_groups_in_struct_mode():
    from hydra import compose, initialize_config_dir
    from hydra.errors import ConfigCompositionException
    from omegaconf.errors import ConfigAttributeError

    from curation.config_schema import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        cfg = compose(config_name="config", overrides=["pretrain=tiny_moe", "eval=default",
                                                       "pretrain.train.lr=0.001", "eval.limits.mmlu=50"])
        parsed = parse_config(cfg.pretrain)
        assert parsed.model.num_experts == 10 and parsed.train.lr == 0.001
        assert cfg.eval.limits.mmlu == 50
        with pytest.raises(ConfigAttributeError):
            cfg.pretrain.train.lrr  # noqa: B018 - struct mode: a misspelt key fails
        with pytest.raises(ConfigCompositionException):
            compose(config_name="config", overrides=["pretrain=tiny", "pretrain.train.lrr=1"])


def test_wrong_types_and_unknown_keys_name_the_key():
    with pytest.raises(ValueError, match="model.n_layer"):
        parse_config({"model": {"n_layer": "four"}})
    with pytest.raises(ValueError, match="model.n_layers"):
        parse_config({"model": {"n_layers": 4}})
    with pytest.raises(ValueError, match="train.schedule"):
        parse_config({"train": {"schedule": "linear"}})
    with pytest.raises(ValueError, match="train.seq_len"):
        parse_config({"train": {"seq_len": 512}})  # longer than model.max_seq_len = 256


def test_get_config_returns_an_independent_copy():
    cfg = get_config("tiny")
    cfg.train.lr = 1.0
    cfg.model.n_layer = 1
    assert PRESETS["tiny"].train.lr == 4e-4 and PRESETS["tiny"].model.n_layer == 4


def test_token_budget_to_steps():
    assert get_config("tiny").train.total_steps() == 1_048_576 // (16 * 256)
    paper = get_config("proxy_paper").train
    assert paper.tokens_per_step == 4_194_304  # Meta-rater App. D: global batch of 4,194,304 tokens
    assert paper.total_steps() == 120  # ceil(0.5B / 4,194,304)
