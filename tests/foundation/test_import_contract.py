"""The layer contract, checked on the source's AST (issue 12; the developer guide's layers).

- the algorithm core (every package and module of ``curation`` except ``nodes``,
  ``pipelines``, ``tracking``, ``datasets`` and the Kedro/Hydra glue modules) never
  imports ``curation.nodes``, ``curation.pipelines``, ``curation.tracking``,
  ``curation.datasets``, Kedro, MLflow, Hydra or OmegaConf -- not even inside a function
  (it takes plain mappings; a ``DictConfig`` is one);
- a node module never imports another node module, and a node function stays under
  40 lines (it adapts: the work is in the core);
- no test imports from ``curation.nodes`` (tests run nodes through Kedro pipelines,
  or test the core functions the nodes wrap);
- the modules of ``curation`` import each other without cycles (issue 23: the circles
  inside ``embedding/`` and ``reporting/``), lazy imports inside functions included;
- the packages stand on floors (docs/architecture.md draws them): an import runs to the same floor or
  down, and the few that run up are listed in ``UPWARD`` with their reason (issue #45: at most 3).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "curation"
ADAPTER_PACKAGES = ("nodes", "pipelines", "tracking", "datasets")
GLUE_MODULES = ("settings.py", "pipeline_registry.py", "hydra_app.py", "cli_help.py", "config_loader.py",
                "config_schema.py",
                "runtime_hooks.py", "cli.py", "__main__.py", "setup_raters.py")
FORBIDDEN_IN_CORE = ("curation.nodes", "curation.pipelines", "curation.tracking", "curation.datasets", "kedro",
                     "kedro_datasets", "mlflow", "hydra", "omegaconf")
NODE_MAX_LINES = 39  # "nodes stay under 40 lines" (signature, docstring and body)
# ingest is being rewritten for sharded datasets (issue "scale"); its node test moves with it.
TESTS_STILL_ON_NODES: set[str] = set()
MODULE_NAME = re.compile(r"curation(\.[a-z_]+)+")


def _package_of(path: Path) -> str:
    """``curation.x`` for a module under src/curation/x/ (to resolve relative imports); "" elsewhere."""
    try:
        return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    except ValueError:
        return ""


def _from_module(node: ast.ImportFrom, package: str) -> str:
    """The absolute module of ``from ... import`` (relative imports resolved against ``package``)."""
    if node.level:
        base = package.split(".")[: len(package.split(".")) - node.level + 1]
        return ".".join([*base, node.module] if node.module else base)
    return node.module or ""


def _imports_of(node: ast.AST, package: str = "") -> list[tuple[int, str]]:
    if isinstance(node, ast.Import):
        return [(node.lineno, alias.name) for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        module = _from_module(node, package)
        # `from curation import nodes` imports a sub-package by name
        return [(node.lineno, module)] + [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    if (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        return [(node.lineno, node.args[0].value)]  # importlib.import_module("...")
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_NAME.fullmatch(node.value):
        # a module named in a string (a plugin list read by import_module) counts as an import
        return [(node.lineno, node.value)]
    return []


def _imports(path: Path, package: str | None = None) -> list[tuple[int, str]]:
    """Every imported module name (absolute; relative imports resolved) with its line."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = _package_of(path) if package is None else package
    return [found for node in ast.walk(tree) for found in _imports_of(node, package)]


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


def _long_functions(path: Path, limit: int = NODE_MAX_LINES) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path.name}:{node.lineno} {node.name} is "
            f"{node.end_lineno - node.lineno + 1} lines" for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and not node.name.startswith("_") and node.end_lineno - node.lineno + 1 > limit]


def test_node_functions_stay_under_40_lines():
    nodes = sorted((PACKAGE / "nodes").glob("*.py"))
    assert [line for path in nodes for line in _long_functions(path)] == []


def test_the_length_check_counts_signature_docstring_and_body(tmp_path):
    probe = tmp_path / "probe.py"
    head = "def node(\n    a,\n):\n    \"\"\"doc\"\"\"\n"
    probe.write_text(head + "    a += 1\n" * 36 + "    return a\n")  # 41 lines
    assert _long_functions(probe) == ["probe.py:1 node is 41 lines"]
    probe.write_text("def node(a):\n" + "    a += 1\n" * 37 + "    return a\n")  # 39 lines
    assert _long_functions(probe) == []


