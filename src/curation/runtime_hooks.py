"""What a run checks and sets before its first node: torch threads, and that every dataset it reads exists."""

from __future__ import annotations

import logging
from typing import Any

from kedro.framework.hooks import hook_impl

from curation.errors import UserError

log = logging.getLogger(__name__)


class RuntimeHook:
    """Applies ``run.torch_threads``: torch's default (one thread per core) slows small matrix work
    several-fold when other processes share the cores (measured: a DataMask step 3.2x slower with 2
    threads than with 1 at load 10 on 2 cores)."""

    def __init__(self) -> None:
        self._context: Any = None

    @hook_impl
    def after_context_created(self, context: Any) -> None:
        self._context = context

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline: Any, catalog: Any) -> None:
        run = (self._context.params.get("run") or {}) if self._context is not None else {}
        threads = run.get("torch_threads")
        if threads is None:
            return
        if int(threads) < 1:
            raise ValueError(f"run.torch_threads must be >= 1 or null, got {threads}")
        import torch

        torch.set_num_threads(int(threads))
        log.info("torch threads: %d", int(threads))


# The pipeline that writes each dataset a later pipeline reads (base name, without ``@frame``), in the order
# of the chain that makes them: the default job's four stages, then pre-training. What no pipeline writes
# (the raw corpus, metarater_work_dir) is not checked here: ingest names a missing corpus itself.
DEFAULT_JOB = ("ingest", "scoring", "pruning", "selection")
MADE_BY = {
    "documents": "ingest", "rejected_documents": "ingest", "document_stats": "ingest",
    "scores": "scoring", "embeddings": "scoring", "rater_models": "scoring",
    "pruned_scores": "pruning", "pruned_embeddings": "pruning",
    "selected_ids": "selection", "selected_documents": "selection",
    "lm_tokenizer": "pretrain", "lm_tokens": "pretrain", "lm_checkpoint": "pretrain",
}


class MissingInputError(UserError):
    """A pipeline reads a dataset that no earlier run wrote in the namespace it reads from."""


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def missing_inputs_message(pipelines: list[str], missing: dict[str, list[str]], have_documents: dict[str, bool],
                           data_path: str = "<your corpus>") -> str:
    """One line naming what ``pipelines`` need and do not find (namespace -> dataset names), and the command
    that makes it. ``have_documents``: whether each namespace holds ingested documents; ``data_path``: the
    corpus the command should ingest (``data.path``)."""
    wanted = "+".join(pipelines)
    parts = []
    for namespace, names in missing.items():
        stages = [MADE_BY[n] for n in names]
        label = _and(names)
        if not have_documents.get(namespace, False):
            parts.append(f"pipeline={wanted} reads {label} from namespace {namespace!r}, which has no ingested "
                         f"documents yet: run the default job there first, `curate run.namespace={namespace} "
                         f"data.path={data_path}` (ingest, scoring, pruning, selection)"
                         + (f", then `curate run.namespace={namespace} pipeline=pretrain`"
                            if "pretrain" in stages else "")
                         + ", or point run.namespace at a namespace that has them")
            continue
        chain = [s for s in DEFAULT_JOB if s in stages]
        if chain:  # the default job's stages from the first missing one to the last one needed
            chain = list(DEFAULT_JOB[DEFAULT_JOB.index(chain[0]):DEFAULT_JOB.index(chain[-1]) + 1])
        if "pretrain" in stages:
            chain.append("pretrain")
        parts.append(f"pipeline={wanted} reads {label} from namespace {namespace!r}, which has none yet: run "
                      f"`curate run.namespace={namespace} pipeline={'+'.join(chain)}` first")
    return "; ".join(parts) + "."


class InputsHook:
    """Stops a run before its first node when a dataset it reads was never written in its namespace (a
    Meta-rater or pre-training run in a namespace without ingested documents), with one line that names the
    datasets, the namespace and the command that makes them, instead of the first node's load error. Runs
    before the other hooks' ``before_pipeline_run`` (registered last: pluggy calls the last one first), so
    such a run opens no MLflow run."""

    def __init__(self) -> None:
        self._context: Any = None

    @hook_impl
    def after_context_created(self, context: Any) -> None:
        self._context = context

    def _namespace(self, name: str) -> str:
        loader = getattr(self._context, "config_loader", None)
        if hasattr(loader, "namespace_of"):
            return str(loader.namespace_of(name))
        run = (self._context.params.get("run") or {}) if self._context is not None else {}
        return str(run.get("namespace") or "default")

    def _missing_settings(self, pipeline: Any, names: list[str]) -> None:
        """A ``params:<group>`` the pipeline reads that the composed config lacks (``pipeline=table2`` without
        the experiment that carries ``table2:``): one line naming the experiments that supply it."""
        params = self._context.params if self._context is not None else {}
        absent = sorted({n.split(":", 1)[1].split(".")[0] for n in pipeline.inputs()
                         if n.startswith("params:") and n.split(":", 1)[1].split(".")[0] not in params})
        if not absent:
            return
        from curation.config_loader import experiments_supplying

        parts = []
        for group in absent:
            found = experiments_supplying(group, getattr(self._context, "project_path", "."))
            supply = (f"add experiment={found[0]}" + (f" (or {', '.join('experiment=' + f for f in found[1:])})"
                                                      if found[1:] else "")) if found else \
                f"give it with +{group}.<key>=<value>"
            parts.append(f"the config has no {group} settings: {supply}")
        raise MissingInputError(f"pipeline={'+'.join(names)} reads params:{', params:'.join(absent)}, but "
                                + "; ".join(parts) + ".")

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline: Any, catalog: Any) -> None:
        pipelines = [n or "__default__" for n in (run_params.get("pipeline_names")
                                                  or [run_params.get("pipeline_name") or "__default__"])]
        self._missing_settings(pipeline, pipelines)
        missing: dict[str, list[str]] = {}
        have_documents: dict[str, bool] = {}
        for name in sorted(pipeline.inputs()):
            base = name.split("@")[0]
            if base not in MADE_BY:
                continue
            namespace = self._namespace(base)
            if namespace not in have_documents:
                documents = "documents@shards" if "documents@shards" in catalog else "documents@frame"
                have_documents[namespace] = (self._namespace("documents") != namespace
                                             or documents not in catalog or bool(catalog.exists(documents)))
            if not catalog.exists(name) and base not in missing.get(namespace, []):
                missing.setdefault(namespace, []).append(base)
        if missing:
            order = list(MADE_BY)
            missing = {ns: sorted(names, key=order.index) for ns, names in missing.items()}
            params = self._context.params if self._context is not None else {}
            data_path = str((params.get("data") or {}).get("path") or "<your corpus>")
            raise MissingInputError(missing_inputs_message(pipelines, missing, have_documents, data_path))
