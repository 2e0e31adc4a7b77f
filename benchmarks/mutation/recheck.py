"""Re-check a finished run's survivors against the project's *current* tests (issue 28).

Each surviving mutant of ``<work>/<module>`` (its ``mutants/src``) against this checkout's test files, one
pytest process per mutant (``MUTANT_UNDER_TEST``, as mutmut does); only while the module is unchanged since the run.

    MUTMUT=/work/mutvenv/bin/mutmut .venv/bin/python benchmarks/mutation/run.py selection/datamask   # the run
    /work/mutvenv/bin/python benchmarks/mutation/recheck.py selection/datamask --jobs 2  # its survivors, again

Writes ``<work>/<module>/recheck.txt`` and, with ``--update``, the recounted row of ``mutation.csv``.
"""

from __future__ import annotations

import filecmp
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import MODULES, REPO, TEST_ENV, bench, counts, result_row, write  # noqa: E402

from mutmut.stats import status_by_exit_code  # the venv that has mutmut: the same names as `mutmut results`


def statuses(root: Path, module: str) -> dict[str, str]:
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


def main() -> None:
    parser = bench.parser(
        __doc__, work=Path("/tmp/curation-mutation"), jobs=1, timeout=(300.0, "seconds per mutant"),
        update=(False, "write the recounted row to mutation.csv"),
        statuses=(["survived"], "which results to run again, e.g. survived timeout (a timeout beside other jobs may be "
                                "a slow kill)"),
        first={"nargs": "*", "default": None,
               "help": "test ids to run alone first (e.g. the tests written since the run; a kill ends there)"},
        only=("", "a regular expression: recheck only the mutants it matches"),
        changed=(False, "--first = the module's test functions added or changed since the run's copy"),
        first_only=(False, "decide on --first alone: they are every test added or changed since the run"))
    parser.add_argument("module", choices=sorted(MODULES))
    args = parser.parse_args()
    root = args.work / args.module.replace("/", "__")
    if not filecmp.cmp(root / "src" / "curation" / f"{args.module}.py", REPO / "src" / "curation" / f"{args.module}.py",
                       shallow=False):
        raise SystemExit(f"src/curation/{args.module}.py changed since the run in {root}: re-run the module instead")
    status = statuses(root, args.module)
    survivors = sorted(n for n, s in status.items() if s in args.statuses and re.search(args.only, n))
    print(f"{args.module}: rechecking {len(survivors)} mutants ({', '.join(args.statuses)}) against this checkout's tests", flush=True)
    tests = MODULES[args.module]
    if args.changed:
        args.first = changed_tests(root, tests)
        print(f"{len(args.first)} tests added or changed since the run: {', '.join(t.split('::')[1] for t in args.first)}")
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
    row = counts(list(status.values()))
    newly = sum(verdicts.get(n) == "killed" for n in survivors)
    print(f"{args.module}: {newly} of {len(survivors)} survivors now killed; {row['killed']}/{row['mutants']} "
          f"= {row['killed'] / row['mutants']:.3f}; list in {root / 'recheck.txt'}")
    if args.update:
        write([result_row(args.module, list(status.values()))])


if __name__ == "__main__":
    main()
