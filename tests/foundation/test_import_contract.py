"""The layer contract, checked on the source's AST (issue 12; the developer guide's layers).

- the algorithm core (every package and module of ``curation`` except ``nodes``,
  ``pipelines``, ``tracking``, ``datasets`` and the Kedro/Hydra glue modules) never
  imports ``curation.nodes``, ``curation.pipelines``, ``curation.tracking``,
  ``curation.datasets``, Kedro, MLflow or Hydra -- not even inside a function;
- a node module never imports another node module;
- no test imports from ``curation.nodes`` (tests run nodes through Kedro pipelines,
  or test the core functions the nodes wrap).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "curation"
ADAPTER_PACKAGES = ("nodes", "pipelines", "tracking", "datasets")
GLUE_MODULES = ("settings.py", "pipeline_registry.py", "hydra_app.py", "config_loader.py", "config_schema.py",
                "runtime_hooks.py", "__main__.py")
FORBIDDEN_IN_CORE = ("curation.nodes", "curation.pipelines", "curation.tracking", "curation.datasets", "kedro",
                     "kedro_datasets", "mlflow", "hydra")
# ingest is being rewritten for sharded datasets (issue "scale"); its node test moves with it.
TESTS_STILL_ON_NODES: set[str] = set()
MODULE_NAME = re.compile(r"curation(\.[a-z_]+)+")


def _package_of(path: Path) -> str:
    """``curation.x`` for a module under src/curation/x/ (to resolve relative imports); "" elsewhere."""
    try:
        return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    except ValueError:
        return ""


def _imports(path: Path, package: str | None = None) -> list[tuple[int, str]]:
    """Every imported module name (absolute; relative imports resolved) with its line."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = _package_of(path) if package is None else package
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            # `from curation import nodes` imports a sub-package by name
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.args[0].value))  # importlib.import_module("...")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_NAME.fullmatch(node.value):
            # a module named in a string (a plugin list read by import_module) counts as an import
            found.append((node.lineno, node.value))
    return found


def _matches(module: str, prefixes: tuple[str, ...]) -> str | None:
    return next((p for p in prefixes if module == p or module.startswith(p + ".")), None)


def _core_modules() -> list[Path]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in ADAPTER_PACKAGES or (len(rel.parts) == 1 and rel.name in GLUE_MODULES):
            continue
        out.append(path)
    return out


def _violations(paths, prefixes) -> list[str]:
    return [f"{path.relative_to(REPO)}:{line} imports {module}"
            for path in paths for line, module in _imports(path) if _matches(module, prefixes)]


def test_the_core_imports_no_adapter_layer_and_no_kedro_mlflow_or_hydra():
    core = _core_modules()
    assert len(core) > 50 and PACKAGE / "selection" / "corpus.py" in core  # the walk sees the core
    assert _violations(core, FORBIDDEN_IN_CORE) == []


def test_nodes_never_import_nodes():
    nodes = sorted((PACKAGE / "nodes").glob("*.py"))
    assert len(nodes) >= 8
    assert _violations(nodes, ("curation.nodes",)) == []


def test_no_test_imports_from_nodes():
    tests = [p for p in sorted((REPO / "tests").rglob("*.py"))
             if str(p.relative_to(REPO)) not in TESTS_STILL_ON_NODES and p != Path(__file__).resolve()]
    assert _violations(tests, ("curation.nodes",)) == []


@pytest.mark.parametrize("source, expected", [
    ("import mlflow\n", {"mlflow"}),
    ("def f():\n    from hydra.core.config_store import ConfigStore\n", {"hydra.core.config_store"}),
    ("from curation import nodes\n", {"curation.nodes"}),
    ("from ..tracking.store import resolve_uri\n", {"curation.tracking.store"}),
    ("import numpy\nfrom curation.cache import config_key\n", set()),
    ("PLUGINS = ('curation.tracking.hooks',)\n", {"curation.tracking.hooks"}),
    ("import importlib\nimportlib.import_module('mlflow')\n", {"mlflow"}),
])
def test_the_checker_sees_lazy_relative_and_package_imports(tmp_path, source, expected):
    probe = tmp_path / "probe.py"
    probe.write_text(source)
    found = {m for _, m in _imports(probe, package="curation.selection") if _matches(m, FORBIDDEN_IN_CORE)}
    assert expected <= found and bool(found) == bool(expected)
