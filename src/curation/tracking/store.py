"""Set up the MLflow store named in ``tracking``; shared by the hook, the sweep callback, the reports and the
notebooks.

A SQLite store is created, upgraded and repaired by one process at a time (:func:`prepare_store`). MLflow creates
the tables of an empty store and migrates them to its schema when a process first opens it, with nothing that
keeps a second process from doing the same at the same time; SQLite cannot roll back the migration's table
rebuilds (alembic's ``_alembic_tmp_<table>`` copies), so runs started together on a fresh store left it
half-migrated, and every later run, ``mlflow ui`` and notebook failed on it for good (issue #52: eight
``curate`` runs started together all failed and left four ``_alembic_tmp_*`` tables).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from curation.errors import UserError

log = logging.getLogger(__name__)

PARENT_RUN_ENV = "CURATION_MLFLOW_PARENT_RUN_ID"
MAX_PARAM_VALUE = 6000  # MLflow's limit for one param value
# The experiment's kind: "custom_model_development" ("Machine learning" in the UI's ExperimentKind enum).
# Earlier MLflow 3 UIs opened such an experiment on its runs table; MLflow 3.17.2's UI ignores the tag and
# opens every experiment in the view of the browser's GenAI / Model training toggle (docs/running.md,
# scripts/check_mlflow_landing.py). Kept: the kind is still what the experiment holds.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"


def resolve_uri(uri: str, root: Path) -> str:
    """Anchor a relative ``sqlite:///rel/path.db`` at the project root (Hydra may change the cwd)."""
    prefix = "sqlite:///"
    if uri.startswith(prefix):
        rest = uri[len(prefix):]
        if not rest.startswith("/"):
            path = (root / rest).resolve()
            path.parent.mkdir(parents=True, exist_ok=True)
            return prefix + str(path)
        Path(rest).parent.mkdir(parents=True, exist_ok=True)
    return uri


def resolve_artifact_location(location: str, root: Path) -> str:
    if "://" in location:
        return location
    path = Path(location)
    if not path.is_absolute():
        path = root / path
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve().as_uri()


class TrackingStoreError(UserError):
    """The MLflow store cannot be used (read-only, not a database, locked by another process)."""


def check_store(uri: str, timeout_s: float = 2.0) -> None:
    """Fail in seconds, in one line, on a SQLite store MLflow cannot write: read-only, corrupt (not a database)
    or locked by another process. MLflow itself retries such a store for ~100 s and then prints a 100-200-line
    sqlalchemy trace that names neither ``tracking.uri`` nor how to run without tracking (issue #44). Other
    stores (a server, a folder) are left to MLflow."""
    import sqlite3

    prefix = "sqlite:///"
    if not uri.startswith(prefix):
        return
    path = Path(uri[len(prefix):])
    fix = "fix or move it, point tracking.uri at another store, or run without tracking: tracking.enabled=false"
    if not path.exists():
        if not os.access(path.parent, os.W_OK):
            raise TrackingStoreError(f"the MLflow store {path} (tracking.uri) cannot be created: its folder is not "
                                     f"writable; {fix}")
        return
    if not os.access(path, os.R_OK | os.W_OK) or not os.access(path.parent, os.W_OK):
        raise TrackingStoreError(f"the MLflow store {path} (tracking.uri) is read-only (the file or its folder); {fix}")
    try:
        con = sqlite3.connect(str(path), timeout=timeout_s)
    except sqlite3.Error as err:
        raise TrackingStoreError(f"the MLflow store {path} (tracking.uri) cannot be opened ({err}); {fix}") from None
    try:
        con.execute("select count(*) from sqlite_master").fetchone()
        con.execute("begin immediate")  # a write lock: what MLflow's first write needs
        con.rollback()
    except sqlite3.DatabaseError as err:
        text = str(err)
        what = (f"locked by another process for over {timeout_s:g} s" if "locked" in text or "busy" in text
                else "read-only" if "readonly" in text else f"not a usable SQLite database ({text})")
        raise TrackingStoreError(f"the MLflow store {path} (tracking.uri) is {what}; {fix}") from None
    finally:
        con.close()


