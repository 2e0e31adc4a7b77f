"""`curate --help` (the project's own, generated from conf/ and the pipeline registry) and `curate --describe`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from curation.cli_help import describe_main, experiments, help_section, yaml_description

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]


def _curate(args: list[str], project: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "CURATION_PROJECT_ROOT": str(project), "KEDRO_DISABLE_TELEMETRY": "true"}
    return subprocess.run([str(BIN / "curate"), *args], cwd=project, env=env, capture_output=True, text=True,
                          timeout=300)


def _registered_pipelines() -> list[str]:
    """The names the project's registry registers (Kedro's discovery of every pipeline package)."""
    from kedro.framework.project import configure_project

    from curation.pipeline_registry import register_pipelines

    configure_project("curation")
    return sorted(register_pipelines())


def _rows(text: str, heading: str) -> list[str]:
    """The names of one section of the help (its indented rows up to the next blank line)."""
    block = text.split(heading, 1)[1].split("\n\n", 1)[0]
    return [line.split()[0] for line in block.splitlines()[1:] if line.startswith("  ")]


def test_every_public_experiment_has_a_description_line():
    for path in sorted((REPO / "conf" / "experiment").glob("*.yaml")):
        if not path.stem.startswith("_"):
            assert len(yaml_description(path)) > 20, f"{path.name}: its first comment line describes it"


@pytest.mark.slow  # two `curate` subprocesses and the registry's import of every pipeline
def test_help_lists_every_pipeline_and_experiment_and_hides_private_groups(project):
    # an experiment added after the help was written appears in it: the lists are computed, not copied
    (project / "conf" / "experiment" / "my_study.yaml").write_text(
        "# @package _global_\n# A study of my own, costing $5 of compute. Second sentence.\npipeline: ingest\n")
    done = _curate(["--help"], project)
    assert done.returncode == 0, done.stderr[-3000:]
    text = done.stdout
    assert text.startswith("curate: select the pre-training data"), text[:300]
    assert "powered by Hydra" not in text
    public = sorted(p.stem for p in (project / "conf" / "experiment").glob("*.yaml") if not p.stem.startswith("_"))
    assert "my_study" in public and _rows(text, "Experiments (") == public
    assert re.search(r"^  my_study +A study of my own, costing \$5 of compute$", text, re.M)  # one line, `$` kept
    assert _rows(text, "Pipelines (") == _registered_pipelines()
    assert "_schema" not in text and "_reduced_scale" not in text and "_decide_base" not in text
    for override in ("data.path=", "data.max_docs=", "selection=", "run.namespace=", "tracking.enabled=false"):
        assert f"\n  {override}" in text
    assert "data/08_reporting/<namespace>/" in text and "mlruns/mlflow.db" in text
    assert "selection: datamask, " in text  # the groups' options
    hydra_help = _curate(["--hydra-help"], project)
    assert hydra_help.returncode == 0 and "== Flags ==" in hydra_help.stdout and "--hydra-help" in hydra_help.stdout


def test_help_sections_come_from_conf_and_hide_private_entries(tmp_path):
    conf = tmp_path / "conf"
    (conf / "experiment").mkdir(parents=True)
    (conf / "selection").mkdir()
    (conf / "experiment" / "alpha.yaml").write_text("# @package _global_\n# DATAMASK Fig. 7: G against time.\n"
                                                     "# Run: curate -m experiment=alpha\n")
    (conf / "experiment" / "_base.yaml").write_text("# @package _global_\n# shared\n")
    for name in ("datamask", "topk_edu", "_schema_x"):
        (conf / "selection" / f"{name}.yaml").write_text("method: x\n")
    assert experiments(conf) == [("alpha", "DATAMASK Fig. 7: G against time.")]
    rows = help_section("experiments", conf).splitlines()
    assert len(rows) == 1 and rows[0].split() == ["alpha", "DATAMASK", "Fig.", "7:", "G", "against", "time"]
    assert help_section("groups", conf).strip() == "selection: datamask, topk_edu"
    with pytest.raises(ValueError, match="unknown section"):
        help_section("nope", conf)


@pytest.mark.slow  # composes the config with every schema imported (~10 s on 2 busy cores)
def test_describe_prints_value_type_and_the_schema_and_yaml_comments(capsys):
    assert describe_main(["--describe", "selection.steps", "selection=datamask", "selection.steps=30"], REPO) == 0
    out = capsys.readouterr().out
    assert out.startswith("selection.steps = 30\n  type:    int\n")
    assert "E of Algorithm 1: update steps per block" in out  # the DataMaskConfig field's comment
    assert "curation.selection.config.DataMaskConfig" in out and "conf/selection/datamask.yaml:" in out
    assert describe_main(["--describe", "run"], REPO) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "run.seed = 0  # global seed for every random choice of a run" in lines
    assert describe_main(["--describe", "data.max_docs"], REPO) == 0
    assert "type:    int or null" in capsys.readouterr().out
    assert describe_main(["--describe", "selection.nope"], REPO) == 2
    assert "no such key" in capsys.readouterr().err
