"""ingest: raw shards -> validated documents (sharded) -> document statistics."""

from kedro.pipeline import Node, Pipeline

from curation.nodes.ingest import compute_document_statistics, ingest_documents


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                ingest_documents,
                inputs=["raw_documents", "params:data", "params:run", "params:eval"],
                outputs=["documents@shards", "rejected_documents", "ingest_metrics"],
                name="ingest_documents_node",
            ),
            Node(
                compute_document_statistics,
                inputs=["documents@shards", "params:data"],
                outputs=["document_stats", "source_stats_table", "document_stats_metrics", "document_stats_plot"],
                name="compute_document_statistics_node",
            ),
        ]
    )
