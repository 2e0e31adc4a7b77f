"""Mutation testing of the scientific core with mutmut 3.x, one module at a time (issue 28; a benchmark, not CI).

Per module, a scratch copy of the project whose ``[tool.mutmut]`` section names that module and its own tests
(under ``--work``); the counts go to ``benchmarks/results/mutation.csv`` (one row per module, replaced on a re-run;
an existing row's ``note``, where survivors are explained, is kept). mutmut lives in its own venv that sees the
project's packages (set up as docs/running.md, "Mutation testing", says):

    # one module (names below), or several; --list prints them
    MUTMUT=/work/mutvenv/bin/mutmut .venv/bin/python benchmarks/mutation/run.py scoring/merge
    # from a git worktree (its data/ lacks the corpus): link another checkout's data/ instead
    MUTMUT=/work/mutvenv/bin/mutmut .venv/bin/python benchmarks/mutation/run.py pruning --data /work/main/data
    # a finished run's survivors against this checkout's tests (in mutmut's venv: it reads mutmut's status names)
    /work/mutvenv/bin/python benchmarks/mutation/run.py --recheck selection/datamask --jobs 2

Survivors: ``<work>/<module>/survivors.txt``; ``mutmut show <name>`` there prints a mutant's diff. ``--recheck``
runs them against the current tests, one pytest process per mutant (``MUTANT_UNDER_TEST``, as mutmut does), only
while the module is unchanged since the run: ``<work>/<module>/recheck.txt``; ``--update``: the recounted row.
"""

from __future__ import annotations

import datetime as dt
import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
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


def result_row(module: str, statuses: list[str], seconds: int | str = "") -> dict[str, object]:
    """One ``mutation.csv`` row of today; ``seconds=""`` (a recheck) keeps the run's seconds in :func:`write`."""
    killed, survived, timeout = (sum(s == name for s in statuses) for name in ("killed", "survived", "timeout"))
    return {"module": module, "mutants": len(statuses), "killed": killed, "survived": survived, "timeout": timeout,
            "other": len(statuses) - killed - survived - timeout,
            "kill_rate": round(killed / len(statuses), 3) if statuses else "", "seconds": seconds,
            "date": dt.date.today().isoformat(), "note": ""}


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


# --- --recheck: a finished run's survivors against this checkout's tests ---------------------------------------

def statuses(root: Path, module: str) -> dict[str, str]:
    from mutmut.stats import status_by_exit_code  # mutmut's venv only: the same names as `mutmut results`

    meta = root / "mutants" / "src" / "curation" / f"{module}.py.meta"
    codes = json.loads(meta.read_text())["exit_code_by_key"]
    return {name: status_by_exit_code[code] for name, code in codes.items()}


