from curation.pipelines.metarater.pipeline import create_pipeline

__all__ = ["create_pipeline"]