# --- import cycles -------------------------------------------------------------------------------


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the modules of the package under ``root`` it imports (at the top or in a function).

    ``from a.b import c`` is an edge to ``a.b.c`` when that is a module, else to ``a.b``; the parent
    packages Python initialises on the way are not edges (every submodule would otherwise be in a
    cycle with an ``__init__`` that re-exports it)."""
    paths = {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}

    def known(module: str) -> str:
        while module and module not in paths:  # a name inside a module: the module
            module = module.rpartition(".")[0]
        return module

    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom):
                base = _from_module(node, package)
                edges |= {f"{base}.{a.name}" if f"{base}.{a.name}" in paths else known(base) for a in node.names}
            elif isinstance(node, (ast.Import, ast.Call, ast.Constant)):
                edges |= {known(module) for _, module in _imports_of(node)}
        graph[name] = edges - {"", name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_curation_modules_import_each_other_without_cycles():
    graph = import_graph(PACKAGE)
    assert len(graph) > 100 and "curation.embedding.static" in graph["curation.embedding.embedder"]  # sees lazy edges
    assert cycles(graph) == []


def test_the_cycle_check_finds_a_lazy_circle(tmp_path):
    pkg = tmp_path / "curation"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from curation.sub.a import f\n")  # re-export: no cycle with a
    (pkg / "sub" / "a.py").write_text("from curation.sub.b import g\ndef f():\n    return g()\n")
    (pkg / "sub" / "b.py").write_text("def g():\n    from . import c\n    return c.h()\n")
    (pkg / "sub" / "c.py").write_text("def h():\n    from curation.sub.a import f\n    return f\n")
    (pkg / "d.py").write_text("from curation.sub import f\n")
    graph = import_graph(pkg)
    assert graph["curation.d"] == {"curation.sub"} and graph["curation.sub"] == {"curation.sub.a"}
    assert cycles(graph) == [["curation.sub.a", "curation.sub.b", "curation.sub.c"]]
    (pkg / "sub" / "c.py").write_text("def h():\n    return None\n")
    assert cycles(import_graph(pkg)) == []


@pytest.mark.parametrize("source, expected", [
    ("import mlflow\n", {"mlflow"}),
    ("def f():\n    from hydra.core.config_store import ConfigStore\n", {"hydra.core.config_store"}),
    ("from curation import nodes\n", {"curation.nodes"}),
    ("from ..tracking.store import resolve_uri\n", {"curation.tracking.store"}),
    ("import numpy\nfrom curation.cache import config_key\n", set()),
    ("PLUGINS = ('curation.tracking.hooks',)\n", {"curation.tracking.hooks"}),
    ("import importlib\nimportlib.import_module('mlflow')\n", {"mlflow"}),
    ("def f(c):\n    from omegaconf import OmegaConf\n    return OmegaConf.to_container(c)\n", {"omegaconf"}),
])
def test_the_checker_sees_lazy_relative_and_package_imports(tmp_path, source, expected):
    probe = tmp_path / "probe.py"
    probe.write_text(source)
    found = {m for _, m in _imports(probe, package="curation.selection") if _matches(m, FORBIDDEN_IN_CORE)}
    assert expected <= found and bool(found) == bool(expected)


# --- floors --------------------------------------------------------------------------------------

# Each top-level package or module of ``curation`` and its floor, lowest first (docs/architecture.md).
FLOORS: dict[str, int] = {
    # 0 foundation: errors, paths, config helpers, process and cache plumbing
    **dict.fromkeys(("curation", "errors", "paths", "configuration", "processes", "telemetry", "namespace_lock",
                     "cache", "lazy_exports"), 0),
    "shards": 1,                                   # storage and engines: sharded datasets, local / Ray executors
    **dict.fromkeys(("lm", "embedding"), 2),       # models: the tiny LM, the sentence embedders
    "evaluation": 3,                               # zero-shot tasks and their metrics (on lm)
    "dedup": 4,                                    # exact / near duplicates, 13-gram decontamination (on tasks)
    "data": 5,                                     # ingest: validation, language, dedup on shards, statistics
    "scoring": 6,                                  # raters, the 0-15 merge, embeddings per shard
    "pruning": 7,
    "selection": 8,
    # experiments that combine the stages below
    **dict.fromkeys(("pretraining", "verification", "reporting", "metarater", "decide"), 9),
    **dict.fromkeys(("datasets", "tracking", "nodes"), 10),   # adapters: Kedro datasets, MLflow, nodes
    "pipelines": 11,                                          # wiring only
    # Kedro / Hydra glue and the command lines
    **dict.fromkeys(("config_schema", "config_loader", "settings", "runtime_hooks", "pipeline_registry",
                     "hydra_app", "cli_help", "cli", "__main__", "setup_raters"), 12),
}

# The imports that run up a floor, module -> module, each with why it stays.
UPWARD: dict[tuple[str, str], str] = {
    ("curation.tracking.hydra_callbacks", "curation.hydra_app"):
        "a Hydra callback (named by path in conf/) runs the reports pipeline when a sweep ends: it needs the "
        "entry point, and Hydra calls it from inside that entry point",
}


def _floor(module: str) -> int:
    parts = module.split(".")
    return FLOORS[parts[1] if len(parts) > 1 else parts[0]]


def upward_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """The edges of ``graph`` from a module to one on a higher floor."""
    return {(m, e) for m, edges in graph.items() for e in edges
            if e.startswith("curation") and _floor(e) > _floor(m)}


def test_every_package_has_a_floor():
    tops = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
            if (p.suffix == ".py" or (p / "__init__.py").is_file()) and p.name != "__init__.py"}
    assert sorted(tops - FLOORS.keys()) == []


def test_the_maps_floor_table_is_this_one():
    """docs/architecture.md's table of floors names the same packages on the same floors as ``FLOORS``."""
    doc = (REPO / "docs" / "architecture.md").read_text()
    table = {}
    for floor, packages in re.findall(r"^\| (\d+) [^|]+\| ([^|]+) \|", doc, flags=re.M):
        table.update(dict.fromkeys((name.removesuffix(".py") for name in re.findall(r"`([^`]+)`", packages)),
                                   int(floor)))
    assert table == {name: floor for name, floor in FLOORS.items() if name != "curation"}


def test_imports_run_down_the_floors_but_a_listed_few():
    found = upward_imports(import_graph(PACKAGE))
    assert sorted(found) == sorted(UPWARD) and len(UPWARD) <= 3


def test_the_floor_check_finds_an_import_that_runs_up(tmp_path):
    pkg = tmp_path / "curation"
    for sub in ("shards", "selection"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "selection" / "a.py").write_text("from curation.shards.b import g\n")
    (pkg / "shards" / "b.py").write_text("def g():\n    from curation.selection import a\n")
    assert upward_imports(import_graph(pkg)) == {("curation.shards.b", "curation.selection.a")}
