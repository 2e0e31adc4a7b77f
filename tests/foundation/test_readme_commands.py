"""The commands the README and docs/ show still run: every ``curate`` (or ``bash scripts/run.sh``) line of
their ``bash`` blocks composes and validates (the README's first also through the real ``curate --cfg job``),
its overrides land in the config, and every pipeline they name is registered."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

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


@pytest.mark.parametrize("page", sorted((REPO / "docs").glob("*.md")), ids=lambda p: p.name)
def test_docs_curate_commands_compose(page):
    for command in shell_commands(page):
        overrides = curate_overrides(command)
        if overrides is None:
            continue
        overrides = [o for o in overrides if not o.startswith("hydra")]  # launcher settings: not in compose()
        check_composed(compose_config(REPO / "conf", overrides), overrides, f"{page.name}: {command}")
