"""A Kedro hook that records every pipeline run as one MLflow run.

What a run gets, by the name of a node output:

``*_metrics``  dict of numbers -> metrics ``<stage>/<key>`` (``ingest_metrics`` -> ``ingest/rows_kept``)
``*_history``  DataFrame with a ``step`` column -> one metric series per column, ``<stage>/<column>``
``*_plot``     matplotlib Figure -> ``plots/<file>.png`` artifact
``*_plots``    dict of name -> Figure -> ``plots/<name>/<key>.png`` artifacts
``*_table``    DataFrame -> ``tables/<file>.csv`` artifact
``*_markdown`` str -> ``reports/<file>.md`` artifact

``<file>`` is the name of the file the catalog writes (``pruning_plot`` -> ``plots/quality_before_after_pruning.png``,
as in ``data/08_reporting/<namespace>/``), or the output's name when it has no file; the tag
``curation.artifacts`` maps each output to its artifact (:func:`artifact_of` reads it, older runs included).

The stage (:mod:`curation.tracking.metric_names`) groups a run page's charts; node timings are
``time/<node>``, the run's ``time/pipeline_seconds``, its disk figures ``disk/...``.
Params: the whole composed config, flattened (``data.max_docs``). The run is
named after what ran (:mod:`curation.tracking.naming`); the corpus and each
pipeline's free inputs are logged as MLflow dataset inputs (name, content
digest, row count); at the end the run's summary (:mod:`curation.tracking.summary`)
is printed and stored as the run's description. Under a
Hydra sweep the run is a child of the sweep's parent run
(``tracking.parent_run_id``). We use a small hook rather than kedro-mlflow:
kedro-mlflow 2.0.3 needs ``nested: False`` under Hydra sweeps and its own
``mlflow.yml``, i.e. a second place for settings that ``conf/`` already holds.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from numbers import Number
from pathlib import Path
from typing import Any

from kedro.framework.hooks import hook_impl

from curation.configuration import COMPOSED_KEY
from curation.paths import project_root
from curation.tracking.metric_names import ARTIFACTS_TAG, PIPELINE_SECONDS, node_seconds, staged
from curation.tracking.naming import overrides_from, run_name
from curation.tracking.store import params_for_mlflow, parent_run_from_env, setup_experiment
from curation.tracking.summary import NOTE_TAG, RunRecord, print_summary, relative, to_markdown

log = logging.getLogger(__name__)

# Outputs that are figures, tables or numbers (MLflow holds them); the rest are data a user opens.
_NOT_DATA = ("_plot", "_plots", "_table", "_metrics", "_history")
_SAMPLE_ROWS = 4096  # arrays above _FULL_HASH_BYTES are fingerprinted on this many evenly spaced rows
_FULL_HASH_BYTES = 256 * 2**20


def _finite(items: Any) -> list[tuple[str, float]]:
    return [(str(k), float(v)) for k, v in items
            if isinstance(v, Number) and not isinstance(v, bool) and math.isfinite(float(v))]


def _base_name(dataset_name: str) -> str:
    """``ns.scores@shards`` -> ``scores``: without the namespace and the transcoding suffix."""
    return dataset_name.rsplit(".", 1)[-1].split("@", 1)[0]


def _filepath(catalog: Any, name: str) -> str | None:
    try:
        dataset = catalog[name]
    except Exception:  # not in the catalog: a MemoryDataset made on the fly
        return None
    path = getattr(dataset, "_filepath", None) or getattr(dataset, "_path", None)  # file, or a sharded folder
    if path is None:
        try:
            described = dataset._describe()
            path = described.get("filepath") or described.get("path")
        except Exception:
            path = None
    return None if path is None else str(path)


def dataset_entity(name: str, data: Any, source: str | None) -> Any:
    """An MLflow ``Dataset`` for a DataFrame or array: a content digest, the row count and the columns.

    DataFrames are hashed on ``id`` and ``text`` when they have them (as the result cache
    keys are), else on every column; arrays on their bytes (sampled rows above 256 MiB).
    """
    import hashlib

    import numpy as np
    import pandas as pd
    from mlflow.entities import Dataset

    from curation.cache import array_digest, frame_fingerprint

    profile: dict[str, Any] = {}
    if isinstance(data, pd.DataFrame):
        columns = [c for c in ("id", "text") if c in data.columns] or list(data.columns)
        try:
            digest = frame_fingerprint(data, columns)
        except TypeError:  # unhashable cells (lists): hash their text form
            digest = frame_fingerprint(data[columns].astype(str), columns)
        profile = {"num_rows": len(data), "columns": [str(c) for c in data.columns]}
    elif isinstance(data, np.ndarray):
        sampled = data.nbytes > _FULL_HASH_BYTES and data.ndim >= 1
        rows = data[np.linspace(0, len(data) - 1, _SAMPLE_ROWS).astype(np.int64)] if sampled else data
        digest = hashlib.sha256((array_digest(rows) + str(data.shape) + str(data.dtype)).encode()).hexdigest()
        profile = {"num_rows": int(data.shape[0]) if data.ndim else 1, "shape": list(data.shape),
                   "dtype": str(data.dtype), **({"digest_of": f"{_SAMPLE_ROWS} sampled rows"} if sampled else {})}
    elif hasattr(data, "manifest") and hasattr(data, "fingerprint"):  # a sharded dataset (curation.shards)
        manifest = data.manifest
        digest = str(data.fingerprint)
        profile = {"num_rows": int(manifest.rows), "shards": len(manifest.shards), "columns": list(manifest.schema)}
        source = source or str(getattr(data, "root", name))
    else:
        return None
    return Dataset(name=name, digest=digest[:16], source_type="local",
                   source=json.dumps({"uri": source or name}), profile=json.dumps(profile))


_OPEN: list["MlflowTrackingHook"] = []  # hooks of this process with an MLflow run open


def abort_open_runs(status: str = "KILLED") -> list[str]:
    """End every open run of this process with ``status`` (an interrupted or failed command, on its way out:
    :mod:`curation.interrupts`), without the summary; the run ids closed."""
    closed = []
    for hook in list(_OPEN):
        run_id = hook.abort(status)
        if run_id:
            closed.append(run_id)
    return closed


def run_record_path(root: Path, namespace: str) -> Path:
    """``data/.locks/<namespace>.run``: the MLflow run a live run of the namespace has open (beside its lock)."""
    from curation.namespace_lock import lock_path

    return lock_path(root, namespace).with_suffix(".run")


MAX_FILES_LOOKED_AT = 50_000  # the namespace's files read for their modification time; more: the newest found so far


def last_sign_of_life(run: Any, root: Path, namespace: str) -> int:
    """When a run killed without a word (SIGKILL, power loss) was last alive, in ms: its newest metric's
    timestamp or the newest file of its namespace (under every data layer, staging included), whichever is
    later, and never before its start. Closing it "now" recorded the moment the next run took over as its
    end, hours late after a night (issue #52)."""
    times = [int(run.info.start_time or 0)]
    times += [int(m.timestamp) for m in getattr(run.data, "_metric_objs", []) if m.timestamp]
    data = Path(root) / "data"
    seen = 0
    folders = [f for layer in sorted(data.glob("0*_*")) for f in (layer / namespace, layer / ".staging" / namespace)]
    for folder in folders:
        if not folder.is_dir():
            continue
        for dirpath, _, files in os.walk(folder):
            for name in files:
                seen += 1
                if seen > MAX_FILES_LOOKED_AT:
                    return max(times)
                try:
                    times.append(int(os.stat(os.path.join(dirpath, name)).st_mtime * 1000))
                except OSError:
                    continue
    return max(times)


def close_orphan_run(root: Path, namespace: str) -> str | None:
    """A run of ``namespace`` that was killed (SIGKILL, power loss) left its MLflow run RUNNING and its record
    beside the lock; the next run, holding the lock now, closes that run as KILLED. The run id, or None."""
    path = run_record_path(root, namespace)
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
        import mlflow

        from curation.tracking.store import prepare_store

        prepare_store(record["tracking_uri"])  # not MLflow's own open first: it would migrate without the lock
        client = mlflow.MlflowClient(tracking_uri=record["tracking_uri"])
        run = client.get_run(record["run_id"])
        if run.info.status == "RUNNING":
            end = last_sign_of_life(run, root, namespace)
            client.set_terminated(record["run_id"], status="KILLED", end_time=end)
            client.set_tag(record["run_id"], "curation.end_time", "estimated: the last metric or file the killed "
                           "run wrote")
            log.warning("MLflow run %s of an earlier run of namespace %r (pid %s) was left RUNNING when that run was "
                        "killed: recorded KILLED, ended at its last sign of life (%s UTC)", record["run_id"], namespace,
                        record.get("pid"), time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(end / 1000)))
            return str(record["run_id"])
    except Exception as exc:  # the orphan's store may be gone: say so, do not fail this run
        log.warning("could not close the MLflow run recorded in %s: %s", path, exc)
    finally:
        path.unlink(missing_ok=True)
    return None


