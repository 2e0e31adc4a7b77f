"""pruning: scores + embeddings -> the corpus without its low-quality tail, shard by shard."""

from kedro.pipeline import Node, Pipeline

from curation.nodes.pruning import prune_documents


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                prune_documents,
                inputs=["scores@shards", "embeddings@shards", "params:pruning", "params:data", "params:cache",
                        "params:run"],
                outputs=["pruned_scores@shards", "pruned_embeddings@shards", "pruning_metrics", "pruning_table",
                         "pruning_plot"],
                name="prune_documents_node",
            )
        ]
    )