def run_one(name: str, root: Path, tests: list[str], timeout: float, first: list[str] | None = None,
            first_only: bool = False) -> str:
    """``first``: tests to try alone before the whole set (the new tests: a kill there ends the check early).
    ``first_only``: decide on them alone, when they are the only tests added or changed since the run (the
    others passed against the mutant in the run, so running them again cannot change a "survived")."""
    if first:
        verdict = run_one(name, root, first, timeout)
        if verdict != "survived" or first_only:
            return verdict
    env = {**os.environ, "MUTANT_UNDER_TEST": name, "PYTHONPATH": str(root / "mutants" / "src"), **TEST_ENV}
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout"
    if done.returncode == 0:
        return "survived"
    if done.returncode in (1,):
        return "killed"
    # 2-5: pytest could not run (a collection error, no tests): say so rather than count a kill
    raise SystemExit(f"{name}: pytest exit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def _test_functions(path: Path) -> tuple[dict[str, str], str]:
    """A test file's top-level test functions (name -> source, decorators included) and the rest of the file."""
    import ast

    text = path.read_text()
    lines = text.splitlines(keepends=True)
    tests, spans = {}, []
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
            tests[node.name] = "".join(lines[start : node.end_lineno])
            spans.append((start, node.end_lineno))
    rest = "".join(line for i, line in enumerate(lines) if not any(a <= i < b for a, b in spans))
    return tests, rest


def changed_tests(root: Path, tests: list[str]) -> list[str]:
    """Node ids of the test functions added or changed in this checkout since the run's copy was made."""
    changed = []
    for spec in tests:
        if spec.startswith("-") or not spec.endswith(".py"):
            continue  # pytest options (-k ...) and single node ids: not compared
        now, rest_now = _test_functions(REPO / spec)
        then, rest_then = _test_functions(root / spec)
        changed += [f"{spec}::{name}" for name, source in now.items() if then.get(name) != source]
        if rest_now != rest_then:
            print(f"note: {spec} changed outside its test functions (imports, helpers, fixtures) since the run")
    return changed


def recheck(module: str, args) -> None:
    root = args.work / module.replace("/", "__")
    if not filecmp.cmp(root / "src" / "curation" / f"{module}.py", REPO / "src" / "curation" / f"{module}.py",
                       shallow=False):
        raise SystemExit(f"src/curation/{module}.py changed since the run in {root}: re-run the module instead")
    status = statuses(root, module)
    survivors = sorted(n for n, s in status.items() if s in args.statuses and re.search(args.only, n))
    print(f"{module}: rechecking {len(survivors)} mutants ({', '.join(args.statuses)}) against this checkout's tests",
          flush=True)
    tests = MODULES[module]
    if args.changed:
        args.first = changed_tests(root, tests)
        print(f"{len(args.first)} tests added or changed since the run: "
              f"{', '.join(t.split('::')[1] for t in args.first)}")
    done_file = root / "recheck.txt"  # one line per mutant as it finishes: a stopped recheck keeps its answers
    verdicts = {}
    if done_file.exists():
        verdicts = dict(line.rstrip("\n").rsplit(": ", 1) for line in done_file.read_text().splitlines() if line)
        print(f"{len(verdicts)} already rechecked in {done_file}")
    todo = [n for n in survivors if n not in verdicts]

    def one(name: str) -> None:
        verdicts[name] = run_one(name, root, tests, args.timeout, args.first, args.first_only)
        with done_file.open("a") as f:
            f.write(f"{name}: {verdicts[name]}\n")

    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(one, todo))
    status.update(verdicts)
    row = result_row(module, list(status.values()))
    newly = sum(verdicts.get(n) == "killed" for n in survivors)
    print(f"{module}: {newly} of {len(survivors)} survivors now killed; {row['killed']}/{row['mutants']} "
          f"= {row['killed'] / row['mutants']:.3f}; list in {root / 'recheck.txt'}")
    if args.update:
        write([row])


def main() -> None:
    parser = bench.parser(
        __doc__, list=(False, "print the modules and their tests"),
        work=Path(os.environ.get("TMPDIR", "/tmp")) / "curation-mutation",
        data=(REPO / "data", "the data/ folder the tests read (the corpus, the models); default: this checkout's"),
        resume=(False, "continue an interrupted run in its scratch copy (module and tests unchanged since)"),
        max_children=int(os.environ.get("MUTMUT_CHILDREN", "1")),
        recheck=(False, "re-check one module's finished run against this checkout's tests (the options below)"),
        jobs=(1, "recheck: pytest processes at once"), timeout=(300.0, "recheck: seconds per mutant"),
        update=(False, "recheck: write the recounted row to mutation.csv"),
        statuses=(["survived"], "recheck: which results to run again, e.g. survived timeout (a timeout beside other "
                                "jobs may be a slow kill)"),
        first={"nargs": "*", "default": None,
               "help": "recheck: test ids to run alone first (e.g. the tests written since the run; a kill ends "
                       "there)"},
        only=("", "recheck: a regular expression: recheck only the mutants it matches"),
        changed=(False, "recheck: --first = the module's test functions added or changed since the run's copy"),
        first_only=(False, "recheck: decide on --first alone: they are every test added or changed since the run"))
    parser.add_argument("modules", nargs="*", help=f"modules to mutate (default: all): {', '.join(MODULES)}")
    args = parser.parse_args()
    if args.list:
        for module, tests in MODULES.items():
            print(f"{module}: {' '.join(tests)}")
        return
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        sys.exit(f"unknown module(s) {unknown}; known: {list(MODULES)}")
    if args.recheck:
        if len(args.modules) != 1:
            sys.exit("--recheck takes one module")
        return recheck(args.modules[0], args)
    mutmut = os.environ.get("MUTMUT") or shutil.which("mutmut")
    if not mutmut:
        sys.exit("mutmut not found: set MUTMUT=/path/to/mutmut (see this script's docstring)")
    for module in args.modules or list(MODULES):  # each row is written when its module ends
        write([run_module(module, mutmut, args.work, args.max_children, args.data, args.resume)])


if __name__ == "__main__":
    main()
