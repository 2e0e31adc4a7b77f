"""Kedro config loader whose parameters are the composed Hydra config.

``conf/`` holds one tree of defaults (Hydra). ``curate`` composes it and hands
the result to Kedro; ``kedro run --params "data.max_docs=500"`` arrives here as
runtime params, which become Hydra overrides of the same tree. Either way the
parameters come from one place and cannot drift. The composed config is also
the ``runtime_params`` seen by the catalog, so catalog paths can say
``${runtime_params:run.namespace}``.

A few blocks exist only in the experiments that need them (``decide:`` in ``experiment=decide``, ``table2:`` in
``experiment=table2_tiny``: :data:`curation.config_schema.EXTRA_BLOCKS`). :class:`CurationContext` (the project's
Kedro context) puts a note naming those experiments in the catalog as ``params:<block>`` when the config lacks one,
so every ``params:`` input of every registered pipeline resolves (Kedro-Viz loads them all; it warned "Cannot find
parameter `params:decide` in the catalog"). The note stays out of ``context.params`` (what a run's MLflow params
and summary are made of), and a run of a pipeline that reads such a block is still stopped before its first node
by :class:`curation.runtime_hooks.InputsHook`, naming the same experiments.
"""

from __future__ import annotations

import re
from copy import deepcopy
from pathlib import Path
from typing import Any

from attrs import define
from kedro.config import OmegaConfigLoader
from kedro.framework.context import KedroContext

from curation.configuration import COMPOSED_KEY


def _format_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_format_value(v) for v in value) + "]"
    text = str(value)
    if any(ch in text for ch in " ,=[]{}()'\"\\:$*?") or text == "":
        return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return text


def overrides_from_params(params: dict[str, Any], prefix: str = "") -> list[str]:
    """``{"data": {"max_docs": 500}}`` -> ``["data.max_docs=500"]`` (Hydra override syntax).

    A string at the top of a group (``{"data": "corpus"}``) stays a group choice.
    """
    out: list[str] = []
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.extend(overrides_from_params(value, prefix=f"{name}."))
        else:
            out.append(f"{name}={_format_value(value)}")
    return out


def compose_config(conf_dir: Path | str, overrides: list[str] | None = None, *,
                   validate: bool = True) -> dict[str, Any]:
    """Compose ``conf/config.yaml`` with Hydra overrides and return a plain, resolved dict.

    Unknown keys and wrong types fail in composition (each group's schema); with
    ``validate`` every group's dataclass is then built, so an out-of-range value
    raises :class:`~curation.configuration.ConfigError` naming key, value and range.
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from curation.config_schema import register_configs, validate_config

    register_configs()
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(Path(conf_dir).resolve()), version_base="1.3"):
        cfg = compose(config_name="config", overrides=list(overrides or []))
    composed: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    if validate:
        validate_config(composed)
    return composed


class HydraConfigLoader(OmegaConfigLoader):
    """``OmegaConfigLoader`` for catalog/credentials/logging; Hydra for parameters."""

    def __init__(self, conf_source: str, env: str | None = None, runtime_params: dict[str, Any] | None = None,
                 **kwargs: Any) -> None:
        params = dict(runtime_params or {})
        if params.pop(COMPOSED_KEY, False):
            composed = params
        else:
            composed = compose_config(Path(conf_source), overrides_from_params(params))
        self.composed: dict[str, Any] = composed
        super().__init__(conf_source=conf_source, env=env, runtime_params=composed, **kwargs)
        from omegaconf import OmegaConf

        # ${namespace:<dataset>} in catalog paths: see namespace_of.
        OmegaConf.register_new_resolver("namespace", self.namespace_of, replace=True)

    def namespace_of(self, dataset: str) -> str:
        """The data-layer sub-folder of ``dataset`` for this run.

        Outputs go to ``run.namespace``. A sweep job writes under its own
        namespace but reads the datasets it does not produce (``run.free_inputs``,
        filled in by ``curate``) from ``run.input_namespace``, so
        ``curate -m pipeline=selection selection.lam=0.1,0.3`` reads the one
        pruned corpus and writes one selection per job.
        """
        run = self.composed.get("run") or {}
        if run.get("input_namespace") and dataset in (run.get("free_inputs") or ()):
            return str(run["input_namespace"])
        return str(run.get("namespace", "default"))

    def __getitem__(self, key: str) -> dict[str, Any]:
        if key == "parameters":
            return deepcopy(self.composed)
        return super().__getitem__(key)


def experiments_supplying(group: str, project_path: Path | str) -> list[str]:
    """The experiments (``conf/experiment/<name>.yaml``) that set a top-level ``group:`` block, by name."""
    conf = Path(project_path) / "conf" / "experiment"
    return sorted(p.stem for p in conf.glob("*.yaml")
                  if re.search(rf"^{re.escape(group)}:", p.read_text(), flags=re.M))


def unset_block_note(group: str, project_path: Path | str) -> str:
    """What the catalog holds as ``params:<group>`` for an experiment-only block the config lacks."""
    found = [name for name in experiments_supplying(group, project_path) if not name.startswith("_")]
    if not found:
        return f"not set in this config: give it with +{group}.<key>=<value>"
    others = f" (or {', '.join(found[1:])})" if found[1:] else ""
    return f"not set in this config: experiment={found[0]}{others} sets it"


@define(slots=False)
class CurationContext(KedroContext):
    """:class:`KedroContext` whose catalog has a ``params:<block>`` for every experiment-only block (a note when
    the config lacks it; see the module's docstring)."""

    def _get_parameters(self) -> dict[str, Any]:
        params_dict = super()._get_parameters()
        from curation.config_schema import EXTRA_BLOCKS

        for group in EXTRA_BLOCKS:
            params_dict.setdefault(f"params:{group}", unset_block_note(group, self.project_path))
        return params_dict
