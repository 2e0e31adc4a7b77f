"""One node three pipelines wire: the corpus's own BPE tokenizer, trained on the ingested documents.

pretrain, verification and ufw_classifier each train one under their own catalog names. A module, not a
folder: Kedro's ``find_pipelines`` takes only the sub-folders of this package as pipelines.
"""

from kedro.pipeline import Node

from curation.nodes.pretrain import train_tokenizer


def tokenizer_node(tokenizer: str, metrics: str, name: str) -> Node:
    """``documents@frame`` -> the catalog entries ``tokenizer`` and ``metrics``, as the node ``name``."""
    return Node(train_tokenizer, inputs=["documents@frame", "params:pretrain", "params:cache"],
                outputs=[tokenizer, metrics], name=name)
