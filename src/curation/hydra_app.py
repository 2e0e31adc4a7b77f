"""``curate``: the Hydra application that runs Kedro pipelines.

    curate pipeline=ingest data.max_docs=2000
    curate -m data.max_docs=500,1000,2000      # one Kedro run (and MLflow child run) per job
    curate --cfg job                           # print the composed config
    curate --describe selection.steps          # a key's value, type and description
    curate --help                              # pipelines, experiments, the main overrides (conf/config.yaml)

Hydra composes ``conf/config.yaml``; each job runs the requested pipeline(s)
in a real ``KedroSession`` with the composed config as its parameters.
"""

from __future__ import annotations

from curation.telemetry import disable as _disable_telemetry

_disable_telemetry()  # before Kedro, MLflow or the Hub load: nothing phones home (curation.telemetry)

import os

# Kedro reads its logging configuration once, when kedro.framework.project is first imported (after this):
# its own, less two INFO lines it printed at the top of every run; a KEDRO_LOGGING_CONFIG of the user's wins.
_KEDRO_LOGGING = os.path.join(os.path.dirname(__file__), "kedro_logging.yml")  # package data (pyproject)
if os.path.isfile(_KEDRO_LOGGING):
    os.environ.setdefault("KEDRO_LOGGING_CONFIG", _KEDRO_LOGGING)

import logging
import re
import sys
from pathlib import Path
from contextlib import contextmanager
from typing import Any, Iterator

from omegaconf import DictConfig, OmegaConf

from curation.cli_help import known_pipelines, register_help_resolver
from curation.configuration import COMPOSED_KEY
from curation.errors import UserError
from curation.paths import project_root
from curation.tracking.store import parent_run_from_env

log = logging.getLogger(__name__)


def pipeline_names(value: str) -> list[str]:
    names = [p.strip() for p in str(value).split("+") if p.strip()]
    if not names:
        raise ValueError("pipeline= names no pipeline")
    return names


class UnknownPipelineError(UserError, ValueError):
    """``pipeline=`` names a pipeline that does not exist."""


def check_pipelines(names: list[str]) -> None:
    """Refuse an unknown pipeline name before Kedro looks it up: Kedro 1.x imports
    ``curation.pipelines.<name>`` for a requested name and fails with a 20-line ``ImportError`` trace
    (issue #39: bad input gets one line naming the key and the fix)."""
    known = known_pipelines()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UnknownPipelineError(f"pipeline={'+'.join(unknown)}: no such pipeline. Fix: name one of {', '.join(known)} "
                                   f"(several joined by +, e.g. pipeline=ingest+scoring).")


def run_kedro(params: dict[str, Any], *, project_path: Path | None = None, env: str | None = None) -> dict[str, Any]:
    """Run ``params["pipeline"]`` in a fresh KedroSession with ``params`` as its parameters."""
    from kedro.framework.project import configure_project, pipelines
    from kedro.framework.session import KedroSession

    root = project_path or project_root()
    # preserve_logging: keep Hydra's job log handler (bootstrap_project would drop it).
    configure_project("curation", preserve_logging=True)
    names = pipeline_names(params.get("pipeline", "__default__"))
    check_pipelines(names)
    # Kedro 1.x loads only the requested pipelines; ask for ours before looking them up.
    pipelines.set_requested(names)
    unknown = [n for n in names if n not in pipelines]
    if unknown:
        raise ValueError(f"pipeline={'+'.join(unknown)} is not a registered pipeline; known: {sorted(pipelines)}")
    if params.get("run", {}).get("input_namespace"):
        from kedro.pipeline import Pipeline

        combined = sum((pipelines[n] for n in names), start=Pipeline([]))
        params["run"]["free_inputs"] = sorted({i.split("@")[0] for i in combined.inputs() if not i.startswith("params:")})
    from curation.errors import KnownFailureFilter

    with KedroSession.create(project_path=root, env=env or params.get("kedro_env"),
                             runtime_params={COMPOSED_KEY: True, **params}) as session:
        KnownFailureFilter.install()  # a known failure is printed once, short (curation.errors)
        return session.run(pipeline_names=names)


