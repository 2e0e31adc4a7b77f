"""Kedro datasets of the project (Kedro glue, not algorithm core)."""

from curation.datasets.atomic import AtomicDataset
from curation.datasets.corpus import CorpusShardsDataset
from curation.datasets.folder import WorkFolderDataset
from curation.datasets.lm import LMCheckpoint, LMCheckpointDataset, PackedTokensDataset, TokenizerDataset
from curation.datasets.numpy_array import NpyDataset
from curation.datasets.sharded import ShardedDataset

__all__ = [
    "AtomicDataset",
    "CorpusShardsDataset",
    "LMCheckpoint",
    "LMCheckpointDataset",
    "NpyDataset",
    "PackedTokensDataset",
    "ShardedDataset",
    "TokenizerDataset",
    "WorkFolderDataset",
]
