"""Every config group has a schema: typos fail at composition, out-of-range knobs right after it.

Fast: Hydra composition only (no pipeline runs), on the project's own conf/.
"""

from __future__ import annotations

import ast
import copy
import shutil
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from curation.config_loader import HydraConfigLoader, compose_config
from curation.config_schema import GROUPS, register_configs, validate_config
from curation.configuration import ConfigError, parse_dataclass

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"
SRC = REPO / "src" / "curation"


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.fixture(scope="module")
def default_config() -> dict:
    # DataMask's knobs are among the out-of-range cases: the default selection is top-k quality (issue #38)
    return compose_config(CONF, ["selection=datamask"], validate=False)


@pytest.mark.slow  # ~10 s: every experiment and group option composed
def test_every_experiment_and_group_option_composes_and_validates():
    from curation.lm.config import PretrainConfig
    from curation.selection.config import CONFIG_CLASSES

    register_configs()
    groups = [g for g in GROUPS if (CONF / g).is_dir()] + ["scale"]
    options = {g: _options(g) for g in groups}
    # Job i takes option i of every group that has one (so each option composes once, with others),
    # then every experiment on the defaults.
    jobs = [[f"{g}={opts[i]}" for g, opts in options.items() if i < len(opts)]
            for i in range(max(map(len, options.values())))]
    jobs += [[f"experiment={e}"] for e in _options("experiment") if not e.startswith("_")]  # _*: partials
    seen = set()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        for overrides in jobs:
            cfg = compose(config_name="config", overrides=overrides)
            typed = validate_config(cfg)
            assert set(GROUPS) <= set(typed), overrides
            assert isinstance(typed["selection"], CONFIG_CLASSES[cfg.selection.method]), overrides
            assert isinstance(typed["pretrain"], PretrainConfig)
            seen.update(overrides)
    assert {f"experiment={e}" for e in _options("experiment") if not e.startswith("_")} <= seen
    assert {f"{g}={o}" for g, opts in options.items() for o in opts} <= seen


# A misspelt key written in a YAML file (an experiment, a user's own option) is refused while composing,
# naming the key: without the schemas it would have been silently added and ignored.
TYPOS = {
    "data": "max_doc", "tracking": "experiment", "run": "sead", "report": "experment", "embedding": "batchsize",
    "scoring": "raters_", "pruning": "treshold", "budget": "keep_ration", "selection": "lamda",
    "pretrain": "trian", "eval": "limt", "verification": "ratio", "metarater": "num_proxys",
}


def test_every_group_has_a_schema_and_a_typo_is_named():
    assert set(TYPOS) == set(GROUPS)


@pytest.mark.parametrize("group", sorted(TYPOS))
def test_misspelt_key_in_a_yaml_fails_at_composition_naming_it(group, tmp_path):
    register_configs()
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    typo = TYPOS[group]
    (conf / "experiment" / "typo.yaml").write_text(f"# @package _global_\n{group}:\n  {typo}: 1\n")
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        with pytest.raises(ConfigCompositionException) as err:
            compose(config_name="config", overrides=["experiment=typo"])
    text = f"{err.value} {err.value.__cause__}"
    assert f"Key '{typo}' not in" in text and f"{group}.{typo}" in text


def test_nested_typo_and_forced_additions_are_refused():
    with pytest.raises(ConfigCompositionException, match="pretrain.train.lrr"):
        compose_config(CONF, ["pretrain.train.lrr=0.1"])
    # `+key=value` forces a key past Hydra's struct check; the validator still refuses it, by name.
    with pytest.raises(ConfigError, match=r"^selection\.lamda: unknown key; known: \[.*'lam'"):
        compose_config(CONF, ["selection=datamask", "+selection.lamda=0.3"])
    with pytest.raises(ConfigError, match=r"^verification\.candidates\.edu\.scor: unknown key"):
        compose_config(CONF, ["+verification.candidates.edu={method:topk_quality,scor:edu}"])
    # ... while a well-formed addition to a dict of recipes composes.
    cfg = compose_config(CONF, ["+verification.candidates.edu={method:topk_quality,score:edu}"])
    assert cfg["verification"]["candidates"]["edu"] == {"method": "topk_quality", "score": "edu"}


