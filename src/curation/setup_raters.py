"""The reference raters and the decontamination index of the composed config, built ahead of the first run: what
``scripts/setup.sh`` runs.

Kedro/Hydra glue (it composes ``conf/``), kept out of :mod:`curation.scoring.reference`, whose core builds a
rater from a plain :class:`~curation.scoring.config.ScoringConfig` and knows nothing of the config tree.
"""

from __future__ import annotations

from curation.config_loader import compose_config
from curation.paths import project_root
from curation.scoring import reference
from curation.scoring.config import scoring_config_from_dict


def build_configured_reference(overrides: list[str] | None = None, workers: int = 1) -> dict[str, str]:
    """Build (or find) the reference raters of the composed config (``conf/`` + Hydra ``overrides``):
    what ``scripts/setup.sh`` runs so that the first ``curate`` does not pay for them. Returns
    rater -> artifact folder. ``workers`` > 1: the slowest fastText raters (Ultra-FineWeb first) are trained in ``workers - 1``
    worker processes while this one builds the Edu / Wiki heads (and the embedder they need), DSIR and any
    fastText rater left: the same artifacts (each is made from its own spec, never from another's), built
    side by side."""
    composed = compose_config(project_root() / "conf", list(overrides or []))
    cfg = scoring_config_from_dict(composed["scoring"])
    if cfg.training.source != "reference":
        return {}
    if workers > 1:
        reference.build_side_by_side(cfg, composed["embedding"], workers)
    built = reference.ensure_reference(cfg, composed["embedding"])
    return {name: str(folder) for name, folder in built.folders.items()}


def build_configured_decontamination_index(overrides: list[str] | None = None) -> str | None:
    """Build (or find) the evaluation tasks' n-gram index that ingest's decontamination reads, where ingest reads
    it (:func:`curation.paths.decontamination_index_dir`); its file, or None when ``data.decontaminate`` is off.
    Built here, the first ``curate`` does not pay for it (~5 s)."""
    from curation.data.ingest import dedup_settings
    from curation.paths import decontamination_index_dir

    composed = compose_config(project_root() / "conf", list(overrides or []))
    evaluation = composed.get("eval") or {}
    settings = dedup_settings(composed["data"], tasks=list(evaluation.get("tasks") or ()),
                              data_dir=evaluation.get("data_dir"),
                              index_dir=decontamination_index_dir())
    return None if settings is None else settings.index_path
