from curation.pipelines.pretrain.pipeline import create_pipeline

__all__ = ["create_pipeline"]
