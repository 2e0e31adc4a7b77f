"""Typed schemas of the Hydra config groups (Hydra structured configs).

Plain dataclasses, registered in Hydra's ``ConfigStore`` by
:func:`register_configs`; each YAML option lists its schema first in
``defaults:`` so a misspelt key or a wrong-typed override fails at compose
time (``data.max_docs=lots`` is refused).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class DataConfig:
    path: str = "data/01_raw/corpus"  # file, folder or glob; relative to the project root, or any fsspec URL
    format: str = "auto"  # auto | parquet | jsonl (jsonl, jsonl.gz, jsonl.zst)
    id_column: str = "id"  # unique document id column
    text_column: str = "text"  # text column (FineWeb/DCLM convention: "text")
    max_docs: Optional[int] = None  # keep at most this many valid documents (None = all)
    max_chars: Optional[int] = 1_000_000  # longer documents are dropped and counted (None = no limit)
    keep_columns: list[str] = field(default_factory=lambda: ["source", "url", "quality_label", "extra"])
    engine: str = "local"  # local (one shard at a time) | ray (one Ray task per shard)
    ray_address: Optional[str] = None  # None = a local Ray instance; "auto" or "ray://host:10001" = a cluster
    dedup_buckets: int = 16  # hash buckets of the cross-shard duplicate-id pass (memory ~ ids / buckets)


@dataclass
class TrackingConfig:
    enabled: bool = True  # False: run without MLflow
    uri: str = "sqlite:///mlruns/mlflow.db"  # relative sqlite paths resolve against the project root
    artifact_location: str = "mlruns/artifacts"  # relative paths resolve against the project root
    experiment_name: str = "curation"
    run_name: Optional[str] = None  # None: "<pipelines> <timestamp>"
    parent_run_id: Optional[str] = None  # set by the sweep callback for multirun jobs
    tags: dict[str, Any] = field(default_factory=dict)  # extra tags on every run


@dataclass
class RunConfig:
    namespace: str = "default"  # sub-folder of each data layer for this run's outputs
    input_namespace: Optional[str] = None  # where a sweep job reads the datasets it does not produce (None = namespace)
    seed: int = 0  # global seed for every random choice of a run
    torch_threads: Optional[int] = None  # torch intra-op threads for the run (None = torch's default, one per core)


_REGISTERED = False


def register_configs() -> None:
    """Register schemas and the ``${project_root:}`` resolver once per process."""
    global _REGISTERED
    if _REGISTERED:
        return
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from curation.paths import project_root

    OmegaConf.register_new_resolver("project_root", lambda: str(project_root()), replace=True)
    cs = ConfigStore.instance()
    cs.store(group="data", name="_schema", node=DataConfig)
    cs.store(group="tracking", name="_schema", node=TrackingConfig)
    cs.store(group="run", name="_schema", node=RunConfig)
    _REGISTERED = True
