"""Document ingestion core: validation with counted drops, and document statistics.

:mod:`.ingest` runs validation, language screening, decontamination and deduplication on shards
(:mod:`.textdedup` holds the text passes; the algorithms are in :mod:`curation.dedup`).

Plain pandas; no Kedro, MLflow or Hydra imports.
"""

from curation.data.stats import document_statistics, source_statistics
from curation.data.validate import ValidationConfig, ValidationReport, validate_documents

__all__ = [
    "ValidationConfig",
    "ValidationReport",
    "validate_documents",
    "document_statistics",
    "source_statistics",
]
