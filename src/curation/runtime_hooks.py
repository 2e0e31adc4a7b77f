"""Process-wide settings a run needs before its first node: torch threads."""

from __future__ import annotations

import logging
from typing import Any

from kedro.framework.hooks import hook_impl

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
