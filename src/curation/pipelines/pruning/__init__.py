from curation.pipelines.pruning.pipeline import create_pipeline

__all__ = ["create_pipeline"]
