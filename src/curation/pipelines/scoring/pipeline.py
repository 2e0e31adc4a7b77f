"""scoring: documents -> embeddings -> rater scores and the merged 0-15 quality (all sharded)."""

from kedro.pipeline import Node, Pipeline

from curation.nodes.scoring import embed_documents, plot_scores, score_documents


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                embed_documents,
                inputs=["documents@shards", "params:embedding", "params:cache", "params:data", "params:run"],
                outputs=["embeddings@shards", "embedding_metrics"],
                name="embed_documents_node",
            ),
            Node(
                score_documents,
                inputs=["documents@shards", "embeddings@shards", "params:scoring", "params:cache", "params:data",
                        "params:run", "params:embedding"],
                outputs=["scores@shards", "scoring_metrics", "quality_share_table", "rater_models"],
                name="score_documents_node",
            ),
            Node(
                plot_scores,
                inputs=["scores@shards", "documents@shards", "quality_share_table", "params:embedding"],
                outputs=["rater_correlation_plot", "quality_distribution_plot", "token_length_plot"],
                name="plot_scores_node",
            ),
        ]
    )
