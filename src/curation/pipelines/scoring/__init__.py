from curation.pipelines.scoring.pipeline import create_pipeline

__all__ = ["create_pipeline"]