SQLITE_PREFIX = "sqlite:///"
TMP_PREFIX = "_alembic_tmp_"  # alembic's copy of a table it rebuilds (SQLite cannot alter most columns in place)
LOCK_WAIT_S = 600.0  # a large store's migration takes minutes; a holder stopped for longer than this is named
LOCK_REPORT_S = 30.0
_FIX = "point tracking.uri at another store, or run without tracking: tracking.enabled=false"


def sqlite_path(uri: str) -> Path | None:
    """The file of a ``sqlite:///`` store (None for a server, a folder or an in-memory store)."""
    if not uri.startswith(SQLITE_PREFIX):
        return None
    rest = uri[len(SQLITE_PREFIX):]
    return Path(rest) if rest and rest != ":memory:" else None


def store_lock_path(path: Path) -> Path:
    """``<store>.lock`` beside the SQLite file (``mlruns/mlflow.db.lock``): beside it, not under ``/tmp``, so
    that every process that opens that file shares it, whatever its temp folder or user."""
    return path.with_name(path.name + ".lock")


def _holder(fd: int) -> str:
    from curation.namespace_lock import Holder

    try:
        raw = os.pread(fd, 1 << 16, 0)
        return Holder(**json.loads(raw.decode())).describe() if raw.strip() else "another process"
    except (OSError, ValueError, TypeError):
        return "another process"


def _try_flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


@contextmanager
def store_lock(path: Path, wait_s: float = LOCK_WAIT_S, report_every_s: float = LOCK_REPORT_S) -> Iterator[None]:
    """Hold the store's lock file (an exclusive ``flock``: the kernel releases it however the holder ends, so a
    killed holder never blocks the next process). Another holder is waited for, with a log line that names it
    (it is creating, checking, upgrading or repairing the store, which takes seconds, minutes for a large
    upgrade); after ``wait_s`` the wait ends in one line naming it."""
    from curation.namespace_lock import Holder

    lock = store_lock_path(path)
    try:
        # group-writable under a shared umask (002): a team on one checkout shares one lock file
        fd, recorded = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666), True
    except PermissionError:  # another member's lock file: flock needs no write access, only the record does
        fd, recorded = os.open(lock, os.O_RDONLY), False
    acquired = False
    try:
        if not _try_flock(fd):
            started = last = time.monotonic()
            log.info("waiting for %s, which is preparing the MLflow store %s (creating, checking or upgrading it)",
                     _holder(fd), path)
            while not _try_flock(fd):
                now = time.monotonic()
                if now - started > wait_s:
                    raise TrackingStoreError(
                        f"the MLflow store {path} (tracking.uri) has been held for over {wait_s:.0f} s by "
                        f"{_holder(fd)} (lock file {lock}); wait for it or stop it, {_FIX}")
                if now - last >= report_every_s:
                    last = now
                    log.warning("still waiting (%.0f s) for %s to prepare the MLflow store %s", now - started,
                                _holder(fd), path)
                time.sleep(0.05)
            log.info("the MLflow store %s is free after %.1f s", path, time.monotonic() - started)
        acquired = True
        if recorded:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(Holder.me().__dict__).encode(), 0)
        yield
    finally:
        if acquired and recorded:  # never the record of a holder this process only waited for
            try:
                os.ftruncate(fd, 0)
            except OSError:
                pass
        os.close(fd)  # drops the flock


@dataclass
class StoreState:
    """What a SQLite store holds, read with ``sqlite3`` alone (MLflow would start migrating it on open)."""

    tables: set[str] = field(default_factory=set)
    version: str | None = None  # alembic_version: the schema revision the last finished migration step recorded
    runs: int | None = None  # rows of ``runs`` (of its ``_alembic_tmp_runs`` copy when ``runs`` itself is gone)

    @property
    def tmp_tables(self) -> list[str]:
        return sorted(t for t in self.tables if t.startswith(TMP_PREFIX))


def store_state(path: Path, timeout_s: float = 20.0) -> StoreState:
    con = sqlite3.connect(str(path), timeout=timeout_s)
    try:
        tables = {r[0] for r in con.execute("select name from sqlite_master where type = 'table'")}
        version = None
        if "alembic_version" in tables:
            row = con.execute("select version_num from alembic_version").fetchone()
            version = row[0] if row else None
        counted = "runs" if "runs" in tables else f"{TMP_PREFIX}runs" if f"{TMP_PREFIX}runs" in tables else None
        runs = con.execute(f'select count(*) from "{counted}"').fetchone()[0] if counted else None
    finally:
        con.close()
    return StoreState(tables, version, runs)


