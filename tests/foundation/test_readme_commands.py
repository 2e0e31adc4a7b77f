"""The commands the README, REPRODUCING.md and docs/ show still run: every ``curate`` (or ``bash scripts/run.sh``)
line of their ``bash`` blocks and every ``curate ...`` they quote in prose or tables composes and validates (the
README's first also through the real ``curate --cfg job``), its overrides land in the config, and every pipeline
they name is registered. A placeholder (``experiment=<name>``, ``data.path=<corpus>``) stands for a real value
(:data:`PLACEHOLDERS`); optional parts in brackets (``[run.namespace=<name>]``) are left out."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from functools import lru_cache

from curation.config_loader import compose_config

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PIPELINES = {p.name for p in (REPO / "src/curation/pipelines").iterdir() if (p / "pipeline.py").is_file()}
PIPELINES.add("__default__")
README_MAX_LINES = 120  # "fits on a screen or two"


def shell_commands(path: Path) -> list[str]:
    """Lines of the ``bash`` code blocks of a markdown file, ``\\``-continuations joined."""
    commands, block, pending = [], None, ""
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            block = line[3:].strip() if block is None else None
            continue
        if block not in ("bash", "sh", "shell"):
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        if pending.strip():
            commands.append(pending.strip())
        pending = ""
    return commands


def curate_overrides(command: str) -> list[str] | None:
    """The Hydra overrides of a ``curate`` / ``scripts/run.sh`` command, or None for other commands.
    A sweep (``-m``, ``a=1,2``) becomes its first job, which is what ``--cfg job`` can print."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    words = shlex.split(command, comments=True)
    for start, word in enumerate(words):
        if word in ("curate", ".venv/bin/curate") or word.endswith("scripts/run.sh"):
            break
    else:
        return None
    parser = OverridesParser.create()
    overrides = []
    rest = words[start + 1:]
    for i, word in enumerate(rest):
        if i and rest[i - 1] == "--describe" and "=" not in word:  # --describe's key, not an override
            continue
        if word in ("-m", "--multirun") or word.startswith("--"):
            continue
        if word == "job":  # of --cfg job
            continue
        override = parser.parse_override(word)
        if override.is_sweep_override():
            prefix = re.match(r"^(\+\+|\+|~)?", word).group(0)
            word = f"{prefix}{override.get_key_element()}={next(override.sweep_string_iterator())}"
        overrides.append(word)
    return overrides


def _lookup(config: dict, dotted: str):
    node = config
    for part in dotted.split("."):
        node = node[part]
    return node


def check_composed(config: dict, overrides: list[str], where: str) -> None:
    """Each ``key.path=value`` override is in ``config``; each pipeline named is registered."""
    names = [n.strip() for n in str(config["pipeline"]).split("+")]
    assert set(names) <= PIPELINES, f"{where}: pipeline={config['pipeline']} is not registered ({sorted(PIPELINES)})"
    for override in overrides:
        key, _, value = override.lstrip("+").partition("=")
        if "." not in key or key.startswith("hydra") or "${" in value or "(" in value:
            continue  # a group choice, a Hydra setting or an interpolation: composing it was the check
        expected = yaml.safe_load(value) if value else None
        assert _lookup(config, key) == expected, f"{where}: {override} did not reach the config"


def test_readme_fits_on_a_screen_or_two_and_links_existing_pages():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    assert "\nbash scripts/test.sh\n" in readme
    assert "being wired" not in readme and "Status:" not in readme  # no stale status lines
    # Every linked page exists.
    for link in re.findall(r"\]\(([^)#]+\.md)\)", readme):
        assert (REPO / link).is_file(), link


