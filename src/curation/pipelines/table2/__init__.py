from curation.pipelines.table2.pipeline import create_pipeline

__all__ = ["create_pipeline"]