def _copy_db(source: Path, target: Path) -> None:
    """A consistent copy with SQLite's online backup (the whole database, replacing ``target``'s content)."""
    src, dst = sqlite3.connect(str(source), timeout=20), sqlite3.connect(str(target), timeout=20)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()


def _head() -> str:
    """The schema revision of the installed MLflow (its newest migration)."""
    from mlflow.store.db.utils import _get_latest_schema_revision  # what MLflow's own schema check compares with

    return _get_latest_schema_revision()


def _known_revision(revision: str | None) -> bool:
    from alembic.script import ScriptDirectory
    from mlflow.store.db.utils import _get_alembic_config

    if revision is None:
        return True
    try:
        return ScriptDirectory.from_config(_get_alembic_config("")).get_revision(revision) is not None
    except Exception:  # alembic: "Can't locate revision identified by ..."
        return False


def _migrate(uri: str, version: str | None) -> None:
    """Run MLflow's migrations from ``version`` to the installed MLflow's head, as ``mlflow db upgrade`` does
    (``version`` None: MLflow's own creation of a store, its first tables and then every migration)."""
    from mlflow.store.db.utils import _initialize_tables, _upgrade_db, create_sqlalchemy_engine

    engine = create_sqlalchemy_engine(uri)
    try:
        if version is None:
            _initialize_tables(engine)
        else:
            _upgrade_db(engine)
    finally:
        engine.dispose()


def _schema_gaps(path: Path) -> list[str]:
    """The tables and columns of MLflow's models that the store lacks (empty: it has every one; ``table_xinfo``
    lists generated columns too, as ``spans.duration_ns``)."""
    import mlflow.store.db.utils  # noqa: F401  (imports every model, so that Base.metadata is complete)
    from mlflow.store.db.base_sql_model import Base

    con = sqlite3.connect(str(path), timeout=20)
    try:
        gaps = []
        for name, table in sorted(Base.metadata.tables.items()):
            columns = {row[1] for row in con.execute(f'pragma table_xinfo("{name}")')}
            missing = [c for c in table.columns.keys() if c not in columns]
            if not columns:
                gaps.append(f"table {name}")
            elif missing:
                more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
                gaps.append(f"{name}.{','.join(missing[:3])}{more}")
        return gaps
    finally:
        con.close()