class MlflowTrackingHook:
    def __init__(self) -> None:
        self._context = None
        self._lock: Any = None  # ExitStack holding this run's namespace lock
        self._reset()

    def _reset(self) -> None:
        # Hook objects live as long as the process: a multirun reuses this one
        # across jobs, so everything run-specific is cleared per pipeline run.
        self._run_id: str | None = None
        self._started = 0.0
        self._owns_run = False
        self._record: RunRecord | None = None
        self._free_inputs: set[str] = set()
        self._logged_inputs: set[str] = set()
        self._catalog: Any = None
        self._output_paths: list[str] = []
        self._node_started: dict[str, float] = {}
        self._figure_files: dict[str, Path] = {}  # figure outputs logged once their dataset wrote the PNG
        self._artifacts: dict[str, str] = {}  # output name -> its artifact path (the tag ARTIFACTS_TAG)
        record_file = getattr(self, "_record_file", None)
        if record_file is not None:
            record_file.unlink(missing_ok=True)
        self._record_file: Path | None = None
        if self in _OPEN:
            _OPEN.remove(self)

    def abort(self, status: str) -> str | None:
        """End this hook's open run with ``status`` (no summary), release the namespace; the run id."""
        run_id = self._run_id if self._owns_run else None
        if run_id is not None:
            import mlflow

            try:
                mlflow.MlflowClient().log_metric(run_id, PIPELINE_SECONDS, time.perf_counter() - self._started)
                active = mlflow.active_run()
                if active is not None and active.info.run_id == run_id:
                    mlflow.end_run(status=status)  # pops it, so MLflow's exit handler cannot close it FINISHED
                else:
                    mlflow.MlflowClient().set_terminated(run_id, status=status)
            except Exception as exc:  # noqa: BLE001
                log.warning("could not record MLflow run %s as %s: %s", run_id, status, exc)
        self._release_lock()
        self._reset()
        return run_id

    @hook_impl
    def after_context_created(self, context: Any) -> None:
        self._context = context

    def _root(self) -> Path:
        return project_root() if self._context is None else Path(self._context.project_path)

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline: Any, catalog: Any) -> None:
        import mlflow

        from contextlib import ExitStack

        from curation.namespace_lock import namespace_lock

        self._release_lock()
        self._reset()
        self._started = time.perf_counter()
        params = self._context.params if self._context is not None else {}
        tracking = params.get("tracking") or {}
        names = [n or "__default__" for n in (run_params.get("pipeline_names")
                                              or [run_params.get("pipeline_name") or "__default__"])]
        root = self._root()
        # One writer per namespace (``kedro run``; ``curate`` already holds it: re-entrant), taken before
        # the MLflow run exists, so a busy namespace leaves no run behind.
        run_cfg = params.get("run") or {}
        lock = ExitStack()
        lock.enter_context(namespace_lock(root, str(run_cfg.get("namespace") or "default"),
                                          wait=bool(run_cfg.get("wait_for_lock"))))
        self._lock = lock
        close_orphan_run(root, str(run_cfg.get("namespace") or "default"))
        self._catalog = catalog
        self._free_inputs = {n for n in pipeline.inputs() if not n.startswith("params:") and n != "parameters"}
        outputs = {}
        for name in sorted(pipeline.outputs()):
            path = None if _base_name(name).endswith(_NOT_DATA) else _filepath(catalog, name)
            if path:
                outputs[_base_name(name)] = relative(path, root)  # selected_documents@shards -> selected_documents
        figures = sorted({str(Path(relative(p, root)).parent) for n in pipeline.outputs()
                          if _base_name(n).endswith(("_plot", "_plots")) and (p := _filepath(catalog, n))})
        if figures:
            outputs["figures"] = ", ".join(figures)
        self._record = RunRecord(pipelines=names, params=params, outputs=outputs)
        # every output with a path (data, figures, tables): what the run's disk figure adds up
        self._output_paths = sorted({p for n in pipeline.outputs() if (p := _filepath(catalog, n))})
        if not tracking.get("enabled", True):
            return
        experiment_id = setup_experiment(tracking, root)
        user_tags = {str(k): str(v) for k, v in (tracking.get("tags") or {}).items()}
        overrides = overrides_from(user_tags, run_params.get("runtime_params"), COMPOSED_KEY)
        name = tracking.get("run_name") or run_name(names, params, overrides, user_tags.get("hydra.job.num"))
        parent = tracking.get("parent_run_id") or parent_run_from_env()
        tags = {
            "kedro.session_id": str(run_params.get("session_id")),
            "kedro.pipelines": ",".join(names),
            "curation.namespace": str((params.get("run") or {}).get("namespace", "default")),
            **user_tags,
        }
        nested = mlflow.active_run() is not None
        run = mlflow.start_run(experiment_id=experiment_id, run_name=name, nested=nested,
                               parent_run_id=parent, tags=tags)
        self._run_id = run.info.run_id
        self._owns_run = True
        _OPEN.append(self)
        self._record_file = run_record_path(root, str(run_cfg.get("namespace") or "default"))
        try:
            self._record_file.write_text(json.dumps({"run_id": self._run_id, "tracking_uri": mlflow.get_tracking_uri(),
                                                     "pid": os.getpid()}))
        except OSError as exc:
            log.warning("could not write %s (a killed run's MLflow record stays RUNNING): %s", self._record_file, exc)
            self._record_file = None
        self._record.run_id, self._record.run_name = self._run_id, run.info.run_name
        self._record.experiment_id, self._record.tracking_uri = experiment_id, mlflow.get_tracking_uri()
        client = mlflow.MlflowClient()
        items = list(params_for_mlflow(params).items())
        from mlflow.entities import Param

        for start in range(0, len(items), 100):
            client.log_batch(self._run_id, params=[Param(k, v) for k, v in items[start:start + 100]])
        log.info("MLflow run %s (%s) in experiment %s (%s)", self._run_id, name, tracking.get("experiment_name"),
                 mlflow.get_tracking_uri())

    def _log_dataset(self, name: str, data: Any, context: str, source: str | None) -> None:
        """Log ``data`` as an MLflow dataset input of the run (once per name); never fails the run."""
        if self._run_id is None or name in self._logged_inputs:
            return
        self._logged_inputs.add(name)
        try:
            import mlflow
            from mlflow.entities import DatasetInput, InputTag

            entity = dataset_entity(name, data, source)
            if entity is not None:
                mlflow.MlflowClient().log_inputs(
                    self._run_id, datasets=[DatasetInput(entity, [InputTag("mlflow.data.context", context)])])
        except Exception as exc:  # a lineage record must not stop the pipeline
            log.warning("could not log dataset %s to MLflow: %s", name, exc)

    @hook_impl
    def after_dataset_loaded(self, dataset_name: str, data: Any, node: Any) -> None:
        if dataset_name in self._free_inputs and self._catalog is not None:
            self._log_dataset(_base_name(dataset_name), data, "input", _filepath(self._catalog, dataset_name))

    @hook_impl
    def before_node_run(self, node: Any, catalog: Any, inputs: dict[str, Any]) -> None:
        self._node_started[node.name] = time.perf_counter()

    @hook_impl
    def after_node_run(self, node: Any, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        started = self._node_started.pop(node.name, None)
        for name, value in outputs.items():
            if self._record is not None and _base_name(name).endswith("_metrics") and isinstance(value, dict):
                self._record.metrics[_base_name(name)] = dict(_finite(value.items()))
        if self._run_id is None:
            return
        raw = [n for n in inputs if _base_name(n) == "raw_documents"]
        documents = next((v for n, v in outputs.items() if _base_name(n) == "documents"), None)
        if raw and documents is not None:
            # The raw shards load lazily; the corpus's fingerprint is that of the documents read from it.
            source = str(((self._record.params if self._record else {}).get("data") or {}).get("path", "corpus"))
            self._log_dataset("corpus", documents, "corpus", source)
        import mlflow
        from mlflow.entities import Metric

        client = mlflow.MlflowClient()
        now = int(time.time() * 1000)
        if started is not None:  # where a run's time goes, node by node (the node itself; saving its outputs follows)
            client.log_metric(self._run_id, node_seconds(node.name), time.perf_counter() - started, now)
        for name, value in outputs.items():
            base = _base_name(name)
            if base.endswith("_metrics") and isinstance(value, dict):
                metrics = [Metric(staged(base, k), v, now, 0) for k, v in _finite(value.items())]
                for start in range(0, len(metrics), 1000):
                    client.log_batch(self._run_id, metrics=metrics[start:start + 1000])
            elif base.endswith("_history") and hasattr(value, "iterrows") and "step" in value:
                metrics = [Metric(staged(base, k), v, now, int(row["step"]))
                           for _, row in value.iterrows() for k, v in _finite(row.items()) if k != "step"]
                for start in range(0, len(metrics), 1000):
                    client.log_batch(self._run_id, metrics=metrics[start:start + 1000])
            elif base.endswith("_plot") and hasattr(value, "savefig"):
                # A figure its dataset saves as a PNG is logged from that file (after_dataset_saved):
                # rendering it a second time for MLflow cost ~0.45 s a figure, ~3.5 s of the default job.
                path = self._png_file(name)
                if path is not None:
                    self._figure_files[name] = path
                else:
                    client.log_figure(self._run_id, value, self._artifact(base, "plots", f"{base}.png"))
            elif base.endswith("_plots") and isinstance(value, dict):
                for key, figure in value.items():
                    if hasattr(figure, "savefig"):
                        client.log_figure(self._run_id, figure, f"plots/{base}/{key}.png")
            elif base.endswith("_table") and hasattr(value, "to_csv"):
                client.log_text(self._run_id, value.to_csv(index=False),
                                self._artifact(base, "tables", self._file_name(name, ".csv") or f"{base}.csv"))
            elif base.endswith("_markdown") and isinstance(value, str):
                client.log_text(self._run_id, value,
                                self._artifact(base, "reports", self._file_name(name, ".md") or f"{base}.md"))

    def _artifact(self, output: str, folder: str, file: str) -> str:
        self._artifacts[output] = f"{folder}/{file}"
        return self._artifacts[output]

    def _file_name(self, name: str, suffix: str) -> str | None:
        """The name of the file the catalog writes output ``name`` to, when it is a ``suffix`` file."""
        path = _filepath(self._catalog, name) if self._catalog is not None else None
        return Path(path).name if path and path.lower().endswith(suffix) else None

    def _png_file(self, name: str) -> Path | None:
        """The local PNG file the catalog saves output ``name`` to, if it is one."""
        path = _filepath(self._catalog, name) if self._catalog is not None else None
        if path is None or "://" in path or not path.lower().endswith(".png"):
            return None
        path = Path(path)
        return path if path.is_absolute() else self._root() / path

    @hook_impl
    def after_dataset_saved(self, dataset_name: str, data: Any, node: Any) -> None:
        path = self._figure_files.pop(dataset_name, None)
        if path is None or self._run_id is None:
            return
        import mlflow

        client = mlflow.MlflowClient()
        base = _base_name(dataset_name)
        if not path.is_file():  # not where the catalog said: render it as before
            client.log_figure(self._run_id, data, self._artifact(base, "plots", f"{base}.png"))
            return
        client.log_artifact(self._run_id, str(path), "plots")  # named as on disk
        self._artifact(base, "plots", path.name)

    def _end(self, status: str) -> None:
        record = self._record
        seconds = time.perf_counter() - self._started
        if record is not None:
            record.seconds, record.status = seconds, status
            if status == "FINISHED":
                self._finish_disk(record)
        if self._run_id is not None and self._owns_run:
            import mlflow

            client = mlflow.MlflowClient()
            client.log_metric(self._run_id, PIPELINE_SECONDS, seconds)
            if record is not None and record.disk is not None:
                for key, value in record.disk.as_metrics().items():
                    client.log_metric(self._run_id, key, value)
            if record is not None:
                try:
                    if self._artifacts:  # where each output's artifact is, for readers (artifact_of)
                        client.set_tag(self._run_id, ARTIFACTS_TAG, json.dumps(self._artifacts, sort_keys=True))
                    client.set_tag(self._run_id, NOTE_TAG, to_markdown(record))
                except Exception as exc:  # the description is a convenience, the run is what matters
                    log.warning("could not store the run summary in MLflow: %s", exc)
            active = mlflow.active_run()
            if active is not None and active.info.run_id == self._run_id:
                mlflow.end_run(status=status)
            else:
                client.set_terminated(self._run_id, status=status)
        if record is not None:
            try:
                print_summary(record)
            except Exception as exc:
                log.warning("could not print the run summary: %s", exc)
        self._release_lock()
        self._reset()

    def _finish_disk(self, record: RunRecord) -> None:
        """A successful run: its staging folders go; what its outputs take on disk is measured."""
        from curation.cache import cache_dir
        from curation.shards.work import remove_staging
        from curation.tracking.summary import disk_usage

        root = self._root()
        namespace = str((record.params.get("run") or {}).get("namespace") or "default")
        try:
            remove_staging(root, namespace)
        except OSError as exc:
            log.warning("could not remove the staging folders of namespace %r: %s", namespace, exc)
        try:
            cache = record.params.get("cache") or {}
            record.disk = disk_usage(
                [p if Path(p).exists() else str(root / p) for p in self._output_paths],
                cache_dir(cache) if cache.get("enabled", True) and "dir" in cache else None,
                where=f"data/*/{namespace}")
            if record.disk.cache_dir:
                record.disk.cache_dir = relative(record.disk.cache_dir, root)
        except Exception as exc:  # a figure in the summary must not fail the run
            log.warning("could not measure the disk used by the run: %s", exc)

    def _release_lock(self) -> None:
        lock, self._lock = getattr(self, "_lock", None), None
        if lock is not None:
            lock.close()

    @hook_impl
    def after_pipeline_run(self, run_params: dict[str, Any], pipeline: Any, catalog: Any) -> None:
        self._end("FINISHED")

    @hook_impl
    def on_pipeline_error(self, error: Exception, run_params: dict[str, Any], pipeline: Any, catalog: Any) -> None:
        self._end("FAILED")