def job_params(cfg: DictConfig) -> dict[str, Any]:
    """The composed config as plain data, range-checked, with multirun job settings filled in.

    Composition already refused unknown keys and wrong types (every group has a
    schema); :func:`~curation.config_schema.validate_config` builds each group's
    dataclass, so an out-of-range knob fails here, before Kedro starts, naming
    the key, the value and the allowed range.
    """
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from curation.config_schema import validate_config

    params: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    validate_config(params)
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode == RunMode.MULTIRUN:
        sweep_dir = Path(hydra_cfg.sweep.dir)
        # Keep sweep jobs' outputs apart (data/<layer>/multirun/<sweep>/<job>/), and read
        # what the job does not produce from the namespace the sweep started from.
        params["run"]["input_namespace"] = params["run"].get("input_namespace") or params["run"]["namespace"]
        params["run"]["namespace"] = (f"{params['run']['namespace']}/multirun/"
                                      f"{sweep_dir.parent.name}_{sweep_dir.name}/{hydra_cfg.job.num}")
        if not params["tracking"].get("parent_run_id"):
            params["tracking"]["parent_run_id"] = parent_run_from_env()
        params["tracking"]["tags"] = {**params["tracking"].get("tags", {}), "hydra.job.num": hydra_cfg.job.num}
    # The MLflow run is named after them (curation.tracking.naming.run_name).
    params["tracking"]["tags"] = {**params["tracking"].get("tags", {}),
                                  "hydra.overrides": " ".join(hydra_cfg.overrides.task)}
    return params


