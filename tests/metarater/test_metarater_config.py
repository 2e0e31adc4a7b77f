"""conf/metarater/*.yaml equal the presets; Hydra composes them and the proxy experiment; bad keys are refused."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import yaml

from curation.metarater import dirichlet_weights
from curation.metarater.config import PRESETS, MetaraterConfig, parse_metarater_config

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["quick", "paper"])
def test_yaml_mirrors_the_preset(name):
    data = yaml.safe_load((REPO / "conf" / "metarater" / f"{name}.yaml").read_text())
    assert data.pop("defaults")[0] == "_schema"  # the Hydra schema entry, not a knob
    assert data == dataclasses.asdict(PRESETS[name])
    assert parse_metarater_config(data) == PRESETS[name]


def test_presets_have_the_issue_sizes():
    quick, paper = PRESETS["quick"], PRESETS["paper"]
    # N=64: the least N whose official-protocol regression learns on the synthetic benchmark (issue #27)
    assert (quick.num_proxies, quick.keep_frac) == (64, 0.15)
    assert quick.regression.protocol == paper.regression.protocol == "official"
    assert quick.regression.early_stopping_rounds == paper.regression.early_stopping_rounds == 5
    assert (quick.search.n_candidates, quick.search.top_k) == (200_000, 128)
    assert (paper.num_proxies, paper.search.n_candidates) == (256, 1_000_000)
    lm = paper.proxy.pretrain_config()
    assert (lm.model.n_layer, lm.model.d_model, lm.model.n_head, lm.train.max_tokens) == (2, 256, 4, 500_000_000)
    assert quick.regression.n_estimators == paper.regression.n_estimators == 1000
    assert quick.regression.learning_rate == 0.01
    assert quick.proxy.pretrain_config().train.max_tokens == quick.proxy.max_tokens


def test_hydra_composes_the_group_and_the_proxy_experiment():
    from hydra import compose, initialize_config_dir
    from hydra.errors import ConfigCompositionException

    from curation.config_schema import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        cfg = compose(config_name="config", overrides=["metarater=paper", "metarater.num_proxies=64"])
        parsed = parse_metarater_config(cfg.metarater)
        assert parsed.name == "paper" and parsed.num_proxies == 64 and parsed.proxy.preset == "proxy_paper"
        job = compose(config_name="config", overrides=["experiment=metarater_proxy", "metarater.proxy_id=7"])
        assert job.pipeline == "metarater_proxy" and parse_metarater_config(job.metarater).proxy_id == 7
        with pytest.raises(ConfigCompositionException):
            compose(config_name="config", overrides=["metarater.num_proxys=4"])  # misspelt: struct mode refuses it


def test_wrong_types_and_unknown_keys_name_the_key():
    with pytest.raises(ValueError, match="num_proxies"):
        parse_metarater_config({"num_proxies": "many"})
    with pytest.raises(ValueError, match="proxy.max_token"):
        parse_metarater_config({"proxy": {"max_token": 10}})
    with pytest.raises(ValueError, match="keep_frac"):
        parse_metarater_config({"keep_frac": 1.5})
    with pytest.raises(ValueError, match="proxy_id"):
        parse_metarater_config({"num_proxies": 4, "proxy_id": 4})
    with pytest.raises(ValueError, match="comparisons.methods"):
        parse_metarater_config({"comparisons": {"methods": ["median"]}})
    with pytest.raises(ValueError, match="proxy.preset"):
        parse_metarater_config({"proxy": {"preset": "gpt5"}})
    assert parse_metarater_config(None) == MetaraterConfig()


def test_weights_of_a_proxy_do_not_depend_on_n():
    # Sweep jobs, resumed sweeps and a sweep grown from 32 to 64 proxies must agree on proxy i's vector.
    short, long = dirichlet_weights(8, 17, seed=0), dirichlet_weights(32, 17, seed=0)
    assert np.array_equal(short, long[:8])
    assert np.array_equal(dirichlet_weights(3, 4, alpha=0.05, seed=2), dirichlet_weights(9, 4, alpha=0.05, seed=2)[:3])
