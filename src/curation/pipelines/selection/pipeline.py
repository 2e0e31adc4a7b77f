"""selection: pruned corpus -> the selected subset, its diagnostics and figures."""

from kedro.pipeline import Node, Pipeline

from curation.nodes.selection import describe_selection, select_documents


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                select_documents,
                inputs=["pruned_scores", "pruned_embeddings", "documents@frame", "params:selection", "params:budget",
                        "params:run"],
                outputs=["selected_ids", "selected_documents", "selection_history", "selection_run_metrics"],
                name="select_documents_node",
            ),
            Node(
                describe_selection,
                inputs=["selected_ids", "pruned_scores", "pruned_embeddings", "document_stats", "selection_history",
                        "params:selection", "params:budget", "params:run"],
                outputs=["selection_metrics", "selection_clusters_table", "selection_trajectory_plot",
                         "selection_map_plot", "selection_clusters_plot"],
                name="describe_selection_node",
            ),
        ]
    )
