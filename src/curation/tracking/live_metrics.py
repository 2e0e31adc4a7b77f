"""Step metrics logged while a node runs, to the MLflow run the tracking hook opened.

The hook (:mod:`curation.tracking.hooks`) logs a node's ``*_metrics`` and ``*_history`` when the node
returns: a DataMask selection of 10,000 steps showed nothing in MLflow for the 9-14 minutes it ran.
:class:`LiveMetrics` is the sink a node hands to the core's progress callback
(:class:`curation.selection.progress.StepBar`): each value becomes an MLflow metric with the step it was
measured at, sent in batches (one call per :data:`FLUSH_EVERY` points, or sooner when
:data:`FLUSH_SECONDS` have passed, so a slow run's curve still grows in the UI) instead of one database write
per point. Without an active run (``tracking.enabled=false``, a plain Python call) it does nothing; a
failure to log is one warning, never a failed selection.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Mapping, Optional

log = logging.getLogger(__name__)

FLUSH_EVERY = 50  # points per MLflow log_batch
FLUSH_SECONDS = 10.0  # and at least this often while points arrive


class LiveMetrics:
    """``LiveMetrics("selection/datamask_")(step, {"joint": 0.4})`` logs ``selection/datamask_joint`` at
    ``step`` to the active MLflow run (the run is looked up once, here: the node's thread is the hook's)."""

    def __init__(self, prefix: str, run_id: Optional[str] = None) -> None:
        self.prefix = prefix
        self.run_id = run_id
        if self.run_id is None:
            try:
                import mlflow

                active = mlflow.active_run()
                self.run_id = active.info.run_id if active is not None else None
            except Exception:  # MLflow missing or unconfigured: nothing to log to
                self.run_id = None
        self._pending: list = []
        self._flushed_at = time.monotonic()
        self._failed = False

    def __call__(self, step: int, values: Mapping[str, float]) -> None:
        if self.run_id is None or self._failed:
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._pending += [Metric(f"{self.prefix}{k}", float(v), now, int(step)) for k, v in values.items()
                          if math.isfinite(float(v))]
        if len(self._pending) >= FLUSH_EVERY or time.monotonic() - self._flushed_at >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        if not self._pending or self.run_id is None or self._failed:
            return
        pending, self._pending = self._pending, []
        self._flushed_at = time.monotonic()
        try:
            import mlflow

            client = mlflow.MlflowClient()
            for start in range(0, len(pending), 1000):
                client.log_batch(self.run_id, metrics=pending[start:start + 1000])
        except Exception as exc:  # a progress curve must not stop the selection
            self._failed = True
            log.warning("could not log %s* step metrics to MLflow run %s (no more tried): %s", self.prefix,
                        self.run_id, exc)
