"""Every config group's schema, registered with Hydra, and the check run right after composition.

The schemas are the core's plain dataclasses (no Hydra import there):

=============  ==========================================================
group          schema
=============  ==========================================================
data           curation.data.config.DataConfig
tracking       TrackingConfig (below)
run            RunConfig (below)
report         ReportConfig (below)
embedding      curation.embedding.EmbedderConfig
scoring        curation.scoring.config.ScoringConfig
pruning        curation.pruning.PruningConfig
budget         curation.selection.config.BudgetConfig
selection      curation.selection.config.CONFIG_CLASSES[<method>], one per method
pretrain       curation.lm.config.PretrainConfig
eval           curation.evaluation.config.EvalConfig
verification   curation.verification.config.VerificationConfig
metarater      curation.metarater.config.MetaraterConfig
=============  ==========================================================

:func:`register_configs` stores each as ``<group>/_schema`` (selection:
``selection/_schema_<method>``) in Hydra's ``ConfigStore``; every YAML option
lists its schema first in ``defaults:``, so composition itself refuses a
misspelt key (``Key 'lamda' not in 'DataMaskConfig'``) or a wrong-typed value
(``data.max_docs=lots``, ``selection.steps=2.5``) and names it.

Ranges are the dataclasses' own checks (``__post_init__``). Plain composition
does not build the dataclasses, so :func:`validate_config` does, with the one
parser (:func:`curation.configuration.parse_dataclass`): ``curate`` and the
Kedro config loader call it right after composing, and an out-of-range knob
fails before any pipeline runs, naming the full key, the value and the allowed
range (``data.max_docs=-3: must be >= 1 or null``).

This module imports Hydra only inside :func:`register_configs`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from curation.configuration import ConfigError, at_least, check, one_of, parse_dataclass
from curation.data.config import DataConfig


@dataclass
class TrackingConfig:
    enabled: bool = True  # False: run without MLflow
    uri: str = "sqlite:///mlruns/mlflow.db"  # relative sqlite paths resolve against the project root
    artifact_location: str = "mlruns/artifacts"  # relative paths resolve against the project root
    experiment_name: str = "curation"
    run_name: Optional[str] = None  # None: "<pipelines> <timestamp>"
    parent_run_id: Optional[str] = None  # set by the sweep callback for multirun jobs
    tags: dict[str, Any] = field(default_factory=dict)  # extra tags on every run

    def __post_init__(self) -> None:
        check(bool(self.experiment_name), "experiment_name", self.experiment_name, "a non-empty name")


def _inside(namespace: str) -> bool:
    """Whether ``namespace`` names a folder inside a data layer (``a``, ``a/multirun/b/0``), not ``..`` or ``/x``,
    nor one a reader would skip or expand: a hidden part (``.x``: the stages' staging folders are hidden), a glob
    (``*?[]``), or ``cache`` first (the shared result cache's folder, data/04_feature/cache; issue #52)."""
    parts = namespace.split("/")
    return (not namespace.startswith("/") and all(p not in ("", ".", "..") and not p.startswith(".") for p in parts)
            and not any(c in namespace for c in "*?[]") and parts[0] != "cache")


@dataclass
class RunConfig:
    namespace: str = "default"  # sub-folder of each data layer for this run's outputs
    input_namespace: Optional[str] = None  # where a sweep job reads the datasets it does not produce (None = namespace)
    seed: int = 0  # global seed for every random choice of a run
    torch_threads: Optional[int] = None  # torch intra-op threads for the run (None = torch's default, one per core)
    wait_for_lock: bool = False  # another run holds this namespace: wait for it (true) or fail at once (false)

    def __post_init__(self) -> None:
        check(bool(self.namespace), "namespace", self.namespace, "a non-empty folder name")
        # a namespace is a folder under each data layer: `..` or a leading / would write outside data/ (issue #39)
        for key, value in (("namespace", self.namespace), ("input_namespace", self.input_namespace)):
            check(value is None or _inside(str(value)), key, value,
                  "a folder name inside each data layer (parts joined by /, none empty or starting with '.', no "
                  "leading /, no glob characters * ? [ ], not 'cache' first: the result cache's folder)")
        at_least("seed", self.seed, 0)  # numpy refuses negative seeds
        at_least("torch_threads", self.torch_threads, 1, optional=True)


REPORT_RUNS = ("latest_sweep", "all")


@dataclass
class ReportConfig:
    experiment: Optional[str] = None  # artefact name = a key of curation.reporting.artefacts.ARTEFACTS
    mlflow_experiment: Optional[str] = None  # MLflow experiment to read (None = the artefact name)
    runs: str = "latest_sweep"  # latest_sweep: the children of the newest sweep (or the newest run) | all
    # label of "this run" in the Markdown; the corpus is named after it from the runs' data.path ("500 documents
    # of /data/web", "... of the bundled corpus (data/01_raw/corpus)"), never assumed to be the bundled one
    scale_note: str = "reduced scale, 2 CPU cores"

    def __post_init__(self) -> None:
        one_of("runs", self.runs, REPORT_RUNS)


@dataclass
class CacheConfig:
    """The top-level ``cache`` block of conf/config.yaml (content-addressed result cache)."""

    enabled: bool = True
    dir: str = "data/04_feature/cache"  # relative to the project root


def _check_embedding(cfg: Any) -> None:
    # EmbedderConfig lives with the embedder (curation.embedding.embedder); its ranges are checked here
    # until they move into its __post_init__.
    at_least("dim", cfg.dim, 1)
    at_least("max_seq_length", cfg.max_seq_length, 1, optional=True)
    at_least("max_chars", cfg.max_chars, 0)  # 0 = keep every character
    at_least("batch_size", cfg.batch_size, 1)
    at_least("num_threads", cfg.num_threads, 0)  # 0 = torch's default
    one_of("dtype", cfg.dtype, ("float32", "float16"))
    one_of("quantize", cfg.quantize, ("none", "int8"))
    if cfg.static_model:
        check(cfg.backend == "static", "static_model", cfg.static_model,
              f"only with backend=static (the backend is {cfg.backend}): null")


def _schemas() -> dict[str, Any]:
    """group -> schema class (selection: method -> class). Imported lazily: some pull in torch."""
    from curation.embedding import EmbedderConfig
    from curation.evaluation.config import EvalConfig
    from curation.lm.config import PretrainConfig
    from curation.metarater.config import MetaraterConfig
    from curation.verification.config import VerificationConfig
    from curation.pruning import PruningConfig
    from curation.scoring.config import ScoringConfig
    from curation.selection.config import CONFIG_CLASSES, BudgetConfig

    return {
        "data": DataConfig, "tracking": TrackingConfig, "run": RunConfig, "report": ReportConfig,
        "embedding": EmbedderConfig, "scoring": ScoringConfig, "pruning": PruningConfig, "budget": BudgetConfig,
        "selection": dict(CONFIG_CLASSES), "pretrain": PretrainConfig, "eval": EvalConfig,
        "verification": VerificationConfig, "metarater": MetaraterConfig,
    }


def _parse_group(group: str, node: Any) -> Any:
    """The typed, range-checked config of one group (errors name ``<group>.<key>``)."""
    if group == "selection":
        from curation.selection.config import parse_selection_config

        method = node.get("method") if isinstance(node, Mapping) else None
        return parse_selection_config(str(method), node, path="selection")
    if group == "scoring":
        from curation.scoring.config import scoring_config_from_dict

        return scoring_config_from_dict(node, path="scoring")
    if group == "pretrain":
        from curation.lm.config import parse_config

        return parse_config(node, path="pretrain")
    if group == "eval":
        from curation.evaluation.config import parse_eval_config

        return parse_eval_config(node, path="eval")
    if group == "metarater":
        from curation.metarater.config import parse_metarater_config

        return parse_metarater_config(node, path="metarater")
    if group == "verification":
        from curation.verification.config import parse_verification_config

        return parse_verification_config(node)  # names its keys verification.<key>
    cfg = parse_dataclass(_schemas()[group], node, path=group)
    if group == "embedding":
        try:
            _check_embedding(cfg)
        except ConfigError as err:
            raise err.under("embedding") from None
    return cfg


def _parse_table2(node: Mapping[str, Any]) -> dict[str, Any]:
    from curation.selection.corpus import CorpusSpec

    corpora = {name: parse_dataclass(CorpusSpec, spec, path=f"table2.corpora.{name}").validate(
        f"table2.corpora.{name}") for name, spec in (node.get("corpora") or {}).items()}
    if "corpus" in node:
        one_of("table2.corpus", node["corpus"], list(corpora))
    return corpora


def _parse_decide(node: Mapping[str, Any]) -> Any:
    from curation.reporting.decide import parse_decide

    return parse_decide(node)


GROUPS = ("data", "tracking", "run", "report", "embedding", "scoring", "pruning", "budget", "selection",
          "pretrain", "eval", "verification", "metarater")
EXTRA_BLOCKS: dict[str, Callable[[Any], Any]] = {
    "cache": lambda node: parse_dataclass(CacheConfig, node, path="cache"),
    "table2": _parse_table2,
    "decide": _parse_decide,
}


def validate_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Build every group's dataclass from a composed config (plain dict or ``DictConfig``).

    Returns ``{group: typed config}`` for the groups present; raises
    :class:`~curation.configuration.ConfigError` (a ``ValueError``) naming the
    first bad key with its full path, its value and the allowed range.
    """
    if type(cfg).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        cfg = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    typed: dict[str, Any] = {}
    for group in GROUPS:
        if isinstance(cfg.get(group), Mapping):
            typed[group] = _parse_group(group, cfg[group])
    for key, parse in EXTRA_BLOCKS.items():
        if isinstance(cfg.get(key), Mapping):
            typed[key] = parse(cfg[key])
    check_score_columns(typed, str(cfg.get("pipeline") or "__default__"))
    return typed


# The pipelines whose nodes read each block's score column(s) (tests/foundation/test_config_schema_columns.py
# checks this against the registered pipelines' ``params:`` inputs).
SCORE_READERS: dict[str, tuple[str, ...]] = {
    "pruning": ("__default__", "pruning", "decide"),
    "selection": ("__default__", "selection"),
    "decide": ("decide",),
    "table2": ("table2",),
    "verification": ("verification", "ufw_classifier"),
}


def _score_keys(typed: Mapping[str, Any], block: str) -> list[tuple[str, str]]:
    """(config key, column) pairs of ``block`` that name a scores column."""
    from curation.selection.corpus import SELECTION

    value = typed[block]
    if block == "pruning":
        return [("pruning.score_column", value.score_column)]
    if block == "selection":
        return [("selection.score", value.score)]
    specs = value if block == "table2" else value.candidates
    name = "corpora" if block == "table2" else "candidates"
    return [(f"{block}.{name}.{k}.score", spec.score) for k, spec in specs.items() if spec.method != SELECTION]


def check_score_columns(typed: Mapping[str, Any], pipeline: str) -> None:
    """Every score column a stage of ``pipeline`` will read is one the scoring config writes.

    A decide candidate with a misspelt ``score:`` was found only after ingest, scoring and
    pruning had run (issue #52); the columns follow from the scoring config alone
    (:func:`curation.scoring.config.score_columns`), so the check runs at composition.
    """
    if "scoring" not in typed:
        return
    from curation.scoring.config import score_columns

    names = set(pipeline.split("+"))
    have = score_columns(typed["scoring"])
    for block, readers in SCORE_READERS.items():
        if block not in typed or not names & set(readers):
            continue
        merge = typed["scoring"].merge
        needs = sorted({*merge.components, merge.reference})
        for key, column in _score_keys(typed, block):
            if column in have:
                continue
            why = (f" ({column} is the merge of {needs}: every one must be in scoring.raters)"
                   if column == merge.output_column or column.endswith("_0_5") else "")
            raise ConfigError(key, f"{column!r} is not a column the scoring stage writes with these raters "
                              f"(scoring.raters={list(typed['scoring'].raters)}){why}: it writes {_listed(have)}. "
                              "Fix: name one of them, or add the rater that writes it to scoring.raters", column)


def _listed(columns: list[str]) -> str:
    """The columns in a line: RedPajama's signals as one entry (there are 11)."""
    from curation.scoring.redpajama import SIGNALS

    signals = [c for c in columns if c in SIGNALS]
    rest = [c for c in columns if c not in SIGNALS]
    if signals:
        rest.append(f"the {len(signals)} RedPajama signals ({signals[0]}, ..., {signals[-1]})")
    return ", ".join(rest)


def hydra_node(cls: type) -> type:
    """``cls`` as Hydra can store it: ``dict[str, <dataclass>]`` fields loosened to ``dict[str, Any]``.

    OmegaConf 2.3 refuses to add an entry to a dict of structured configs from
    an override (``+verification.candidates.edu={method: topk_quality}``:
    "dict is not a subclass of CorpusSpec"). Such fields are kept as plain
    mappings in the stored schema (their defaults as dicts), and
    :func:`validate_config` parses their entries right after composition. Every
    other field is the class's own, so fields added to ``cls`` later are
    registered with it.
    """
    import dataclasses
    import typing

    hints = typing.get_type_hints(cls)
    changed = False
    specs = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        args = typing.get_args(tp)
        default: Any = f.default
        factory: Any = f.default_factory
        if typing.get_origin(tp) is dict and len(args) == 2 and dataclasses.is_dataclass(args[1]):
            tp, changed = dict[str, Any], True
            if factory is not dataclasses.MISSING:
                made = factory()
                factory = lambda made=made: {k: dataclasses.asdict(v) for k, v in made.items()}  # noqa: E731
        elif isinstance(tp, type) and dataclasses.is_dataclass(tp) and hydra_node(tp) is not tp:
            tp, changed = hydra_node(tp), True
            if factory is not dataclasses.MISSING:
                made = factory()
                factory = lambda tp=tp, made=made: tp(**dataclasses.asdict(made))  # noqa: E731
        kw = {"default": default} if default is not dataclasses.MISSING else {}
        if factory is not dataclasses.MISSING:
            kw = {"default_factory": factory}
        specs.append((f.name, tp, dataclasses.field(**kw)))
    if not changed:
        return cls
    return dataclasses.make_dataclass(cls.__name__, specs)


_REGISTERED = False


def register_configs() -> None:
    """Register every group's schema and the ``${project_root:}`` resolver once per process."""
    global _REGISTERED
    if _REGISTERED:
        return
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from curation.paths import project_root

    OmegaConf.register_new_resolver("project_root", lambda: str(project_root()), replace=True)
    cs = ConfigStore.instance()
    for group, schema in _schemas().items():
        if isinstance(schema, dict):  # selection: one schema per method
            for method, cls in schema.items():
                cs.store(group=group, name=f"_schema_{method}", node=hydra_node(cls))
        else:
            cs.store(group=group, name="_schema", node=hydra_node(schema))
    _REGISTERED = True


__all__ = ["CacheConfig", "DataConfig", "GROUPS", "ReportConfig", "RunConfig", "TrackingConfig",
           "register_configs", "validate_config"]
