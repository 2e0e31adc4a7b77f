"""Mutation testing of the scientific core with mutmut 3.x, one module at a time (issue 28; a benchmark, not CI).

Per module, a scratch copy of the project whose ``[tool.mutmut]`` section names that module and its own tests
(under ``--work``); the counts go to ``benchmarks/results/mutation.csv`` (one row per module, replaced on a re-run;
an existing row's ``note``, where survivors are explained, is kept).

    # once: mutmut in its own venv that sees the project's packages (the project's .venv is left alone)
    python3.11 -m venv /work/mutvenv
    echo "$PWD/.venv/lib/python3.11/site-packages" > /work/mutvenv/lib/python3.11/site-packages/project.pth
    /work/mutvenv/bin/pip install mutmut==3.8.1

    # one module (names below), or several; --list prints them
    MUTMUT=/work/mutvenv/bin/mutmut .venv/bin/python benchmarks/mutation/run.py scoring/merge

    # from a git worktree (its data/ lacks the corpus): link another checkout's data/ instead
    MUTMUT=/work/mutvenv/bin/mutmut .venv/bin/python benchmarks/mutation/run.py pruning --data /work/main/data

Survivors: ``<work>/<module>/survivors.txt``; ``mutmut show <name>`` there prints a mutant's diff.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402 (the standard library only: importable from mutmut's venv too)

REPO = bench.ROOT
RESULTS = bench.RESULTS / "mutation.csv"
COLUMNS = ["module", "mutants", "killed", "survived", "timeout", "other", "kill_rate", "seconds", "date", "note"]
# the environment of every test run (the mutants' own and a recheck's)
TEST_ENV = dict(KEDRO_DISABLE_TELEMETRY="true", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", MPLBACKEND="Agg")

# module (under src/curation/) -> the test files that exercise it (the fast ones: no Kedro job, no subprocess),
# then any other pytest arguments (a -k expression)
_DISF = "tests/selection/test_selection_disf.py"
MODULES: dict[str, list[str]] = {
    "scoring/merge": ["tests/scoring/test_scoring_merge.py"],
    "scoring/redpajama": ["tests/scoring/test_scoring_redpajama.py"],
    "scoring/dsir": ["tests/scoring/test_scoring_dsir.py"],
    "pruning": ["tests/pruning/test_pruning.py", "tests/pruning/test_pruning_shards.py"],  # the sharded pruning too
    "metarater/core": ["tests/metarater/test_metarater_core.py", "tests/metarater/test_metarater_compare.py"],
    "metarater/compare": ["tests/metarater/test_metarater_compare.py"],
    # Objective.disf_hutchinson is tested with the DiSF tests (no test in test_selection_objectives.py reaches it)
    "selection/objectives": ["tests/selection/test_selection_objectives.py",
                             f"{_DISF}::test_hutchinson_estimate_is_unbiased_for_the_squared_norm",
                             f"{_DISF}::test_datamask_with_hutchinson_steps_reports_the_exact_objective"],
    "selection/semdedup": ["tests/selection/test_selection_api.py", "-k", "semdedup"],
    "selection/dvrl": ["tests/selection/test_selection_dvrl.py", "tests/selection/test_selection_api.py", "-k", "dvrl"],
    "selection/greedy": ["tests/selection/test_selection_greedy.py", "tests/selection/test_selection_disf.py"],
    # greedy.py and datamask.py were split by job (issue #45): each part is mutated against the same tests
    "selection/greedy_batch": ["tests/selection/test_selection_greedy.py", "tests/selection/test_selection_disf.py"],
    "selection/greedy_disf": ["tests/selection/test_selection_greedy.py", "tests/selection/test_selection_disf.py"],
    "selection/datamask": ["tests/selection/test_selection_datamask.py"],
    "selection/datamask_sampler": ["tests/selection/test_selection_datamask.py"],
    "selection/datamask_policy": ["tests/selection/test_selection_datamask.py"],
    "selection/datamask_health": ["tests/selection/test_selection_datamask.py"],
    "verification/anneal": ["tests/verification/test_verification_anneal.py",
                            "tests/verification/test_verification_schedule.py"],
    "verification/config": ["tests/verification/test_verification_config.py",
                            "tests/verification/test_verification_schedule.py"],
    "verification/seed_loop": ["tests/verification/test_seed_loop.py"],
}

MUTMUT_SECTION = """
[tool.mutmut]
source_paths = ["src"]
only_mutate = ["{module_file}"]
pytest_add_cli_args_test_selection = [{tests}]
pytest_add_cli_args = ["-x", "-q", "-p", "no:cacheprovider"]
also_copy = ["conf", "data", "src"]
# CPU-seconds limit per mutant = (the covering tests' call time + constant) x multiplier x 2. mutmut times a
# test's call phase only, not its session fixtures (the corpus, a trained model), which every mutant's fresh
# pytest session rebuilds: without a constant of this order every mutant "times out"; 120 CPU-s at least
timeout_constant = {timeout_constant}
timeout_multiplier = 2.0
"""

# Modules whose covering tests rebuild heavy fixtures per mutant (a tokenizer, packed corpora, several tiny
# training runs and evaluations for anneal_candidates): with the default constant their mutants hit the wall-clock
# limit (2 x (call time + constant) s) and count as timeouts, not kills.
TIMEOUT_CONSTANT = {"verification/anneal": 150.0}

# `mutmut results --all true` lines: "    curation.scoring.merge.x_quantile_map__mutmut_3: killed"
RESULT_LINE = re.compile(r"^\s*(\S+__mutmut_\d+):\s*(.+?)\s*$")


def prepare(module: str, tests: list[str], work: Path, data: Path = REPO / "data", resume: bool = False) -> Path:
    """A scratch project for one module: its own pyproject.toml with the [tool.mutmut] section.

    ``resume``: keep an existing scratch project (an interrupted run): mutmut skips the mutants it has
    results for. Only when the module and its tests are unchanged since that run: the scratch copy is
    not refreshed, so a resumed run still tests the old copy."""
    root = work / module.replace("/", "__")
    if resume and (root / "mutants").is_dir():
        print(f"{module}: resuming in {root} (the scratch copy of an earlier run)")
        return root
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    for name in ("src", "tests", "conf"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__", "local"))
    (root / "conf" / "local").mkdir(exist_ok=True)
    (root / "data").symlink_to(data.resolve())  # read-only inputs (the corpus); mutmut copies it into mutants/
    pyproject = (REPO / "pyproject.toml").read_text()
    section = MUTMUT_SECTION.format(module_file=f"src/curation/{module}.py",
                                    tests=", ".join(f'"{t}"' for t in tests),
                                    timeout_constant=TIMEOUT_CONSTANT.get(module, 30.0))
    (root / "pyproject.toml").write_text(pyproject + section)
    return root


def counts(statuses: list[str]) -> dict[str, int]:
    killed = sum(s == "killed" for s in statuses)
    survived = sum(s == "survived" for s in statuses)
    timeout = sum(s == "timeout" for s in statuses)
    return {"mutants": len(statuses), "killed": killed, "survived": survived, "timeout": timeout,
            "other": len(statuses) - killed - survived - timeout,
            "kill_rate": round(killed / len(statuses), 3) if statuses else ""}


def result_row(module: str, statuses: list[str], seconds: int | str = "") -> dict[str, object]:
    """One ``mutation.csv`` row of today; ``seconds=""`` (a recheck) keeps the run's seconds in :func:`write`."""
    return {"module": module, **counts(statuses), "seconds": seconds, "date": dt.date.today().isoformat(),
            "note": ""}


