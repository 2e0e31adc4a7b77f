"""Config defaults, yaml parity and refusal of bad keys/values."""

import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from curation.selection.config import CONFIG_CLASSES, DATAMASK_PAPER, DataMaskConfig, GreedyConfig, parse_selection_config

CONF = Path(__file__).resolve().parents[2] / "conf" / "selection"


@pytest.mark.parametrize("method", sorted(CONFIG_CLASSES))
def test_yaml_holds_exactly_the_dataclass_defaults(method):
    from_yaml = OmegaConf.to_container(OmegaConf.load(CONF / f"{method}.yaml"))
    assert from_yaml.pop("defaults") == [f"_schema_{method}", "_self_"]  # its Hydra schema, not a knob
    defaults = dataclasses.asdict(CONFIG_CLASSES[method]())
    assert from_yaml == defaults
    # same types too, so a Hydra override of the yaml value type-checks like the dataclass
    assert {k: type(v) for k, v in from_yaml.items()} == {k: type(v) for k, v in defaults.items()}


@pytest.mark.parametrize("method", sorted(CONFIG_CLASSES))
def test_yaml_parses_as_the_method_config(method):
    from_yaml = OmegaConf.to_container(OmegaConf.load(CONF / f"{method}.yaml"))
    from_yaml.pop("defaults")
    cfg = parse_selection_config(method, from_yaml)
    assert cfg == CONFIG_CLASSES[method]()


def test_missing_keys_take_defaults_ints_are_floats_but_floats_are_not_ints():
    cfg = parse_selection_config("datamask", {"lam": 1, "steps": 5})
    assert cfg.lam == 1.0 and isinstance(cfg.lam, float)
    assert cfg.steps == 5 and isinstance(cfg.steps, int)
    # 5.0 is refused as an int, as OmegaConf refuses it at composition and every other group does
    with pytest.raises(ValueError, match=r"steps=5\.0: expected an int"):
        parse_selection_config("datamask", {"steps": 5.0})
    assert cfg.group_size == 128 and cfg.lr == 10.0 and cfg.batch_ratio == 0.05 and cfg.block_size == 1_000_000


def test_paper_defaults():
    dm = DataMaskConfig()
    assert (dm.group_size, dm.lr, dm.batch_ratio, dm.block_size) == (128, 10.0, 0.05, 1_000_000)
    assert (dm.q_min, dm.q_max, dm.l_min, dm.l_max) == (0.0, 15.0, -5.0, 5.0)
    assert GreedyConfig().batch_size is None  # -> 1024 for disf (DiSF Algorithm 1)


@pytest.mark.parametrize(
    "method, bad, key",
    [
        ("datamask", {"lamda": 0.3}, "lamda"),
        ("datamask", {"lam": 1.5}, "lam"),
        ("datamask", {"lam": -0.1}, "lam"),
        ("datamask", {"group_size": 1}, "group_size"),
        ("datamask", {"batch_ratio": 0.0}, "batch_ratio"),
        ("datamask", {"lr": "fast"}, "lr"),
        ("datamask", {"steps": 2.5}, "steps"),
        ("datamask", {"diversity": "entropy"}, "diversity"),
        ("datamask", {"init": "ones"}, "init"),
        ("datamask", {"final": "argmax"}, "final"),
        ("datamask", {"resume": True}, "resume"),
        ("datamask", {"standardize": "yes"}, "standardize"),
        ("greedy", {"impl": "slow"}, "impl"),
        ("greedy", {"batch_size": 1}, "batch_size"),
        ("semdedup", {"keep": "oldest"}, "keep"),
        ("dvrl", {"unseen_fraction": 1.0}, "unseen_fraction"),
        ("random", {"lam": 0.5}, "lam"),
        ("random", {"method": "greedy"}, "method"),
    ],
)
def test_bad_keys_and_values_raise_naming_the_key(method, bad, key):
    with pytest.raises(ValueError, match=rf"^{key}\b"):
        parse_selection_config(method, bad)


def test_unknown_method():
    with pytest.raises(ValueError, match="method"):
        parse_selection_config("kmeans", {})


def test_yaml_files_compose_as_a_hydra_group(tmp_path):
    # the project's primary config will have `defaults: [{selection: datamask}]`
    import shutil

    from hydra import compose, initialize_config_dir
    from hydra.errors import ConfigCompositionException

    from curation.config_schema import register_configs

    register_configs()  # the options' `defaults: [_schema_<method>]` (Hydra's ConfigStore)
    shutil.copytree(CONF, tmp_path / "selection")
    (tmp_path / "primary.yaml").write_text("defaults:\n  - selection: datamask\n  - _self_\n")
    with initialize_config_dir(config_dir=str(tmp_path), version_base="1.3"):
        cfg = compose(config_name="primary")
        assert parse_selection_config(cfg.selection.method, cfg.selection) == DataMaskConfig()
        cfg = compose(config_name="primary", overrides=["selection=greedy", "selection.lam=0.7", "selection.diversity=disf"])
        greedy = parse_selection_config(cfg.selection.method, cfg.selection)
        assert (greedy.method, greedy.lam, greedy.diversity) == ("greedy", 0.7, "disf")
        with pytest.raises(ConfigCompositionException):
            compose(config_name="primary", overrides=["selection.lamda=0.3"])  # struct mode: typo refused


def test_datamask_paper_preset_is_the_papers_recipe(tmp_path):
    # DATAMASK Sec. 4.4 (FineWeb-Mask): raw Eq. 12, lambda 0.5, PWS, Eq. 13 init, G 128, eta 10, r 0.05, E 10,000
    from hydra import compose, initialize_config_dir

    from curation.config_schema import register_configs

    paper = {"diversity": "pws", "lam": 0.5, "standardize": False, "init": "quality", "group_size": 128,
             "lr": 10.0, "batch_ratio": 0.05, "steps": 10_000, "final": "sample"}
    assert DATAMASK_PAPER == paper
    register_configs()
    import shutil

    shutil.copytree(CONF, tmp_path / "selection")
    (tmp_path / "primary.yaml").write_text("defaults:\n  - selection: datamask\n  - _self_\n")
    with initialize_config_dir(config_dir=str(tmp_path), version_base="1.3"):
        cfg = compose(config_name="primary", overrides=["selection=datamask_paper"])
    composed = parse_selection_config(cfg.selection.method, cfg.selection)
    assert composed == DataMaskConfig(**paper)
    assert composed == parse_selection_config("datamask", DATAMASK_PAPER)
    # the project's default differs from the paper exactly in these knobs (docs/selection.md says so)
    default = dataclasses.asdict(DataMaskConfig())
    assert {k for k, v in paper.items() if default[k] != v} == {"lam", "standardize", "init", "steps"}