def _task(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from curation import namespace_lock as locks
    from curation.errors import exit_on_failure, user_message, verbose
    from curation.shards.work import run_tempdir

    _die_with_curate()
    try:
        params = job_params(cfg)
        run = params["run"]
        root = project_root()
        locks.release_others(root, run["namespace"])  # an early lock on a namespace the config did not choose
        # One writer per namespace: the summary and the MLflow record describe the files this run wrote.
        with locks.namespace_lock(root, run["namespace"], wait=bool(run.get("wait_for_lock"))), \
                run_tempdir(root, run["namespace"]):
            run_kedro(params)
    except Exception as err:
        if verbose():
            raise
        message = user_message(err)
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            if message is None:
                raise  # Hydra reports which job failed, with its trace
            # Hydra reports the failed job (and ends the sweep); the message, without the frames that hide it.
            raise type(err)(message).with_traceback(None) if _plain(err) else RuntimeError(message) from None
        # A known failure (bad input or config, a busy namespace, a full disk) is one line naming the file, row or
        # key and the fix; any other is one line and the file that holds its trace, not 80-160 lines of frames.
        log.debug("failure", exc_info=err)
        exit_on_failure(err, project_root())


MAIN_PID_ENV = "CURATION_MAIN_PID"


def _die_with_curate() -> None:
    """In a worker of a parallel launcher (``hydra/launcher=joblib``: loky processes that ``curate``
    spawned): end with ``curate``, like every other child (:mod:`curation.processes`)."""
    from curation.processes import die_with_parent

    main_pid = os.environ.get(MAIN_PID_ENV, "")
    if main_pid.isdigit() and os.getpid() != int(main_pid) and os.getppid() == int(main_pid):
        die_with_parent(int(main_pid))


def _plain(err: BaseException) -> bool:
    """Whether ``type(err)(message)`` rebuilds the error (a one-argument constructor)."""
    try:
        type(err)("x")
        return True
    except Exception:
        return False


_PLAIN_KEY = re.compile(r"^\+{0,2}run\.namespace=(?P<value>[A-Za-z0-9_.@:/-]+)$")


def namespace_from_argv(argv: list[str], root: Path) -> str | None:
    """The namespace a plain ``curate`` call (no sweep, no option) will write, read off its overrides
    before Hydra composes anything (importing the config schemas takes seconds), or None when the
    command line alone cannot tell (an option, a sweep, an experiment or another run option, a
    value to resolve)."""
    namespace = None
    for arg in argv:
        if arg.startswith("-"):
            return None  # -m, --cfg, --help, ...: not a plain run
        key = arg.split("=", 1)[0].lstrip("+~")
        if key in ("run.namespace", "run.wait_for_lock"):
            match = _PLAIN_KEY.match(arg)
            if key == "run.wait_for_lock" or match is None or "," in arg:
                return None  # a wait, or a sweep / quoted / interpolated value: leave it to the composed config
            namespace = match.group("value")
        elif key in ("run", "experiment", "scale") or key.startswith("hydra"):
            return None  # may set run.namespace
    if namespace is None:
        import yaml

        try:
            namespace = yaml.safe_load((root / "conf" / "run" / "default.yaml").read_text())["namespace"]
        except (OSError, KeyError, TypeError, yaml.YAMLError):
            return None
    return str(namespace) if namespace else None


def _placeholder_schemas(conf: Path) -> list[tuple[str, str]]:
    """Register an empty node for every ``_schema*`` entry that a group's defaults list names and that is not
    registered yet: composing with them gives the same values without importing the schemas' modules
    (``register_configs`` imports the config dataclasses of every package, torch, scipy and scikit-learn among
    them: seconds). Returns the ``(group, file)`` entries added, for :func:`_drop_placeholders`."""
    import yaml
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    added = []
    for path in sorted(conf.glob("*/*.yaml")):
        try:
            defaults = (yaml.safe_load(path.read_text()) or {}).get("defaults") or []
        except (OSError, yaml.YAMLError, AttributeError):
            continue
        for entry in defaults:
            group, file = path.parent.name, f"{entry}.yaml"
            if isinstance(entry, str) and entry.startswith("_schema") and file not in store.repo.get(group, {}):
                store.store(group=group, name=entry, node={})
                added.append((group, file))
    return added


def _drop_placeholders(added: list[tuple[str, str]]) -> None:
    """Remove the placeholders :func:`_placeholder_schemas` added (``register_configs`` adds the real ones)."""
    from hydra.core.config_store import ConfigStore

    repo = ConfigStore.instance().repo
    for group, file in added:
        repo.get(group, {}).pop(file, None)


@contextmanager
def _composing(conf: Path) -> Iterator[None]:
    """Hydra's compose API on the config folder ``conf``, its global state cleared before and after (the
    application that runs next initialises it again)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf.resolve()), version_base="1.3"):
            yield
    finally:
        GlobalHydra.instance().clear()


def namespace_from_config(argv: list[str], root: Path, conf: Path | None = None) -> tuple[str, bool] | None:
    """``(run.namespace, run.wait_for_lock)`` of a plain ``curate`` call (no sweep, no option) whose namespace
    the command line alone does not tell (``experiment=...``, ``run=...``, an interpolation), from the config
    composed here once with placeholder schemas (:func:`_placeholder_schemas`: well under a second; the run
    composes it again, typed); None for a sweep or an option, or when it does not compose (the run's own
    composition then reports why). ``conf``: the config folder (default ``<root>/conf``)."""
    if any(arg.startswith("-") for arg in argv):
        return None  # -m (every sweep job has its own namespace), --cfg, --help, ...
    from hydra import compose
    from omegaconf import OmegaConf

    conf = Path(conf) if conf is not None else root / "conf"
    added: list[tuple[str, str]] = []
    try:
        added = _placeholder_schemas(conf)
        with _composing(conf):
            cfg = compose(config_name="config", overrides=list(argv), return_hydra_config=True)
        if str(OmegaConf.select(cfg, "hydra.mode", default="")).upper().endswith("MULTIRUN"):
            return None  # an experiment that is a sweep (hydra.mode: MULTIRUN): its jobs have namespaces of their own
        namespace = OmegaConf.select(cfg, "run.namespace", default="default")
        wait = OmegaConf.select(cfg, "run.wait_for_lock", default=False)
    except Exception:
        return None
    finally:
        _drop_placeholders(added)
    return (str(namespace), bool(wait)) if namespace else None


def composition_error(argv: list[str], conf: Path) -> str | None:
    """The one-line message (:func:`curation.errors.composition_message`) when the overrides of a plain
    ``curate`` call (no sweep, no option) do not compose with the real schemas; None when they do.

    Hydra reports a composition error itself, as 5 to 25 lines and exit status 1, before our task runs;
    composing once here (a fraction of a second, after the schemas are registered) turns it into the
    same one line and exit status 2 as every other known failure. Sweeps and options (``-m``, ``--cfg``)
    are left to Hydra."""
    if any(arg.startswith("-") for arg in argv):
        return None
    from hydra import compose

    from curation.errors import composition_message

    try:
        with _composing(conf):
            if _sweeps_by_config(argv):
                return None  # an experiment that is a sweep (hydra.mode: MULTIRUN): Hydra composes each job itself
            compose(config_name="config", overrides=list(argv), return_hydra_config=True)
    except Exception as err:
        return composition_message(err)
    return None


def _sweeps_by_config(argv: list[str]) -> bool:
    """Whether ``argv`` holds a sweep (``key=a,b``) and the config makes the run a multirun (an experiment with
    ``hydra.mode: MULTIRUN``, as table2_tiny): composed as one run, such a call was refused with Hydra's
    "Ambiguous value ... add --multirun" although Hydra itself runs it as a sweep. Called inside
    :func:`_composing`."""
    from hydra import compose
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    try:
        parsed = OverridesParser.create().parse_overrides(overrides=list(argv))
    except Exception:
        return False  # the full composition reports it
    if not any(o.is_sweep_override() for o in parsed):
        return False
    plain = [o.input_line for o in parsed if not o.is_sweep_override()]
    cfg = compose(config_name="config", overrides=plain, return_hydra_config=True)
    return str(OmegaConf.select(cfg, "hydra.mode", default="")).upper().endswith("MULTIRUN")


SWEEP_CHECK_LIMIT = 1000  # jobs composed up front (~50 ms each); a larger sweep is left to each job's own check


def sweep_error(argv: list[str], conf: Path) -> str | None:
    """The one-line message when a job of a ``curate -m`` sweep would be refused, found before the first
    job runs; None when every job composes and passes :func:`~curation.config_schema.validate_config`.

    Hydra composes each job when it starts, so one invalid value (``-m pruning.threshold=3,nan``) was found
    only after the jobs before it had run (issue #44). The jobs are expanded as Hydra's basic sweeper
    expands them (the command line's sweeps after ``hydra.sweeper.params`` of the config) and each is
    composed and range-checked here, in well under a second per job."""
    if not any(arg in ("-m", "--multirun") for arg in argv):
        return None
    if any(arg.startswith("-") and arg not in ("-m", "--multirun") for arg in argv):
        return None  # --cfg, --help, ...: Hydra's own
    from hydra import compose
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from curation.config_schema import validate_config
    from curation.errors import composition_message, user_message

    overrides = [arg for arg in argv if not arg.startswith("-")]
    with _composing(conf):
        parser = OverridesParser.create()
        try:
            # The config's own sweep (an experiment with hydra.sweeper.params), then the command line's.
            base = compose(config_name="config", overrides=[o for o in overrides if "," not in o],
                           return_hydra_config=True)
            params = OmegaConf.select(base, "hydra.sweeper.params", default=None) or {}
            arguments = [f"{k}={v}" for k, v in params.items()] + overrides
            batches = BasicSweeper.split_arguments(parser.parse_overrides(overrides=arguments), None)
        except Exception as err:
            return composition_message(err) or user_message(err)
        jobs = [job for batch in batches for job in batch]
        if len(jobs) > SWEEP_CHECK_LIMIT:
            return None
        # a job is named by the values that differ from job to job
        values: dict[str, set[str]] = {}
        for job in jobs:
            for override in job:
                values.setdefault(override.split("=", 1)[0], set()).add(override)
        swept = {key for key, seen in values.items() if len(seen) > 1}
        for number, job in enumerate(jobs):
            try:
                cfg = compose(config_name="config", overrides=list(job))
                validate_config(cfg)
            except Exception as err:
                message = composition_message(err) or user_message(err)
                if message is None:
                    raise
                named = [o for o in job if o.split("=", 1)[0] in swept] or job
                return (f"sweep job #{number} of {len(jobs)} ({' '.join(named)}): {message} "
                        f"(checked before any job ran: nothing ran)")
    return None


def _refuse_busy(err: Exception) -> None:
    from curation.errors import format_failure, verbose

    if verbose():
        raise err
    print(format_failure(str(err)), file=sys.stderr, flush=True)
    raise SystemExit(2) from None


def main() -> None:
    args = sys.argv[1:]
    if "--verbose" in args:  # not a Hydra option: full traces for known failures too
        sys.argv.remove("--verbose")
        os.environ["HYDRA_FULL_ERROR"] = "1"
    root = project_root()
    if "--describe" in args:  # not a Hydra option: a key's value, type and descriptions (curation.cli_help)
        from curation.cli_help import describe_main

        raise SystemExit(describe_main(args, root))
    os.environ[MAIN_PID_ENV] = str(os.getpid())  # launcher workers inherit it (_die_with_curate)
    from curation import namespace_lock as locks

    namespace = namespace_from_argv(sys.argv[1:], root)
    try:
        if namespace is None:
            # experiment=, run=, ...: the namespace is known once the config is composed; compose it now,
            # before the seconds of Kedro and pipeline imports, so that a busy namespace fails within 2 s too.
            composed = namespace_from_config(sys.argv[1:], root)
            namespace = composed[0] if composed is not None and not composed[1] else None
        if namespace is not None:
            # Before the seconds of imports and composition: a busy namespace fails at once.
            try:
                locks.acquire_early(root, namespace)
            except locks.NamespaceBusy as err:
                _refuse_busy(err)
        import hydra

        from curation.config_schema import register_configs
        from curation.processes import loky_workers_die_with_parent

        loky_workers_die_with_parent()  # hydra/launcher=joblib: its workers end with curate

        register_configs()
        register_help_resolver()  # the lists of `curate --help` (hydra.help in conf/config.yaml)
        from curation.errors import format_failure, verbose

        message = None if verbose() else (composition_error(sys.argv[1:], root / "conf")
                                          or sweep_error(sys.argv[1:], root / "conf"))
        if message is not None:
            print(format_failure(message), file=sys.stderr, flush=True)
            raise SystemExit(2)
        app = hydra.main(version_base="1.3", config_path=str(root / "conf"), config_name="config")(_task)
        from curation.tracking import interrupts

        interrupts.install()  # Ctrl-C / SIGTERM: one line, the MLflow run KILLED, exit 130 / 143
        with interrupts.handled("curate"):
            app()
    finally:
        locks.release_all()


if __name__ == "__main__":  # python -m curation.hydra_app
    sys.exit(main())


def cli() -> None:
    """The ``curate`` command and ``python -m curation``: :func:`main`, then the process ends without the
    interpreter's teardown. Tearing down the modules a run imported (torch, MLflow, scikit-learn, ...) and
    freeing its objects one by one took ~2 s after the summary was printed, every run. The exit handlers still
    run first (logging's flush, MLflow's, multiprocessing's: ``atexit``), then the standard streams are flushed;
    the run's files are all closed by then. An unexpected exception takes the normal way out (its traceback)."""
    import atexit

    try:
        main()
        code = 0
    except SystemExit as exit_:
        if exit_.code is not None and not isinstance(exit_.code, int):
            raise  # a message to print: Python's own exit does it
        code = exit_.code or 0
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (curate | head): nothing left to write to
            pass
    os._exit(code)

