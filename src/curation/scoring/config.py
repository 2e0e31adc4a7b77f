"""``ScoringConfig``: every scoring knob in one tree, mirrored by conf/scoring/default.yaml.

The core takes plain dataclasses; ``scoring_config_from_dict`` builds them from
the mapping a Hydra node hands over (``OmegaConf.to_container(cfg.scoring)``)
and refuses unknown keys, so a misspelt override fails instead of being
ignored.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Mapping

from curation.scoring.dsir import DSIRConfig
from curation.scoring.embedding_raters import EduConfig, WeakLabelRule, WikiConfig
from curation.scoring.fasttext_rater import FastTextConfig, UltraFineWebConfig
from curation.scoring.merge import MergeConfig
from curation.scoring.ray_engine import RayConfig
from curation.scoring.training_sets import TrainingSetConfig

ALL_RATERS = ("fasttext_dclm", "fasttext_ultrafineweb", "edu", "wiki", "dsir", "redpajama")
ENGINES = ("inprocess", "ray")


@dataclass
class DSIRTargets:
    """DSIR targets: score column prefix -> corpus categories forming that target."""

    targets: dict[str, list[str]] = field(default_factory=lambda: {"books": ["books"], "wikipedia": ["encyclopedic"]})
    # categories of the raw (source) model; None = the whole corpus
    raw_categories: list[str] | None = None
    model: DSIRConfig = field(default_factory=DSIRConfig)


@dataclass
class ScoringConfig:
    """The whole scoring step (issue 3, "Raters" and "Merged quality")."""

    # raters to run, from ALL_RATERS
    raters: list[str] = field(default_factory=lambda: list(ALL_RATERS))
    # "inprocess" (pandas batches) | "ray": fastText, DSIR and RedPajama applied by a Ray Data job
    engine: str = "inprocess"
    # Ray Data job of engine=ray (curation.scoring.ray_engine)
    ray: RayConfig = field(default_factory=RayConfig)
    # a folder of fitted raters written by an earlier run (data/06_models/<namespace>/raters):
    # the raters it holds are loaded instead of fitted; null = fit every rater
    pretrained_dir: str | None = None
    training: TrainingSetConfig = field(default_factory=TrainingSetConfig)
    fasttext_dclm: FastTextConfig = field(default_factory=FastTextConfig)
    fasttext_ultrafineweb: FastTextConfig = field(default_factory=UltraFineWebConfig)
    edu: EduConfig = field(default_factory=EduConfig)
    wiki: WikiConfig = field(default_factory=WikiConfig)
    dsir: DSIRTargets = field(default_factory=DSIRTargets)
    merge: MergeConfig = field(default_factory=MergeConfig)


def _build(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp) and isinstance(value, Mapping):
        hints = typing.get_type_hints(tp)
        names = {f.name for f in dataclasses.fields(tp)}
        unknown = set(value) - names
        if unknown:
            raise KeyError(f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(names)}")
        return tp(**{k: _build(hints[k], v, f"{where}.{k}") for k, v in value.items()})
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return None if value is None else _build(args[0], value, where)
    if origin is list and value is not None:
        (item,) = typing.get_args(tp)
        return [_build(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict and value is not None:
        _, item = typing.get_args(tp)
        return {k: _build(item, v, f"{where}.{k}") for k, v in value.items()}
    return value


def scoring_config_from_dict(mapping: Mapping[str, Any]) -> ScoringConfig:
    """Nested mapping (e.g. from YAML) -> ``ScoringConfig``; unknown keys raise ``KeyError``.

    ``fasttext_ultrafineweb`` is built on ``UltraFineWebConfig`` so keys the
    mapping leaves out keep the Ultra-FineWeb defaults, not DCLM's.
    """
    mapping = dict(mapping)
    ufw = mapping.pop("fasttext_ultrafineweb", None)
    cfg = _build(ScoringConfig, mapping, "scoring")
    if ufw is not None:
        cfg.fasttext_ultrafineweb = _build(UltraFineWebConfig, ufw, "scoring.fasttext_ultrafineweb")
    unknown = set(cfg.raters) - set(ALL_RATERS)
    if unknown:
        raise ValueError(f"scoring.raters: unknown rater(s) {sorted(unknown)}; known: {list(ALL_RATERS)}")
    if cfg.engine not in ENGINES:
        raise ValueError(f"scoring.engine={cfg.engine!r}: known engines are {list(ENGINES)}")
    return cfg


__all__ = ["ALL_RATERS", "DSIRTargets", "ENGINES", "RayConfig", "ScoringConfig", "WeakLabelRule", "scoring_config_from_dict"]