# (key, bad value, the message validate_config must give, verbatim)
OUT_OF_RANGE = [
    ("data.max_docs", -3, "data.max_docs=-3: must be >= 1 or null"),
    ("data.max_docs", 0, "data.max_docs=0: must be >= 1 or null"),
    ("data.max_chars", 0, "data.max_chars=0: must be >= 1 or null"),
    ("data.format", "csv", "data.format='csv': must be one of 'auto', 'parquet', 'jsonl'"),
    ("budget.keep_ratio", 1.0, "budget.keep_ratio=1.0: must be in (0, 1)"),
    ("budget.keep_ratio", 0.0, "budget.keep_ratio=0.0: must be in (0, 1)"),
    ("budget.docs", 0, "budget.docs=0: must be >= 1 or null"),
    ("budget.candidates", 1, "budget.candidates=1: must be >= 2 or null"),
    ("budget.ratio_of", "pool", "budget.ratio_of='pool': must be one of 'corpus', 'candidates'"),
    ("selection.lam", 1.5, "selection.lam: must be in [0, 1], got 1.5"),
    ("selection.batch_ratio", 0.0, "selection.batch_ratio: must be in (0, 1], got 0.0"),
    ("selection.group_size", 1, "selection.group_size: G must be >= 2, got 1"),
    ("selection.steps", -1, "selection.steps: must be >= 0, got -1"),
    ("pruning.bottom_pct", 100.0, "pruning.bottom_pct=100.0: must be in [0, 100)"),
    ("pruning.threshold", float("nan"), "pruning.threshold=nan: must be a finite number"),
    ("pretrain.train.batch_size", 0, "pretrain.train.batch_size=0: must be >= 1"),
    ("pretrain.train.lr", 0.0, "pretrain.train.lr=0.0: must be > 0"),
    ("pretrain.train.beta2", 1.0, "pretrain.train.beta2=1.0: must be in [0, 1)"),
    ("pretrain.train.max_tokens", 0, "pretrain.train.max_tokens=0: must be >= 1 or null"),
    ("pretrain.model.n_layer", 0, "pretrain.model.n_layer=0: must be >= 1"),
    ("pretrain.model.n_head", 0, "pretrain.model.n_head=0: must be >= 1"),
    ("pretrain.train.seq_len", 512, "pretrain.train.seq_len=512: must be <= model.max_seq_len=256"),
    ("pretrain.tokenizer.vocab_size", 100, "pretrain.tokenizer.vocab_size=100: must be >= 258"),
    ("scoring.fit_sample_docs", 0, "scoring.fit_sample_docs=0: must be >= 1"),
    ("scoring.training.eval_fraction", 1.0, "scoring.training.eval_fraction=1.0: must be in [0, 1)"),
    ("scoring.fasttext_dclm.epoch", 0, "scoring.fasttext_dclm.epoch=0: must be >= 1"),
    ("embedding.batch_size", 0, "embedding.batch_size=0: must be >= 1"),
    ("embedding.dtype", "int4", "embedding.dtype='int4': must be one of 'float32', 'float16'"),
    ("eval.limit", 0, "eval.limit=0: must be >= 1 or null"),
    ("eval.batch_size", 0, "eval.batch_size=0: must be >= 1"),
    ("metarater.num_proxies", 0, "metarater.num_proxies=0: must be >= 1"),
    ("metarater.keep_frac", 0.0, "metarater.keep_frac=0.0: must be in (0, 1]"),
    ("metarater.regression.test_frac", 1.0, "metarater.regression.test_frac=1.0: must be in (0, 1)"),
    ("metarater.search.batch", 0, "metarater.search.batch=0: must be >= 1"),
    ("run.torch_threads", 0, "run.torch_threads=0: must be >= 1 or null"),
    ("run.seed", -1, "run.seed=-1: must be >= 0"),
    ("report.runs", "newest", "report.runs='newest': must be one of 'latest_sweep', 'all'"),
    ("verification.ratios", [1.5], "config key 'verification.ratios': each ratio must be in (0, 1)"),
]


@pytest.mark.parametrize(("key", "value", "message"), OUT_OF_RANGE, ids=[f"{k}={v}" for k, v, _ in OUT_OF_RANGE])
def test_out_of_range_knob_names_key_value_and_range(default_config, key, value, message):
    cfg = copy.deepcopy(default_config)
    *parents, leaf = key.split(".")
    node = cfg
    for part in parents:
        node = node[part]
    node[leaf] = value
    with pytest.raises(ValueError) as err:
        validate_config(cfg)
    assert str(err.value) == message
    validate_config(default_config)  # the untouched defaults are valid


def test_curate_entry_points_check_ranges_right_after_composition(project):
    # the Kedro loader (kedro run --params ...) composes, then validates
    with pytest.raises(ConfigError, match=r"^data\.max_docs=-3: must be >= 1 or null$"):
        HydraConfigLoader(str(project / "conf"), runtime_params={"data": {"max_docs": -3}})
    with pytest.raises(ConfigError, match=r"^budget\.keep_ratio=1\.5: must be in \(0, 1\)$"):
        compose_config(project / "conf", ["budget.keep_ratio=1.5"])


@pytest.mark.slow  # a `curate` subprocess
def test_curate_refuses_an_out_of_range_knob_before_running(project):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "curation", "pipeline=ingest", "data.max_docs=-3",
                           "tracking.enabled=false"], cwd=project, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "data.max_docs=-3: must be >= 1 or null" in done.stderr
    assert "No objects to concatenate" not in done.stderr
    assert not (project / "data" / "02_intermediate" / "default" / "documents.parquet").exists()


