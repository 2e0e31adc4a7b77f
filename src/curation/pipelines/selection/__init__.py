from curation.pipelines.selection.pipeline import create_pipeline

__all__ = ["create_pipeline"]
