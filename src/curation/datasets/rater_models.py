"""Fitted scoring raters as a folder in ``data/06_models``, also logged to MLflow.

The scoring node returns a ``curation.scoring.persistence.RaterFolder``; this
dataset puts it at ``path`` atomically (a complete folder is renamed into
place, as ``AtomicDataset`` does for single files) and logs it to the active
MLflow run as artifacts under ``artifact_path`` (as kedro-mlflow's
``MlflowArtifactDataset`` does). ``load`` returns a ``RaterFolder`` whose
``load()`` gives the raters back; ``scoring.pretrained_dir=<path>`` re-scores a
corpus with them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from kedro.io import AbstractDataset

from curation.scoring.persistence import MANIFEST, RaterFolder, read_manifest

log = logging.getLogger(__name__)


class RaterModelsDataset(AbstractDataset):
    """A folder of fitted raters (local or shared-mount path: saves rename folders).

    Args:
        path: the folder, e.g. ``data/06_models/default/raters``.
        log_to_mlflow: log the folder to the active MLflow run (none active: nothing logged).
        artifact_path: artifact sub-folder of the run.
        mlflow_max_file_mb: files larger than this stay out of MLflow (listed in
            ``not_logged.txt`` there); None logs every file.

    A ``RaterFolder`` with ``fresh=False`` (scores and raters re-used from the
    cache) logs only its manifest: its files went to MLflow with the run that
    fitted them. MLflow's active run is per thread, so with ``kedro run --async``
    nothing is logged.
    """

    def __init__(self, *, path: str, log_to_mlflow: bool = True, artifact_path: str = "raters",
                 mlflow_max_file_mb: float | None = None, metadata: dict[str, Any] | None = None):
        self._path = Path(path)
        self._log_to_mlflow = log_to_mlflow
        self._artifact_path = artifact_path
        self._max_mb = mlflow_max_file_mb
        self.metadata = metadata

    def load(self) -> RaterFolder:
        read_manifest(self._path)  # a clear error if nothing was saved here
        return RaterFolder(directory=self._path, fresh=False)

    def save(self, data: RaterFolder) -> None:
        if not isinstance(data, RaterFolder):
            raise TypeError(f"expected a RaterFolder, got {type(data).__name__}")
        data.write(self._path)
        if self._log_to_mlflow:
            self._log(data.fresh)

    def _log(self, fresh: bool) -> None:
        import mlflow

        if mlflow.active_run() is None:
            return
        files = sorted(p for p in self._path.iterdir() if p.is_file())
        if not fresh:
            files = [self._path / MANIFEST]
        # reference raters (scoring.training.source=reference) are shared files, the same for every run:
        # they are named, not copied into each run (curation.scoring.reference)
        manifest = read_manifest(self._path)
        shared = {name: folder for name, folder in manifest.get("meta", {}).get("reference", {}).items()
                  if name in manifest["raters"] and manifest["raters"][name]["kind"] != "dsir"}
        if shared:
            stems = {Path(manifest["raters"][name]["file"]).stem for name in shared}
            files = [p for p in files if p.stem not in stems]
            mlflow.log_text("".join(f"{name}\tdata/06_models/shared/{folder}\n" for name, folder in sorted(shared.items())),
                            f"{self._artifact_path}/reference_raters.txt")
        too_big = [p for p in files if self._max_mb is not None and p.stat().st_size > self._max_mb * 2**20]
        for file in files:
            if file not in too_big:
                mlflow.log_artifact(str(file), self._artifact_path)
        if too_big:
            listing = "\n".join(f"{p.name}\t{p.stat().st_size} bytes\t{p.resolve()}" for p in too_big)
            mlflow.log_text(listing + "\n", f"{self._artifact_path}/not_logged.txt")
            log.info("rater files over %s MB not logged to MLflow: %s", self._max_mb, [p.name for p in too_big])

    def _exists(self) -> bool:
        return (self._path / MANIFEST).exists()

    def _describe(self) -> dict[str, Any]:
        return {"path": str(self._path), "log_to_mlflow": self._log_to_mlflow, "artifact_path": self._artifact_path}
