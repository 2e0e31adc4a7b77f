"""Where a streaming stage works, and on which engine (shared by the pruning and selection nodes).

A stage's folder is its result-cache entry ``<cache.dir>/<stage>-<key>`` (key = stage config + input
fingerprints): it is kept after publishing (the Kedro dataset hard-links it into place), so an
unchanged re-run is a cache hit and a killed run resumes there. With ``cache.enabled: false`` it is a
staging folder per ``run.namespace`` under ``data/02_intermediate/.staging`` that publishing moves.
"""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

from curation.cache import result_cache
from curation.paths import project_root
from curation.shards.executor import EngineConfig, engine_from_data

STAGING = Path("data") / "02_intermediate" / ".staging"  # per-run work folders of streaming stages


def stage_folder(stage: str, key: str, cache: Mapping[str, Any], run: Mapping[str, Any] | None) -> tuple[Path, bool]:
    """``(folder, cached)``: the result-cache entry of ``stage`` for ``key``, or (cache disabled) a staging folder."""
    store = result_cache(cache)
    if store.enabled:
        return store.directory / f"{stage}-{key}", True
    namespace = str((run or {}).get("namespace") or "default")
    return project_root() / STAGING / namespace / f"{stage}-{key}", False


def engine_of(data: Mapping[str, Any] | None) -> EngineConfig:
    """The per-shard engine of the ``data`` group (``data.engine``, ``data.ray_address``, ``data.workers``)."""
    return engine_from_data(data)


log = logging.getLogger(__name__)

_STAGE_FOLDER = re.compile(r"^[A-Za-z0-9_]+-[0-9a-f]{8,}$")  # <stage>-<key>, as stage_folder names them
TMP = "tmp"  # the run's temporary files (tempfile.tempdir while curate runs): run_tempdir


@contextmanager
def run_tempdir(root: Path, namespace: str) -> Iterator[Path]:
    """Temporary files of the run (Python's ``tempfile``: the fastText trainer's input text and model,
    up to GBs) go to ``data/02_intermediate/.staging/<namespace>/tmp`` instead of ``/tmp``: a run killed
    before its ``finally`` clauses leaves them in its namespace, where the next successful run removes
    them, and large files land on the data disk, not a small ``/tmp``. Call it holding the namespace's
    lock: what is in the folder when it starts was left by a killed run, and is removed."""
    folder = Path(root) / STAGING / namespace / TMP
    if folder.is_dir():
        left = [p for p in folder.rglob("*") if p.is_file()]
        if left:
            size = sum(p.stat().st_size for p in left)
            log.info("removing %d temporary file(s) (%.1f MB) a killed run left in %s", len(left), size / 1e6, folder)
        shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    previous = tempfile.tempdir
    tempfile.tempdir = str(folder)
    try:
        yield folder
    finally:
        tempfile.tempdir = previous
        _remove_empty(folder, Path(root) / STAGING)


def _remove_empty(folder: Path, base: Path) -> None:
    """``folder`` and its parents up to ``base``, as long as they are empty."""
    while folder != base and folder.is_dir():
        try:
            folder.rmdir()
        except OSError:
            break
        folder = folder.parent


def remove_staging(root: Path, namespace: str) -> int:
    """After a successful run: remove what is left of its stage folders under
    ``data/02_intermediate/.staging/<namespace>/`` (scratch parts, block checkpoints; the outputs have
    been moved out) and the namespace's folder when empty. Only ``<stage>-<key>`` folders of this
    namespace go: a nested namespace (a sweep's ``<namespace>/multirun/...``) may be running. Returns
    the bytes freed."""
    base = Path(root) / STAGING
    folder = base / namespace
    if not folder.is_dir():
        return 0
    freed = 0
    for entry in folder.iterdir():
        if entry.is_dir() and _STAGE_FOLDER.match(entry.name):
            freed += sum(f.stat().st_blocks * 512 for f in entry.rglob("*") if f.is_file() and not f.is_symlink())
            shutil.rmtree(entry, ignore_errors=True)
    _remove_empty(folder, base)
    if freed:
        log.info("removed the staging folders of namespace %r (%.1f MB)", namespace, freed / 1e6)
    return freed
