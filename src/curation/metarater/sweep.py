"""A resumable sweep of proxy trainings (Meta-rater Alg. 1, steps 1-5 per weight vector).

Each proxy's result is one JSON file written atomically under ``directory``:
a re-run skips every proxy whose file says ``ok``, so a killed sweep resumes
without retraining; a proxy that raises is recorded as ``failed`` with its
error and the sweep goes on, leaving the other results intact.
"""

from __future__ import annotations

import json
import logging
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from curation.cache import atomic_write_text

log = logging.getLogger(__name__)


@dataclass
class ProxyResult:
    proxy_id: int
    weights: list[float]
    status: str  # ok | failed
    val_loss: float | None = None
    seconds: float = 0.0
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


TrainFn = Callable[[int, np.ndarray], dict[str, Any]]  # (proxy_id, weights) -> {"val_loss": float, ...}


class ProxySweep:
    def __init__(self, directory: str | Path, weights: np.ndarray) -> None:
        self.directory = Path(directory)
        self.weights = np.asarray(weights, dtype="float64")

    def path(self, proxy_id: int) -> Path:
        return self.directory / f"proxy_{proxy_id:05d}.json"

    def load(self, proxy_id: int) -> ProxyResult | None:
        path = self.path(proxy_id)
        if not path.exists():
            return None
        return ProxyResult(**json.loads(path.read_text()))

    def _save(self, result: ProxyResult) -> None:
        atomic_write_text(self.path(result.proxy_id), json.dumps(asdict(result)))

    def run(self, train: TrainFn, proxy_ids: Iterable[int] | None = None, *, retry_failed: bool = False,
            progress: Callable[[ProxyResult], None] | None = None) -> list[ProxyResult]:
        """Train every proxy in ``proxy_ids`` (default: all) that has no ``ok`` result yet."""
        results = []
        for i in (range(len(self.weights)) if proxy_ids is None else proxy_ids):
            done = self.load(i)
            if done is not None and (done.status == "ok" or (done.status == "failed" and not retry_failed)):
                results.append(done)
                continue
            w = self.weights[i]
            started = time.perf_counter()
            try:
                out = dict(train(i, w))
                loss = float(out.pop("val_loss"))
                if not np.isfinite(loss):
                    raise FloatingPointError(f"validation loss is {loss}")
                result = ProxyResult(i, w.tolist(), "ok", loss, time.perf_counter() - started, extra=out)
            except Exception as exc:  # recorded, reported, and the sweep goes on
                log.error("proxy %d failed: %s", i, exc)
                result = ProxyResult(i, w.tolist(), "failed", None, time.perf_counter() - started,
                                     error="".join(traceback.format_exception_only(exc)).strip())
            self._save(result)
            if progress is not None:
                progress(result)
            results.append(result)
        return results

    def collect(self) -> tuple[np.ndarray, np.ndarray, list[ProxyResult]]:
        """(weights, losses) of the ``ok`` proxies, and every result found on disk."""
        found = [r for r in (self.load(i) for i in range(len(self.weights))) if r is not None]
        ok = [r for r in found if r.status == "ok"]
        w = np.array([r.weights for r in ok]).reshape(len(ok), self.weights.shape[1])
        return w, np.array([r.val_loss for r in ok], dtype="float64"), found
