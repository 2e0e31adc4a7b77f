"""Nothing phones home: the usage telemetry of the libraries the project runs is off by default.

Kedro's ``kedro-telemetry`` plugin sends every ``kedro`` command and every session's project statistics to Heap
(heapanalytics.com), MLflow 3 sends usage events from a thread started at ``import mlflow``, and Hugging Face Hub
and Ray have their own. Each entry point of the project (``curate``: :mod:`curation.hydra_app`; ``kedro run`` and
the other ``kedro`` commands in the project: :mod:`curation.cli`; a ``KedroSession`` made from Python:
:mod:`curation.settings`; ``curate-megatron``: :mod:`curation.pretraining.launch`) calls :func:`disable` at import,
before Kedro, MLflow or the Hub are loaded, so that none of them sends anything or opens a connection for it.
A variable the user has set is left as it is (``setdefault``); the project's ``.telemetry`` file (``consent:
false``, Kedro's own opt-out, read from the project root) covers ``kedro`` commands that load no project code.
"""

from __future__ import annotations

import os

OFF = {
    "KEDRO_DISABLE_TELEMETRY": "true",  # kedro-telemetry (any non-empty value)
    "DO_NOT_TRACK": "true",  # the cross-tool switch: kedro-telemetry, MLflow ("true"), huggingface_hub
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "RAY_USAGE_STATS_ENABLED": "0",  # data.engine=ray
}


def disable() -> None:
    """Switch the telemetry of Kedro, MLflow, Hugging Face Hub and Ray off in this process and the processes it
    starts, unless the user has set the variable."""
    for name, value in OFF.items():
        os.environ.setdefault(name, value)
