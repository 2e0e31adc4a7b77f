"""curation: select pre-training data for large language models.

Layers (see README): ``curation.<domain>`` holds the algorithm cores (no Kedro,
MLflow or Hydra imports) and the shared services (``curation.cache``: cache
folder, digests, atomic writes; ``curation.selection.corpus``: budgets and
corpus picking; ``curation.lm.cached`` / ``curation.evaluation.runs``: cached
training and evaluation runs); ``curation.nodes`` adapts them to Kedro (no node
imports another); ``curation.pipelines`` wires nodes; ``curation.tracking`` and
``curation.datasets`` are the MLflow and Kedro-I/O glue; ``curation.hydra_app``
is the ``curate`` entry point. ``tests/foundation/test_import_contract.py``
keeps the layers apart.
"""

__version__ = "0.1.0"
