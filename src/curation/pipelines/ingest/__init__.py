from curation.pipelines.ingest.pipeline import create_pipeline

__all__ = ["create_pipeline"]
