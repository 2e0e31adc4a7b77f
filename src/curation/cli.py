"""The project's ``kedro`` commands (Kedro loads ``<package>.cli.cli`` and lets it override its own).

``kedro run`` is Kedro's own command with what ``curate`` adds around a run:

* the namespace lock is taken right after the config is composed (a second ``kedro run`` in a busy
  namespace is refused in about a second, before the pipelines, the catalog and their imports are
  loaded; :mod:`curation.namespace_lock`);
* a known failure (bad input or config, a busy namespace, missing inputs, a full disk:
  :func:`curation.errors.user_message`) ends with one ``kedro run: error: ...`` line and exit status 2;
  the full trace with ``kedro run --verbose`` or ``HYDRA_FULL_ERROR=1``. Any other failure ends with one line
  naming the file under ``logs/`` that holds its trace, and exit status 1 (:func:`curation.errors.exit_on_failure`).
"""

from __future__ import annotations

from curation.telemetry import disable as _disable_telemetry

_disable_telemetry()  # before Kedro, MLflow or the Hub load: nothing phones home (curation.telemetry)

import os
import sys
from pathlib import Path
from typing import Any

import click
from kedro.framework.cli.project import run as kedro_run

from curation.errors import VERBOSE_ENV, KnownFailureFilter, exit_on_failure, verbose

PROG = "kedro run"


def early_namespace(params: dict[str, Any], conf_source: str | None, root: Path) -> tuple[str, bool] | None:
    """``(run.namespace, run.wait_for_lock)`` of the config ``kedro run --params`` composes (cheaply:
    :func:`curation.hydra_app.namespace_from_config`), or None when it does not compose (the run itself
    then reports why)."""
    from curation.config_loader import overrides_from_params
    from curation.hydra_app import namespace_from_config

    return namespace_from_config(overrides_from_params(params or {}), root,
                                 Path(conf_source) if conf_source else None)


@click.group(name="curation")
def cli() -> None:
    """Project commands of curation."""


@cli.command(name="run", params=[*kedro_run.params,
                                 click.Option(["--verbose"], is_flag=True,
                                              help="On a known failure, print the full trace too.")],
             help=kedro_run.help, context_settings=kedro_run.context_settings)
@click.pass_context
def run(ctx: click.Context, **kwargs: Any) -> Any:
    if kwargs.pop("verbose", False):
        os.environ[VERBOSE_ENV] = "1"
    from curation import namespace_lock as locks
    from curation.paths import project_root

    root = project_root()
    try:
        try:
            early = early_namespace(kwargs.get("params") or {}, kwargs.get("conf_source"), root)
            if early is not None and not early[1]:
                # Before the pipelines, the catalog and their imports: a busy namespace fails at once.
                locks.acquire_early(root, early[0])
            KnownFailureFilter.install()  # a known failure is printed once, short
            if kwargs.get("pipelines"):  # before Kedro imports curation.pipelines.<name> (an ImportError trace)
                from curation.hydra_app import check_pipelines

                names = kwargs["pipelines"]
                check_pipelines([names] if isinstance(names, str) else list(names))
            from curation.tracking import interrupts

            interrupts.install()  # Ctrl-C / SIGTERM: one line, the MLflow run KILLED, exit 130 / 143
            with interrupts.handled(PROG):
                return ctx.invoke(kedro_run, **kwargs)
        finally:
            locks.release_all()
    except Exception as err:
        if verbose() or isinstance(err, (click.exceptions.ClickException, click.exceptions.Exit,
                                         click.exceptions.Abort)):
            raise  # a full trace asked for; click's own usage errors and exits (click prints them)
        exit_on_failure(err, root, PROG)
