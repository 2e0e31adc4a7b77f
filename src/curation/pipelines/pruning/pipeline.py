"""pruning: scores + embeddings -> the corpus without its low-quality tail."""

from kedro.pipeline import Node, Pipeline

from curation.nodes.pruning import prune_documents


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                prune_documents,
                inputs=["scores@frame", "embeddings@frame", "params:pruning"],
                outputs=["pruned_scores", "pruned_embeddings", "pruning_metrics", "pruning_table", "pruning_plot"],
                name="prune_documents_node",
            )
        ]
    )