def _repair(uri: str, path: Path, state: StoreState) -> None:
    """Finish the migration that left ``state.tmp_tables`` behind, keeping every recorded run, or leave the
    store as it was and refuse in one line.

    Alembic rebuilds a table ``t`` as: create ``_alembic_tmp_t``, copy every row of ``t`` into it (one
    ``INSERT ... SELECT``, atomic), drop ``t``, rename the copy to ``t``; SQLite runs each step on its own, so a
    process that fails or dies between two leaves the copy. Where ``t`` still exists it holds every row (the copy
    is dropped); where ``t`` is gone the copy is complete, as the drop follows the copy (it is renamed back).
    Then the migrations run on from the revision the store records, and the result is checked: at the
    installed MLflow's revision, every table and column of MLflow's models, as many runs as before. A copy of
    the store as found is kept beside it (``<store>.before-repair-<time>``), and put back if any step fails."""
    head = _head()
    backup = path.with_name(f"{path.name}.before-repair-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    _copy_db(path, backup)
    runs = state.runs or 0
    log.warning("the MLflow store %s was left half-migrated (tables %s of an interrupted migration, schema %s, "
                "%d runs): repairing it (a copy of it as it was: %s)", path, ", ".join(state.tmp_tables),
                state.version, runs, backup)
    try:
        con = sqlite3.connect(str(path), timeout=20, isolation_level=None)
        try:
            con.execute("begin immediate")  # SQLite's DDL is transactional: all of these or none
            for tmp in state.tmp_tables:
                original = tmp[len(TMP_PREFIX):]
                if original in state.tables:
                    con.execute(f'drop table "{tmp}"')
                else:
                    con.execute(f'alter table "{tmp}" rename to "{original}"')
            con.execute("commit")
        except BaseException:
            if con.in_transaction:
                con.execute("rollback")
            raise
        finally:
            con.close()
        if store_state(path).version != head:
            _migrate(uri, store_state(path).version)
        after = store_state(path)
        gaps = _schema_gaps(path)
        problems = ([f"schema {after.version}, not {head}"] if after.version != head else []) + \
            ([f"lacks {', '.join(gaps[:3])}"] if gaps else []) + \
            ([f"{after.runs or 0} runs where it had {runs}"] if (after.runs or 0) != runs else []) + \
            ([f"still holds {', '.join(after.tmp_tables)}"] if after.tmp_tables else [])
        if problems:
            raise RuntimeError("; ".join(problems))
    except Exception as err:
        _copy_db(backup, path)  # as it was found
        first = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
        raise TrackingStoreError(
            f"the MLflow store {path} (tracking.uri) was left half-migrated ({', '.join(state.tmp_tables)}; schema "
            f"{state.version}, {runs} runs) and could not be repaired ({first[:120]}); it is as it was (a copy: "
            f"{backup.name}). Fix: move it aside (mv {path} {path}.broken: a new store is made, its runs stay in the "
            f"moved file), {_FIX}") from None
    log.warning("the MLflow store %s is repaired: schema %s, %d runs kept (the copy as it was found: %s)", path,
                head, runs, backup)


def _open_with_mlflow(uri: str, path: Path) -> None:
    """Open the store with MLflow, as a run will, under the lock: a store that lacks tables of MLflow's models
    (an empty one, or one of an older MLflow) gets them from MLflow's own creation path (its first tables, then
    every migration from the revision the store records); any store has its schema checked against the installed
    MLflow's. Where MLflow refuses an older schema (every table there, an older revision), the store is upgraded
    when it holds no run (nothing to lose), else refused in one line naming ``mlflow db upgrade``; a store of a
    newer MLflow is refused in one line."""
    from mlflow import MlflowClient

    try:
        MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
        return
    except Exception as err:
        failure = err
    state = store_state(path)
    head = _head()
    if state.version not in (None, head) and not _known_revision(state.version):
        import mlflow

        raise TrackingStoreError(
            f"the MLflow store {path} (tracking.uri) has schema {state.version}, of a newer MLflow than the "
            f"installed {mlflow.__version__} (schema {head}); open it with that MLflow, {_FIX}") from None
    if state.version != head and not state.runs:
        log.warning("the MLflow store %s holds no run and schema %s: upgrading it to %s", path, state.version, head)
        _migrate(uri, state.version)
        MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
        return
    if state.version != head:
        raise TrackingStoreError(
            f"the MLflow store {path} (tracking.uri) has the schema of an older MLflow ({state.version}; the "
            f"installed one's is {head}) and holds {state.runs} runs. Fix: back it up (cp {path} {path}.bak), then "
            f"upgrade it: mlflow db upgrade {uri}; or {_FIX}") from None
    first = next((line.strip() for line in str(failure).splitlines() if line.strip()), "")
    raise TrackingStoreError(f"the MLflow store {path} (tracking.uri) cannot be opened by MLflow "
                             f"({type(failure).__name__}: {first[:200]}); fix or move it, {_FIX}") from None


_PREPARED: set[tuple[str, int, int]] = set()  # (uri, st_dev, st_ino) this process has prepared


def prepare_store(uri: str) -> None:
    """Make the SQLite store at ``uri`` ready for MLflow, one process at a time (:func:`store_lock`): refused in
    one line when it cannot be used (:func:`check_store`); created when new; repaired when a migration was
    left half-done (:func:`_repair`); checked against the installed MLflow's schema. Processes that start
    together on a fresh store wait while the first creates it, instead of all running MLflow's migrations at
    once. Once per store and process; other stores (a server, a folder) are left to MLflow."""
    path = sqlite_path(uri)
    if path is None:
        return
    try:
        stat = path.stat()
        key = (uri, stat.st_dev, stat.st_ino)
    except OSError:
        key = None
    if key is not None and key in _PREPARED:
        return
    if not os.access(path.parent, os.W_OK):
        check_store(uri)  # the one line for a folder that is not writable (the lock file goes there too)
    # MLflow's store and migration modules are imported before the lock, not under it: their imports took ~3 s
    # of the ~3.2 s a holder held it (8 processes on 2 cores: the eighth waited ~60 s), the rest is ~0.2 s.
    import alembic.migration  # noqa: F401
    import alembic.script  # noqa: F401
    import mlflow.store.db.utils  # noqa: F401
    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
    from mlflow import MlflowClient  # noqa: F401

    with store_lock(path):
        check_store(uri)  # under the lock: no migration of another process holds SQLite's write lock now
        state = store_state(path) if path.exists() else StoreState()
        if state.tmp_tables:
            _repair(uri, path, state)
        _open_with_mlflow(uri, path)
    stat = path.stat()
    _PREPARED.add((uri, stat.st_dev, stat.st_ino))


def tracking_uri(uri: str, root: Path) -> str:
    """``uri`` anchored at the project root (:func:`resolve_uri`) with its store prepared (:func:`prepare_store`):
    what a notebook or script hands to ``mlflow.set_tracking_uri``."""
    resolved = resolve_uri(uri, root)
    prepare_store(resolved)
    return resolved


def setup_experiment(tracking: Mapping[str, Any], root: Path) -> str:
    """Point MLflow at the configured store (prepared first: :func:`prepare_store`); return the experiment id
    (created if new)."""
    import mlflow

    uri = resolve_uri(str(tracking["uri"]), root)
    prepare_store(uri)
    mlflow.set_tracking_uri(uri)
    name = str(tracking.get("experiment_name") or "curation")
    experiment = mlflow.get_experiment_by_name(name)
    if experiment is None:
        try:
            experiment_id = mlflow.create_experiment(
                name, artifact_location=resolve_artifact_location(str(tracking["artifact_location"]), root),
                tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND},
            )
        except Exception:  # another process of the same sweep created it first
            experiment = mlflow.get_experiment_by_name(name)
            if experiment is None:
                raise
            experiment_id = experiment.experiment_id
    else:
        experiment_id = experiment.experiment_id
    if experiment is not None and EXPERIMENT_KIND_TAG not in (experiment.tags or {}):
        # Stores made before the tag existed (or by MLflow itself) get it on their next run;
        # a kind the user chose in the UI is kept.
        mlflow.MlflowClient().set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    return experiment_id


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"data": {"max_docs": 5}}`` -> ``{"data.max_docs": 5}``."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, prefix=f"{name}."))
        else:
            out[name] = value
    return out