def run_module(module: str, mutmut: str, work: Path, max_children: int,
               data: Path = REPO / "data", resume: bool = False) -> dict[str, object]:
    root = prepare(module, MODULES[module], work, data, resume)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # mutmut puts mutants/src first itself
    env.update(TEST_ENV,
               # mutmut forks each mutant's pytest from a process that already ran the tests (its coverage pass):
               # with OpenMP's thread pool started there, a forked child's first parallel torch op can hang (GNU
               # libgomp is not fork-safe), and the mutant is counted as a timeout. One thread per child: no pool.
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    started = time.perf_counter()
    run = subprocess.run([mutmut, "run", "--max-children", str(max_children)], cwd=root, env=env,
                         capture_output=True, text=True)
    seconds = time.perf_counter() - started
    (root / "mutmut_run.log").write_text(run.stdout + run.stderr)
    listed = subprocess.run([mutmut, "results", "--all", "true"], cwd=root, env=env, capture_output=True, text=True)
    statuses = {m.group(1): m.group(2) for m in map(RESULT_LINE.match, listed.stdout.splitlines()) if m}
    if run.returncode != 0 or not statuses or all(s == "not checked" for s in statuses.values()):
        # e.g. "Failed to run clean test": the unmutated tests must pass first
        sys.exit(f"mutmut failed on {module} (exit {run.returncode}); see {root / 'mutmut_run.log'}")
    survivors = sorted(name for name, status in statuses.items() if status != "killed")
    (root / "survivors.txt").write_text("".join(f"{n}: {statuses[n]}\n" for n in survivors))
    row = result_row(module, list(statuses.values()), round(seconds))
    print(f"{module}: {row['killed']}/{row['mutants']} killed, {row['survived']} survived, "
          f"{row['timeout']} timeout, {row['other']} other ({seconds:.0f} s); survivors: {root / 'survivors.txt'}")
    return row


def write(rows: list[dict[str, object]]) -> None:
    """``rows`` into mutation.csv, each replacing its module's row (whose ``note`` it keeps)."""
    existing = {str(r["module"]): r for r in bench.read_rows(RESULTS)} if RESULTS.exists() else {}
    for row in rows:
        old = existing.get(str(row["module"]), {})
        row["note"] = old.get("note", "") or row["note"]
        if row.get("seconds") in ("", None):  # a recheck re-counts, it does not re-time the run: keep its seconds
            row["seconds"] = old.get("seconds", "")
        existing[str(row["module"])] = row
    bench.write_result([existing[m] for m in sorted(existing)], RESULTS, columns=COLUMNS)


def main() -> None:
    parser = bench.parser(
        __doc__, list=(False, "print the modules and their tests"),
        work=Path(os.environ.get("TMPDIR", "/tmp")) / "curation-mutation",
        data=(REPO / "data", "the data/ folder the tests read (the corpus, the models); default: this checkout's"),
        resume=(False, "continue an interrupted run in its scratch copy (module and tests unchanged since)"),
        max_children=int(os.environ.get("MUTMUT_CHILDREN", "1")))
    parser.add_argument("modules", nargs="*", help=f"modules to mutate (default: all): {', '.join(MODULES)}")
    args = parser.parse_args()
    if args.list:
        for module, tests in MODULES.items():
            print(f"{module}: {' '.join(tests)}")
        return
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        sys.exit(f"unknown module(s) {unknown}; known: {list(MODULES)}")
    mutmut = os.environ.get("MUTMUT") or shutil.which("mutmut")
    if not mutmut:
        sys.exit("mutmut not found: set MUTMUT=/path/to/mutmut (see this script's docstring)")
    for module in args.modules or list(MODULES):  # each row is written when its module ends
        write([run_module(module, mutmut, args.work, args.max_children, args.data, args.resume)])


if __name__ == "__main__":
    main()
