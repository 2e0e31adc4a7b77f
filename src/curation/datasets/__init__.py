"""Kedro datasets of the project (Kedro glue, not algorithm core)."""

from curation.datasets.atomic import AtomicDataset
from curation.datasets.corpus import CorpusShardsDataset
from curation.datasets.folder import WorkFolderDataset
from curation.datasets.lm import LMCheckpointDataset, PackedTokensDataset, TokenizerDataset
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


def __getattr__(name: str):
    if name == "LMCheckpoint":  # imports torch: on first use (curation.datasets.lm)
        from curation.datasets import lm

        return lm.LMCheckpoint
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