def params_for_mlflow(config: Mapping[str, Any]) -> dict[str, str]:
    params = {}
    for key, value in flatten(config).items():
        text = "null" if value is None else str(value)
        params[key] = text if len(text) <= MAX_PARAM_VALUE else text[: MAX_PARAM_VALUE - 3] + "..."
    return params


def parent_run_from_env() -> str | None:
    return os.environ.get(PARENT_RUN_ENV) or None


def main(argv: list[str] | None = None) -> int:
    """``python -m curation.tracking.store [URI]``: prepare a store (:func:`prepare_store`: check, create, repair)
    without a run, e.g. before ``mlflow ui`` opens one that was left half-migrated. ``URI`` defaults to the
    project's ``tracking.uri`` (``conf/tracking/sqlite.yaml``). Prints one line; exit status 2 when refused."""
    import sys

    import yaml

    from curation.errors import user_message
    from curation.paths import project_root

    args = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    root = project_root()
    uri = args[0] if args else str(yaml.safe_load((root / "conf" / "tracking" / "sqlite.yaml").read_text())["uri"])
    uri = resolve_uri(uri, root)
    try:
        prepare_store(uri)
    except TrackingStoreError as err:
        print(f"curation.tracking.store: error: {user_message(err) or err}", file=sys.stderr)
        return 2
    state = store_state(Path(uri[len(SQLITE_PREFIX):])) if sqlite_path(uri) else None
    print(f"the MLflow store {uri} is ready" + (f": schema {state.version}, {state.runs} runs" if state else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
