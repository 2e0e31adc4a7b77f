"""Kedro datasets of the project (Kedro glue, not algorithm core)."""

from curation.datasets.atomic import AtomicDataset
from curation.datasets.corpus import CorpusShardsDataset

__all__ = ["AtomicDataset", "CorpusShardsDataset"]
