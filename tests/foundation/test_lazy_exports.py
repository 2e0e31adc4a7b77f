"""`curate`'s config check imports every group's schema; the packages' names are imported on first use
(curation.lazy_exports), so the check does not pull in torch, scipy.stats or scikit-learn (~2 s of every command),
and a package's public names still mean what they meant when its ``__init__`` imported them eagerly."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "scipy.stats", "sklearn", "lightgbm", "transformers")


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_the_config_check_imports_no_heavy_package():
    out = _run("import sys; import curation.config_schema as c; c._schemas(); "
               f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    assert out == "[]"


def test_a_name_that_is_also_a_submodule_stays_the_function():
    # the import system sets a loaded submodule as its package's attribute; `train` and `evaluate` are functions
    out = _run("import curation.lm.train, curation.evaluation.evaluate, curation.lm, curation.evaluation\n"
               "from curation.lm import train, evaluate_loss\n"
               "from curation.evaluation import evaluate\n"
               "print(type(train).__name__, type(evaluate_loss).__name__, type(evaluate).__name__, "
               "type(curation.lm.train).__name__, type(curation.evaluation.evaluate).__name__)")
    assert out == "function function function function function"


def test_every_public_name_resolves_to_its_module():
    out = _run("import importlib\n"
               "bad = []\n"
               "for pkg in ('curation.lm', 'curation.evaluation', 'curation.metarater', 'curation.selection', "
               "'curation.verification'):\n"
               "    m = importlib.import_module(pkg)\n"
               "    assert sorted(m.__all__) == sorted(m._LAZY), pkg\n"
               "    bad += [f'{pkg}.{n}' for n in m.__all__ if getattr(m, n) is not "
               "getattr(importlib.import_module(m._LAZY[n]), n)]\n"
               "    assert set(m.__all__) <= set(dir(m))\n"
               "print(bad)")
    assert out == "[]"


def test_every_node_functions_type_hints_resolve_without_torch():
    """Kedro reads every node's type hints when a run starts (its typed-parameter check); a hint that names a class
    imported only for type checkers printed 'Could not extract type hints from function ...' on every run."""
    out = _run("import importlib, pkgutil, sys, typing\n"
               "import curation.nodes as nodes\n"
               "bad = []\n"
               "for info in pkgutil.iter_modules(nodes.__path__):\n"
               "    m = importlib.import_module(f'curation.nodes.{info.name}')\n"
               "    for f in vars(m).values():\n"
               "        if callable(f) and not isinstance(f, type) and getattr(f, '__module__', '') == m.__name__:\n"
               "            try:\n"
               "                typing.get_type_hints(f)\n"
               "            except Exception as err:\n"
               "                bad.append(f'{m.__name__}.{f.__name__}: {err}')\n"
               "print(bad, 'torch' in sys.modules)")
    assert out == "[] False"
