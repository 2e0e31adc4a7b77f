"""selection: pruned corpus (shards) -> the selected subset (shards), its diagnostics and figures."""

from kedro.pipeline import Node, Pipeline

from curation.nodes.selection import describe_selection, select_documents


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                select_documents,
                inputs=["pruned_scores@shards", "pruned_embeddings@shards", "documents@shards", "params:selection",
                        "params:budget", "params:run", "params:data", "params:cache"],
                outputs=["selected_ids", "selected_documents@shards", "selection_history", "selection_run_metrics"],
                name="select_documents_node",
            ),
            Node(
                describe_selection,
                inputs=["selected_ids", "pruned_scores@shards", "pruned_embeddings@shards", "document_stats",
                        "selection_history", "params:selection", "params:budget", "params:run"],
                outputs=["selection_metrics", "selection_clusters_table", "selection_trajectory_plot",
                         "selection_map_plot", "selection_clusters_plot"],
                name="describe_selection_node",
            ),
        ]
    )