def test_three_point_zero_is_not_an_int_anywhere():
    from curation.evaluation.config import parse_eval_config
    from curation.lm.config import parse_config
    from curation.metarater.config import parse_metarater_config
    from curation.scoring.config import scoring_config_from_dict
    from curation.selection.config import BudgetConfig, parse_selection_config

    with pytest.raises(ConfigCompositionException) as err:
        compose_config(CONF, ["selection=datamask", "selection.steps=3.0"])
    assert "selection.steps" in f"{err.value} {err.value.__cause__}"
    cases = [
        (lambda: parse_selection_config("datamask", {"steps": 3.0}, path="selection"), "selection.steps=3.0"),
        (lambda: parse_config({"train": {"max_steps": 3.0}}, path="pretrain"), "pretrain.train.max_steps=3.0"),
        (lambda: parse_metarater_config({"num_proxies": 3.0}, path="metarater"), "metarater.num_proxies=3.0"),
        (lambda: parse_eval_config({"limit": 3.0}, path="eval"), "eval.limit=3.0"),
        (lambda: scoring_config_from_dict({"fit_sample_docs": 3.0}), "scoring.fit_sample_docs=3.0"),
        (lambda: parse_dataclass(BudgetConfig, {"docs": 3.0}, path="budget"), "budget.docs=3.0"),
    ]
    for parse, head in cases:
        with pytest.raises(ConfigError) as err:
            parse()
        assert str(err.value) == f"{head}: expected an int, got float"
    # and a bool is no int, an int is a float
    with pytest.raises(ConfigError, match=r"^budget\.docs=true: expected an int"):
        parse_dataclass(BudgetConfig, {"docs": True}, path="budget")
    assert parse_dataclass(BudgetConfig, {"keep_ratio": 1 / 4}).keep_ratio == 0.25
    assert parse_selection_config("datamask", {"lam": 1}).lam == 1.0


def test_parser_recurses_keeps_subclass_defaults_and_checks_hand_built_configs():
    from curation.data.config import DataConfig
    from curation.scoring.config import ScoringConfig, scoring_config_from_dict
    from curation.scoring.fasttext_rater import UltraFineWebConfig

    cfg = scoring_config_from_dict({"fasttext_ultrafineweb": {"epoch": 4}, "edu": {"weak_rules": []}})
    assert isinstance(cfg.fasttext_ultrafineweb, UltraFineWebConfig)
    assert cfg.fasttext_ultrafineweb.epoch == 4 and cfg.fasttext_ultrafineweb.dim == UltraFineWebConfig().dim
    assert parse_dataclass(ScoringConfig, OmegaConf.create({"engine": "ray"})).engine == "ray"  # a DictConfig
    # nested DictConfig / ListConfig, read as a Mapping / Sequence (the core imports no OmegaConf), resolved
    composed = OmegaConf.create({"v": "web", "scoring": {"edu": {"weak_rules": [
        {"field": "category", "values": ["${v}"], "score": 1.0}]}}})
    cfg = scoring_config_from_dict(composed.scoring)
    assert cfg.edu.weak_rules[0].values == ["web"] and type(cfg.edu.weak_rules[0].values) is list
    with pytest.raises(ConfigError, match=r"^scoring\.edu\.weak_rules\[0\]\.scor: unknown key"):
        scoring_config_from_dict({"edu": {"weak_rules": [{"field": "category", "values": ["x"], "scor": 1.0}]}})
    # unknown keys are a KeyError too, for callers that caught the earlier parsers' KeyError
    with pytest.raises(KeyError):
        scoring_config_from_dict({"fasttext_dclm": {"wordngrams": 3}})
    # the range checks are the dataclass's own: a Python caller gets them without any parser
    with pytest.raises(ConfigError, match=r"^max_docs=-3: must be >= 1 or null$"):
        DataConfig(max_docs=-3)


def _defs(kind: type, name: str) -> list[str]:
    found = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, kind) and node.name == name:  # type: ignore[attr-defined]
                found.append(str(path.relative_to(SRC)))
    return found


def test_one_parser_and_unique_names():
    assert _defs(ast.FunctionDef, "parse_dataclass") == ["configuration.py"]
    assert _defs(ast.FunctionDef, "_coerce") == ["configuration.py"]  # no second set of coercion rules
    assert _defs(ast.FunctionDef, "parse_config") == ["lm/config.py"]
    assert _defs(ast.ClassDef, "Selection") == ["selection/api.py"]


@pytest.mark.parametrize("namespace", ["*", "a*", "x[1]", ".hidden", ".staging", "a/.x", "cache", "cache/a"])
def test_namespaces_a_reader_would_skip_or_expand_are_refused(namespace):
    """Issue #52: hidden folders (the stages stage into hidden ones), globs and the result cache's own folder
    (data/04_feature/cache) were accepted as namespaces."""
    from curation.config_schema import RunConfig
    from curation.configuration import ConfigError

    with pytest.raises(ConfigError, match="namespace"):
        RunConfig(namespace=namespace)
    assert RunConfig(namespace="cachex/multirun/b/0").namespace == "cachex/multirun/b/0"
