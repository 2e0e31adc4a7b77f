"""Where the project lives: the folder that holds ``conf/`` and ``pyproject.toml``."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

ENV_ROOT = "CURATION_PROJECT_ROOT"
BUNDLED_CORPUS = "data/01_raw/corpus"  # the corpus every clone carries: data.path's default (conf/data/corpus.yaml)


def _is_root(path: Path) -> bool:
    return (path / "conf" / "config.yaml").is_file() and (path / "pyproject.toml").is_file()


@lru_cache(maxsize=None)
def _find(start: str, env_value: str | None) -> Path:
    if env_value:
        root = Path(env_value).expanduser().resolve()
        if not _is_root(root):
            raise FileNotFoundError(f"{ENV_ROOT}={env_value} has no conf/config.yaml and pyproject.toml")
        return root
    for candidate in (Path(start), *Path(start).parents):
        if _is_root(candidate):
            return candidate
    # Editable install: the checkout this module was imported from.
    checkout = Path(__file__).resolve().parents[2]
    if _is_root(checkout):
        return checkout
    raise FileNotFoundError(
        "cannot find the curation project (a folder with conf/config.yaml and pyproject.toml): "
        f"run from inside it or set {ENV_ROOT}"
    )


def project_root() -> Path:
    """The project folder: ``$CURATION_PROJECT_ROOT``, else the nearest parent of the cwd
    holding ``conf/config.yaml``, else the checkout this package was installed from."""
    return _find(str(Path.cwd().resolve()), os.environ.get(ENV_ROOT))


def conf_dir() -> Path:
    return project_root() / "conf"


ENV_DECONTAMINATION_INDEX = "CURATION_DECONTAMINATION_INDEX"  # another folder for them (tests share one per checkout)
DECONTAMINATION_INDEX = Path("data") / "06_models" / "decontamination"  # cached n-gram indexes of the eval tasks


def decontamination_index_dir() -> Path:
    """Where ingest's decontamination keeps the evaluation tasks' n-gram indexes (built once per key):
    ``$CURATION_DECONTAMINATION_INDEX``, else ``data/06_models/decontamination`` of the project."""
    return Path(os.environ.get(ENV_DECONTAMINATION_INDEX) or project_root() / DECONTAMINATION_INDEX)


def relative(path: str, root: Path | None = None) -> str:
    """``path`` relative to ``root`` (default: the project root) when it lies inside it, else as given."""
    root = project_root() if root is None else root
    try:
        return str(Path(path).resolve().relative_to(Path(root).resolve()))
    except (ValueError, OSError):
        return path


def on_disk(path: str, root: Path | None = None) -> Path:
    """Where a project-relative (or absolute) ``path`` is on disk."""
    return Path(path) if Path(path).is_absolute() else (project_root() if root is None else Path(root)) / path



def is_bundled_corpus(path: str, root: Path | None = None) -> bool:
    """Whether ``path`` (a ``data.path``: project-relative, absolute, a URL or a glob) is the bundled corpus."""
    text = str(path).strip()
    if not text or "://" in text:
        return False
    if not Path(text).is_absolute():
        return Path(text) == Path(BUNDLED_CORPUS)  # "data/01_raw/corpus/" and "./data/01_raw/corpus" too
    try:
        return Path(relative(text, root)) == Path(BUNDLED_CORPUS)
    except FileNotFoundError:  # no project around (a report read elsewhere): only the relative spelling counts
        return False


def corpus_name(path: str, root: Path | None = None) -> str:
    """How text names the corpus at ``path``: "the bundled corpus (data/01_raw/corpus)" for the one every
    clone carries, else the path as given (a user's corpus is never called the bundled one)."""
    return f"the bundled corpus ({BUNDLED_CORPUS})" if is_bundled_corpus(path, root) else str(path)
