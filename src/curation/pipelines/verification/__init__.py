from curation.pipelines.verification.pipeline import create_pipeline

__all__ = ["create_pipeline"]