def test_readme_curate_commands_compose_and_the_first_runs_as_cfg_job(tmp_path):
    """Every README command composes and validates in process (as the docs' do; stricter than ``--cfg job``,
    which prints before any group's dataclass is built); the first, what a user types first, also goes
    through the real ``curate --cfg job`` (one process: each costs ~10 s of start-up on 2 cores)."""
    commands = [(c, curate_overrides(c)) for c in shell_commands(REPO / "README.md")]
    commands = [(c, o) for c, o in commands if o is not None]
    assert len(commands) >= 5, commands  # the run command and the five overrides
    for command, overrides in commands:
        overrides = [o for o in overrides if not o.startswith("hydra")]  # launcher settings: not in compose()
        check_composed(compose_config(REPO / "conf", overrides), overrides, command)
    command, overrides = commands[0]
    env = {**os.environ, "CURATION_PROJECT_ROOT": str(REPO), "KEDRO_DISABLE_TELEMETRY": "true"}
    done = subprocess.run([str(BIN / "curate"), "--cfg", "job", *overrides], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{command}: {done.stderr[-2000:]}"
    check_composed(yaml.safe_load(done.stdout), overrides, command)


# What a placeholder of the docs stands for when its command is composed (a key not named here: not composed)
PLACEHOLDERS = {"experiment": "fig7_group_size", "pipeline": "ingest", "selection": "datamask",
                "data.path": "data/01_raw/corpus", "run.namespace": "docs"}
FENCED = re.compile(r"^```.*?^```", flags=re.M | re.S)
QUOTED = re.compile(r"`((?:\.venv/bin/)?curate(?: [^`]*)?)`")
OPTIONAL = re.compile(r"\s\[[^\]]*(?:<|\.\.\.)[^\]]*\]")  # [run.namespace=<name>], [override ...]
PLACEHOLDER = re.compile(r"(?<!\S)([\w.]+)=(<[^>]*>|\.\.\.)(?!\S)")


def quoted_commands(path: Path) -> list[str]:
    """The ``curate ...`` commands a page quotes in its text and tables (inline code), outside code blocks."""
    return QUOTED.findall(FENCED.sub("", path.read_text()))


def with_placeholders_filled(command: str) -> str | None:
    """``command`` with its optional bracketed parts dropped and each placeholder value replaced by what it
    stands for (:data:`PLACEHOLDERS`); None when a placeholder has no stand-in."""
    command = OPTIONAL.sub("", command)
    keys = [found.group(1) for found in PLACEHOLDER.finditer(command)]
    if any(key not in PLACEHOLDERS for key in keys):
        return None
    return PLACEHOLDER.sub(lambda found: f"{found.group(1)}={PLACEHOLDERS[found.group(1)]}", command)


@lru_cache(maxsize=None)
def _composed(overrides: tuple[str, ...]) -> dict:
    return compose_config(REPO / "conf", list(overrides))


PAGES = [REPO / "README.md", REPO / "REPRODUCING.md", *sorted((REPO / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_docs_curate_commands_compose(page):
    """The page's ``bash`` blocks (the README's: the test above) and every ``curate ...`` it quotes."""
    commands = ([] if page.name == "README.md" else shell_commands(page)) + quoted_commands(page)
    for command in commands:
        filled = with_placeholders_filled(command)
        overrides = None if filled is None else curate_overrides(filled)
        if overrides is None:
            continue
        overrides = [o for o in overrides if not o.startswith("hydra")]  # launcher settings: not in compose()
        check_composed(_composed(tuple(overrides)), overrides, f"{page.name}: {command}")


def test_the_quoted_commands_are_found_and_their_placeholders_filled():
    reproducing = quoted_commands(REPO / "REPRODUCING.md")
    assert "curate -m experiment=fig7_group_size" in reproducing and len(reproducing) >= 20
    assert with_placeholders_filled("curate experiment=decide_ladder [data.path=<corpus>] [run.namespace=<name>]") \
        == "curate experiment=decide_ladder"
    assert with_placeholders_filled("curate pipeline=reports experiment=<name>") == \
        "curate pipeline=reports experiment=fig7_group_size"
    assert with_placeholders_filled("curate eval.tasks=[piqa,arc_easy] data.path=...") == \
        "curate eval.tasks=[piqa,arc_easy] data.path=data/01_raw/corpus"
    assert with_placeholders_filled("curate experiment=table2_tokens data.path=<the corpus as id + text>") == \
        "curate experiment=table2_tokens data.path=data/01_raw/corpus"
    assert with_placeholders_filled("curate budget.docs=<n>") is None


def test_experiment_headers_give_the_report_command_the_docs_give():
    """docs/reproducing.md and REPRODUCING.md rebuild a report with ``curate pipeline=reports experiment=<name>``
    (the experiment's settings too: its MLflow experiment, where the report run is logged); the headers of
    conf/experiment/*.yaml say the same, not ``report.experiment=<name>``."""
    assert "curate pipeline=reports experiment=<name>" in (REPO / "docs" / "reproducing.md").read_text().replace(
        "fig7_group_size", "<name>")
    headers = {p.name: p.read_text() for p in (REPO / "conf" / "experiment").glob("*.yaml")}
    assert [name for name, text in headers.items() if "pipeline=reports report.experiment=" in text] == []
