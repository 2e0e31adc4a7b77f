"""Package namespaces whose names are imported on first use (PEP 562), for packages whose submodules pull in torch.

``curate`` checks every config group when it composes the config, which imports ``curation.lm.config`` and
``curation.evaluation.config``; importing a submodule runs its package's ``__init__``, and an ``__init__`` that
imports the model and the scorers cost every command ~1.1 s of torch (and scipy.stats' ~0.5 s). With
:func:`lazy_exports` the package's public names stay as they were (``from curation.lm import train``) and are
imported when first used.

A public name that is also a submodule's name (``curation.lm.train``, the function in ``curation.lm.train``, the
module) stays the function, as the eager ``__init__`` left it: the import system sets a loaded submodule as an
attribute of its package, and the package's module class declines that for such names.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any, Callable, Mapping


def lazy_exports(package: str, names: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` of ``package`` for ``names`` (public name -> module holding it); installs the
    module class that keeps a name's value when a submodule of the same name is loaded."""
    module = sys.modules[package]

    def __getattr__(name: str) -> Any:
        source = names.get(name)
        if source is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(source), name)
        object.__setattr__(module, name, value)  # the next lookup is a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(module)) | set(names))

    class LazyPackage(types.ModuleType):
        def __setattr__(self, name: str, value: Any) -> None:
            if name in names and isinstance(value, types.ModuleType) and value.__name__ == f"{package}.{name}":
                return  # a submodule of an exported name's name: the name keeps its own value
            super().__setattr__(name, value)

    module.__class__ = LazyPackage
    return __getattr__, __dir__
