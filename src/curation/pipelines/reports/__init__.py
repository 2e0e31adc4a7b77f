from curation.pipelines.reports.pipeline import create_pipeline

__all__ = ["create_pipeline"]
