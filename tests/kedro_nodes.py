"""Run one named node of a registered pipeline on an in-memory Kedro catalog.

Tests reach nodes through the pipeline that wires them (the import contract forbids importing
``curation.nodes`` from tests), as spaceflights' pipeline tests do with ``only_nodes``.
"""

from __future__ import annotations

from typing import Any

from kedro.io import DataCatalog, MemoryDataset
from kedro.runner import SequentialRunner


def run_node(create_pipeline, node_name: str, inputs: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """Outputs of ``node_name`` (dataset name -> value) given its inputs and ``params:<name>`` values."""
    pipe = create_pipeline().only_nodes(node_name)
    datasets = {name: MemoryDataset(value, copy_mode="assign") for name, value in inputs.items()}
    datasets.update({f"params:{name}": MemoryDataset(value, copy_mode="assign") for name, value in params.items()})
    catalog = DataCatalog(datasets=datasets)
    SequentialRunner().run(pipe, catalog)
    return {name: catalog.load(name) for name in pipe.all_outputs()}
