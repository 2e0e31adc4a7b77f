from curation.pipelines.metarater_proxy.pipeline import create_pipeline

__all__ = ["create_pipeline"]
