"""Progress of a selection's step loop, on the console and to whoever else listens.

A selection method reports progress through a plain callback, ``progress(done, total)``, called after each
step (DataMask's policy-gradient steps, greedy's batches, DVRL's iterations). A method that also knows how
well it is doing (DataMask evaluates its joint objective every ``history_every`` steps) hands those values to
the callback's optional ``values(done, total, values)`` method, through :func:`report_values`: callbacks that
are plain functions keep working, and the core needs no second callback threaded through every layer.

:class:`StepBar` is the callback the nodes and the decide picks use: a tqdm bar that moves with the steps,
the objective in its postfix, a log line every few percent (a log file or a non-terminal shows no bar), and
a ``sink`` for the values (the Kedro node logs them as MLflow step metrics: ``curation.tracking.live_metrics``).
No Kedro or MLflow here: the core takes callbacks, the nodes adapt.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Callable, Mapping, Optional

log = logging.getLogger(__name__)

Values = Mapping[str, float]
LOG_LINES = 20  # log lines over a whole run (one every 5% of the steps), besides the first and the last


def report_values(progress: Any, done: int, total: int, values: Values) -> None:
    """Hand ``values`` (e.g. ``{"joint": ...}``) to ``progress.values`` when the callback has that method."""
    hook = getattr(progress, "values", None)
    if callable(hook):
        hook(done, total, values)


def _fmt(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else str(value)


class StepBar:
    """A ``progress(done, total)`` callback with a ``values`` method: a tqdm bar, the latest objective in its
    postfix, a log line every ``total / LOG_LINES`` steps (and at the last), and ``sink(done, values)``
    for every set of values (MLflow in the nodes). ``close()`` (or ``with``) ends the bar and the sink."""

    def __init__(self, desc: str, *, unit: str = "step", sink: Optional[Callable[[int, Values], None]] = None,
                 close_sink: Optional[Callable[[], None]] = None, logger: logging.Logger = log,
                 bar: bool = True) -> None:
        self.desc, self.unit, self.sink, self.close_sink, self.logger = desc, unit, sink, close_sink, logger
        self.show_bar = bar
        self._bar: Any = None  # made at the first report: a method that reports no steps (top-k) draws no bar
        self.done, self.total = 0, 0
        self.latest: dict[str, float] = {}
        self._next_log, self._logged = 0, -1
        self._closed = False

    @property
    def bar(self) -> Any:
        if self._bar is None:
            from tqdm.auto import tqdm

            self._bar = tqdm(desc=self.desc, unit=self.unit, total=self.total or None, disable=not self.show_bar)
        return self._bar

    def __call__(self, done: int, total: int) -> None:
        self.done, self.total = int(done), int(total)
        if self.bar.total != self.total:
            self.bar.total = self.total
            self.bar.refresh()
        # update(), not a refresh per call: tqdm redraws at most every mininterval (0.1 s), so a loop of
        # millisecond steps is not slowed by its bar
        self.bar.update(self.done - self.bar.n)
        if self.total and self.done != self._logged and (self.done >= self._next_log or self.done >= self.total):
            self._logged = self.done
            self._log_line()
            step = max(1, self.total // LOG_LINES)
            self._next_log = (self.done // step + 1) * step

    def values(self, done: int, total: int, values: Values) -> None:
        self.total = int(total)  # the bar, if this makes it, knows its length (no "0step" line)
        self.latest = {k: float(v) for k, v in values.items()}
        self.bar.set_postfix({k: _fmt(v) for k, v in self.latest.items()}, refresh=False)
        if self.sink is not None:
            self.sink(int(done), self.latest)

    def _log_line(self) -> None:
        share = 100.0 * self.done / self.total if self.total else 0.0
        objective = ", ".join(f"{k} {_fmt(v)}" for k, v in self.latest.items())
        self.logger.info("%s: %d/%d %ss (%.0f%%)%s", self.desc, self.done, self.total, self.unit, share,
                         f", {objective}" if objective else "")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        if self.close_sink is not None:
            self.close_sink()

    def __enter__(self) -> "StepBar":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
