from curation.pipelines.decide.pipeline import create_pipeline

__all__ = ["create_pipeline"]
