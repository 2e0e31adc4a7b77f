"""Fitted raters as one folder: a ``manifest.json`` and one file per rater.

``save_raters`` writes what ``score_corpus`` fitted (``ScoringResult.raters``);
``load_raters`` reads it back, so a new corpus can be scored with the same
models (``scoring.pretrained_dir=<folder>``) and Ray workers can load them
(``curation.scoring.sharded``: every worker loads the fit folder once). Each rater is written by its own ``save``:

| rater | file(s) |
|---|---|
| ``fasttext_dclm``, ``fasttext_ultrafineweb`` | ``<name>.bin`` (fastText) + ``<name>.json`` (its config) |
| ``edu``, ``wiki`` | ``<name>.joblib`` (config + scikit-learn head) |
| ``<target>_importance`` (DSIR) | ``<name>.npz`` (log-ratio vector + config) |

A folder is self-contained. A fastText rater that was itself loaded from a
``.bin`` (``pretrained_path``, e.g. the ~4 GB public DCLM classifier) is
hard-linked into it when the file system allows, else copied. Files in these
folders are written once and never modified in place (a folder is only ever
replaced whole), which is what makes hard links safe.
``write_raters_atomically`` writes a complete folder next to the target and
renames it into place, so a killed save never leaves a folder that looks
complete.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from curation.cache import atomic_folder

MANIFEST = "manifest.json"
FORMAT_VERSION = 1


def _link_or_copy(src: str, dst: str) -> None:
    """Hard link (free, same file system) or copy; see the module note on write-once files."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _kind(rater: Any) -> str:
    from curation.scoring.dsir import DSIRImportance
    from curation.scoring.embedding_raters import EduRater, WikiRater
    from curation.scoring.fasttext_rater import FastTextRater

    for cls, kind in ((FastTextRater, "fasttext"), (EduRater, "edu"), (WikiRater, "wiki"), (DSIRImportance, "dsir")):
        if isinstance(rater, cls):
            return kind
    raise TypeError(f"cannot save a rater of type {type(rater).__name__}")


def save_raters(raters: Mapping[str, Any], directory: str | Path, meta: Mapping[str, Any] | None = None) -> dict:
    """Write every rater of ``raters`` (name -> fitted rater) into ``directory``; return the manifest.

    ``directory`` must not exist or be empty (use ``write_raters_atomically`` to replace a folder).
    """
    directory = Path(directory)
    if directory.exists() and any(directory.iterdir()):
        raise FileExistsError(f"{directory} is not empty")
    directory.mkdir(parents=True, exist_ok=True)
    entries: dict[str, dict[str, Any]] = {}
    for name, rater in raters.items():
        kind = _kind(rater)
        file = f"{name}.{ {'fasttext': 'bin', 'edu': 'joblib', 'wiki': 'joblib', 'dsir': 'npz'}[kind] }"
        if kind == "fasttext" and rater.cfg.pretrained_path:
            # the model file as loaded (save_model would write the same bytes, slower)
            from dataclasses import asdict

            _link_or_copy(str(rater.cfg.pretrained_path), str(directory / file))
            sidecar = asdict(rater.cfg) | {"pretrained_path": None, "config_class": type(rater.cfg).__name__}
            (directory / file).with_suffix(".json").write_text(json.dumps(sidecar, indent=2))
        else:
            rater.save(directory / file)
        entries[name] = {"kind": kind, "file": file}
    manifest = {"format": FORMAT_VERSION, "raters": entries, "meta": dict(meta or {})}
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
    return manifest


def read_manifest(directory: str | Path) -> dict:
    path = Path(directory) / MANIFEST
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: not a folder written by curation.scoring.persistence.save_raters")
    manifest = json.loads(path.read_text())
    if manifest.get("format") != FORMAT_VERSION:
        raise ValueError(f"{path}: format {manifest.get('format')!r}, this version reads {FORMAT_VERSION}")
    return manifest


def load_raters(directory: str | Path, names: list[str] | None = None, embedder=None) -> dict[str, Any]:
    """Raters saved by ``save_raters`` (all, or ``names``; a missing name raises ``KeyError``)."""
    from curation.scoring.dsir import DSIRImportance
    from curation.scoring.embedding_raters import EduRater, WikiRater
    from curation.scoring.fasttext_rater import FastTextRater

    directory = Path(directory)
    entries = read_manifest(directory)["raters"]
    names = list(entries) if names is None else list(names)
    missing = [n for n in names if n not in entries]
    if missing:
        raise KeyError(f"{directory}: no saved rater(s) {missing}; it holds {sorted(entries)}")
    out: dict[str, Any] = {}
    for name in names:
        entry = entries[name]
        kind = entry["kind"]
        if kind == "fasttext":
            out[name] = FastTextRater.load(directory / entry["file"])
        elif kind == "edu":
            out[name] = EduRater.load(directory / entry["file"], embedder)
        elif kind == "wiki":
            out[name] = WikiRater.load(directory / entry["file"], embedder)
        elif kind == "dsir":
            out[name] = DSIRImportance.load(directory / entry["file"])
        else:
            raise ValueError(f"{directory}: unknown rater kind {kind!r} for {name!r}")
    return out


def write_raters_atomically(raters: Mapping[str, Any], target: str | Path,
                            meta: Mapping[str, Any] | None = None) -> dict:
    """``save_raters`` into a temporary sibling folder, then rename it onto ``target``."""
    manifest: dict = {}
    atomic_folder(target, lambda tmp: manifest.update(save_raters(raters, tmp, meta)))
    return manifest


def copy_directory_atomically(source: str | Path, target: str | Path) -> None:
    """Copy a saved rater folder to ``target`` (hard links where possible), atomically."""
    source, target = Path(source), Path(target)
    read_manifest(source)
    atomic_folder(target, lambda tmp: shutil.copytree(source, tmp, copy_function=_link_or_copy,
                                                      dirs_exist_ok=True))


@dataclass
class RaterFolder:
    """A set of fitted raters on its way to (or back from) ``data/06_models``.

    Either ``directory`` (a folder written by ``save_raters``, e.g. in the
    scoring cache) or ``raters`` (fitted raters in memory) is set. ``fresh``
    says whether this run fitted them (False: a cache hit re-used them).
    """

    directory: Path | None = None
    raters: Mapping[str, Any] | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    fresh: bool = True

    def __post_init__(self) -> None:
        if (self.directory is None) == (self.raters is None):
            raise ValueError("RaterFolder needs exactly one of directory and raters")

    def write(self, target: str | Path) -> None:
        """Put these raters at ``target``, atomically (hard links from ``directory`` where possible)."""
        if self.directory is not None:
            copy_directory_atomically(self.directory, target)
        else:
            write_raters_atomically(self.raters, target, self.meta)

    def load(self, names: list[str] | None = None, embedder=None) -> dict[str, Any]:
        if self.raters is not None:
            return {n: self.raters[n] for n in (names or list(self.raters))}
        return load_raters(self.directory, names, embedder)
