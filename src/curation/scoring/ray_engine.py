"""Apply fitted text raters as a Ray Data ``map_batches`` job over parquet shards.

``scoring.engine=ray`` (issue 3, "Scale-out"). The raters are fitted in the
driver as with the in-process engine (training sets are small); this module
only *applies* the ones that are a per-document map of the text:

- the fastText raters (DCLM and Ultra-FineWeb recipes),
- the DSIR importance raters (hashed n-gram counts dotted with a fitted log-ratio),
- the 11 RedPajama signals (stateless).

The Edu and Wiki raters read the sentence embeddings, which the embedding node
has already computed, so they stay in the driver.

The job, top-down:

1. the fitted raters are written to ``<work>/models`` (``persistence.save_raters``:
   fastText ``.bin`` files, DSIR ``.npz``); each actor loads them once;
2. the documents (``id``, ``text``) are read from parquet: ``input_path`` or
   shards the driver writes to ``<work>/input``;
3. ``map_batches`` with a callable class on a fixed actor pool
   (``ActorPoolStrategy(size=actors)``), each actor reserving a *fraction* of a
   CPU (``actor_num_cpus``): with Ray's default of one CPU per actor, two
   actors on two cores leave no CPU for the read tasks and the job waits
   forever without an error. ``check_cpu_budget`` refuses such a setting;
4. ``write_parquet`` into a folder that did not exist before, renamed onto
   ``output_path`` afterwards: ``write_parquet`` appends to an existing folder,
   so writing a re-run into the same folder would double every row;
5. the result is joined back to the documents by ``id``: every id must come
   back exactly once (``align_by_id`` raises otherwise; nothing is lost or
   duplicated silently).

Ray is an optional extra (``pip install -e '.[ray]'``) and is imported lazily.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

RAY_EXTRA_HINT = "pip install -e '.[ray]'  (the `ray` extra of curation: ray[data]==2.60.0)"


@dataclass
class RayConfig:
    """Knobs of the Ray Data scoring job (``scoring.ray``)."""

    # null: start a local Ray instance for the job; "auto" or "ray://<head>:10001": join a running cluster
    address: str | None = None
    # CPUs of the local instance (null = every core); ignored when joining a cluster
    num_cpus: int | None = None
    # fixed size of the scoring actor pool (each actor loads every model once)
    actors: int = 2
    # CPUs reserved per actor; fractional so read/write tasks keep a CPU (1.0 x 2 actors on 2 cores hangs)
    actor_num_cpus: float = 0.5
    # documents per map_batches call
    batch_size: int = 1024
    # parquet file, folder or glob with `id` and `text` of exactly the documents being scored;
    # null = the driver writes them to <work_dir>/input (a cluster needs a path all nodes can read)
    input_path: str | None = None
    # documents per parquet shard when the driver writes the input
    rows_per_shard: int = 20000
    # split the input into this many blocks so every actor gets work; null = Ray's read blocks
    # (~128 MiB each: a small input is a single block, i.e. a single busy actor)
    repartition: int | None = None
    # models, driver-written input and temporary output (null = a fresh temp folder, deleted after);
    # on a multi-node cluster a shared path every node can read and write
    work_dir: str | None = None
    # keep the job's scored parquet here (a local or shared-mount folder, replaced whole by a
    # rename on each run); null = temporary, deleted after the join
    output_path: str | None = None
    # Ray Data progress bars on stderr
    progress_bars: bool = False


def import_ray():
    """``ray`` and ``ray.data``, or an ImportError that names the extra to install."""
    try:
        import ray
        import ray.data
    except ImportError as err:
        raise ImportError(f"scoring.engine=ray needs Ray Data, which is not installed: {RAY_EXTRA_HINT}") from err
    return ray


class ScoreBatch:
    """The map_batches callable class: loads the raters once per actor, scores pandas batches."""

    def __init__(self, models_dir: str, rater_names: list[str], signals: bool):
        from curation.scoring.persistence import load_raters
        from curation.scoring.redpajama import RedPajamaSignals

        self.raters = load_raters(models_dir, rater_names) if rater_names else {}
        self.signals = RedPajamaSignals() if signals else None

    def __call__(self, batch: pd.DataFrame) -> pd.DataFrame:
        texts = batch["text"].tolist()
        out: dict[str, Any] = {"id": batch["id"].to_numpy()}
        for name, rater in self.raters.items():
            out[name] = rater.score(texts)  # (batch,) float64, NaN where nothing to score
        if self.signals is not None:
            frame = self.signals.score_frame(texts)
            out.update({col: frame[col].to_numpy() for col in frame.columns})
        return pd.DataFrame(out)


def check_cpu_budget(cfg: RayConfig, cluster_cpus: float) -> None:
    """Refuse an actor pool that leaves less than one CPU for the read and write tasks."""
    reserved = cfg.actors * cfg.actor_num_cpus
    if cfg.actors < 1 or cfg.actor_num_cpus <= 0:
        raise ValueError(f"scoring.ray: actors ({cfg.actors}) and actor_num_cpus ({cfg.actor_num_cpus}) must be > 0")
    if reserved > cluster_cpus - 1:
        raise ValueError(
            f"scoring.ray: {cfg.actors} actors x {cfg.actor_num_cpus} CPU = {reserved} of the cluster's "
            f"{cluster_cpus:g} CPUs leaves less than 1 CPU for the parquet read/write tasks, and Ray Data "
            "would wait for them forever; lower scoring.ray.actor_num_cpus or scoring.ray.actors")


def align_by_id(expected_ids: pd.Series | np.ndarray, returned: pd.DataFrame) -> pd.DataFrame:
    """``returned`` reordered to ``expected_ids``; raises ``ValueError`` unless every id came back exactly once."""
    expected = pd.Index(pd.Series(expected_ids).astype(str))
    if not expected.is_unique:
        raise ValueError("document ids are not unique; the Ray results could not be joined back")
    got = returned["id"].astype(str)
    counts = got.value_counts()
    duplicated = counts[counts > 1]
    missing = expected.difference(pd.Index(counts.index))
    unexpected = pd.Index(counts.index).difference(expected)
    if len(missing) or len(duplicated) or len(unexpected):
        def some(ids) -> str:
            ids = list(ids)
            return f" (e.g. {ids[:3]})" if ids else ""

        raise ValueError(
            f"Ray scoring returned {len(returned)} rows for {len(expected)} documents: "
            f"{len(missing)} id(s) missing{some(missing)}, {len(duplicated)} id(s) returned more than once"
            f"{some(duplicated.index)}, {len(unexpected)} id(s) not among the documents{some(unexpected)}")
    return returned.assign(id=got).set_index("id").loc[expected].reset_index()


def _write_input(documents: pd.DataFrame, folder: Path, rows_per_shard: int) -> list[str]:
    folder.mkdir(parents=True)
    paths = []
    for part, start in enumerate(range(0, max(len(documents), 1), rows_per_shard)):
        path = folder / f"part-{part:05d}.parquet"
        documents.iloc[start:start + rows_per_shard][["id", "text"]].to_parquet(path, index=False)
        paths.append(str(path))
    return paths


def score_with_ray(
    documents: pd.DataFrame,
    raters: Mapping[str, Any],
    cfg: RayConfig | None = None,
    signals: bool = True,
) -> tuple[pd.DataFrame, dict[str, float]]:
    """Scores of ``documents`` (``id``, ``text``) by the fitted ``raters`` and, if ``signals``,
    the 11 RedPajama signals, computed by Ray Data.

    Returns a frame aligned with ``documents`` (``id`` + one column per rater
    name + one per signal) and timings. ``raters`` maps score column -> fitted
    fastText or DSIR rater (``ScoringResult.raters`` entries).
    """
    from curation.cache import replace_directory
    from curation.scoring.persistence import save_raters

    cfg = cfg or RayConfig()
    ray = import_ray()
    started = time.perf_counter()
    owns_work = cfg.work_dir is None
    base = Path(tempfile.mkdtemp(prefix="curation-ray-")) if owns_work else Path(cfg.work_dir)
    work = base / f"job-{uuid.uuid4().hex[:12]}"
    owns_ray = not ray.is_initialized()
    metrics: dict[str, float] = {}
    try:
        save_raters(raters, work / "models")
        if cfg.input_path:
            inputs: str | list[str] = cfg.input_path
        else:
            inputs = _write_input(documents, work / "input", cfg.rows_per_shard)
        if owns_ray:
            ray.init(address=cfg.address, num_cpus=cfg.num_cpus if cfg.address is None else None,
                     include_dashboard=False, log_to_driver=False, configure_logging=False)
        check_cpu_budget(cfg, float(ray.cluster_resources().get("CPU", 0.0)))
        metrics["init_seconds"] = time.perf_counter() - started

        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = cfg.progress_bars
        job_started = time.perf_counter()
        dataset = ray.data.read_parquet(inputs).select_columns(["id", "text"])
        if cfg.repartition:  # Ray 2.60's parquet reader merges small files into one block
            dataset = dataset.repartition(cfg.repartition)
        dataset = (
            dataset.map_batches(
                ScoreBatch,
                fn_constructor_kwargs={"models_dir": str(work / "models"), "rater_names": list(raters),
                                       "signals": signals},
                batch_format="pandas",
                batch_size=cfg.batch_size,
                compute=ray.data.ActorPoolStrategy(size=cfg.actors),
                num_cpus=cfg.actor_num_cpus,
            )
        )
        # a folder that does not exist yet: write_parquet appends to an existing one
        if cfg.output_path:
            final = Path(cfg.output_path)
            final.parent.mkdir(parents=True, exist_ok=True)
            fresh = final.with_name(f".{final.name}.tmp-{uuid.uuid4().hex[:8]}")
        else:
            final = fresh = work / "output"
        try:
            dataset.write_parquet(str(fresh))
            if fresh != final:
                replace_directory(fresh, final)
        finally:
            if fresh != final and fresh.exists():
                shutil.rmtree(fresh)
        metrics["job_seconds"] = time.perf_counter() - job_started
        returned = pd.read_parquet(final)
        scores = align_by_id(documents["id"], returned)
    finally:
        if owns_ray and ray.is_initialized():
            ray.shutdown()
        shutil.rmtree(base if owns_work else work, ignore_errors=True)
    metrics["seconds"] = time.perf_counter() - started
    metrics["docs_per_s"] = len(documents) / max(metrics["job_seconds"], 1e-9)
    return scores, metrics


__all__ = ["RAY_EXTRA_HINT", "RayConfig", "ScoreBatch", "align_by_id", "check_cpu_budget", "import_ray",
           "score_with_ray"]
