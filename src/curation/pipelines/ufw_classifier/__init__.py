from curation.pipelines.ufw_classifier.pipeline import create_pipeline

__all__ = ["create_pipeline"]
