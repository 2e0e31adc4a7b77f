"""curation: select pre-training data for large language models.

Layers (see README): ``curation.<domain>`` holds the algorithm cores (no Kedro,
MLflow or Hydra imports); ``curation.nodes`` adapts them to Kedro;
``curation.pipelines`` wires nodes; ``curation.hydra_app`` is the ``curate``
entry point.
"""

__version__ = "0.1.0"
