"""The benchmarks' shared driver (benchmarks/_driver.py, _driver.sh) and a smoke test of every benchmark script.

CI: the driver's functions on tmp_path, every script compiled and its ``--help`` (in this process: the imports
are paid once), every bash wrapper through ``bash -n``. ``-m optin``: tiny end-to-end runs of the drivers that
need no prepared namespace, GPU or second environment, each writing into tmp_path (``BENCH_RESULTS``), never
into benchmarks/results.
"""

from __future__ import annotations

import csv
import json
import os
import py_compile
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"
SCRIPTS = sorted(p for p in BENCH.rglob("*.py") if "results" not in p.parts)
WRAPPERS = sorted(p for p in BENCH.rglob("*.sh") if "results" not in p.parts)

sys.path.insert(0, str(BENCH))
import _driver as bench  # noqa: E402

# scripts whose command line is not argparse's (positional arguments, or code at import): imported, not run
NO_HELP = {"scale/process_tree.py", "_driver.py"}
# run in another environment (datatrove's): compiled here, their --help only where that import is found
OTHER_ENV = {"scale/datatrove_side.py": "datatrove"}


def _name(path: Path) -> str:
    return path.relative_to(BENCH).as_posix()


# --- the driver ---------------------------------------------------------------------------------------------

def test_write_result_writes_the_csv_the_plot_and_logs_both(tmp_path, monkeypatch):
    logged = {}
    import curation.tracking.benchmarks as tracking

    monkeypatch.setattr(tracking, "log_benchmark", lambda name, **kw: logged.update(name=name, **kw))

    def plot(rows, png):
        with bench.figure(png, 1, 2, figsize=(3, 2)) as (fig, axes):
            axes[0].plot([r["n"] for r in rows], [r["seconds"] for r in rows])
        plot.rows = rows

    rows = [{"n": 1, "seconds": 0.5}, {"n": 2, "seconds": 1.25, "note": "late column"}]
    out = tmp_path / "deep" / "result.csv"
    csv_path, png = bench.write_result(rows, out, plot=plot, comment="n=2; data=synthetic",
                                       log={"name": "smoke", "metrics": {"x": 1.0}})
    lines = out.read_text().splitlines()
    assert lines[0] == "# n=2; data=synthetic"
    assert lines[1:] == ["n,seconds,note", "1,0.5,", "2,1.25,late column"]
    assert (csv_path, png) == (out, out.with_suffix(".png"))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.rows == rows
    assert logged == {"name": "smoke", "files": [out, png], "metrics": {"x": 1.0}}


def test_write_result_appends_and_keeps_every_cell_as_written(tmp_path):
    out = tmp_path / "r.csv"
    bench.write_result([{"id": "007", "load": "0.52 0.61 0.70", "x": 0.1, "k": 3, "digest": "1e5"}], out)
    _, png = bench.write_result([{"id": "8", "load": "1.0 1.0 1.0", "x": 2.5, "k": 4, "digest": "ab"}], out,
                                append=True, columns=["id", "load", "x", "k", "digest"])
    assert png is None and not out.with_suffix(".png").exists()
    assert out.read_text().splitlines() == ["id,load,x,k,digest", "007,0.52 0.61 0.70,0.1,3,1e5",
                                            "8,1.0 1.0 1.0,2.5,4,ab"]
    rows = bench.read_rows(out)
    assert [type(rows[1][k]) for k in ("id", "x", "k")] == [int, float, int]
    assert rows[0]["id"] == "007" and rows[0]["digest"] == "1e5"  # would not write back the same: text


def test_write_result_takes_a_dataframe_as_pandas_writes_it(tmp_path):
    import pandas as pd

    frame = pd.DataFrame({"path": ["frame", "shards"], "docs": [10, 10], "identical": [True, True]})
    bench.write_result(frame, tmp_path / "f.csv")
    assert (tmp_path / "f.csv").read_text() == frame.to_csv(index=False)


def test_load_record():
    assert isinstance(bench.loadavg(), float) and bench.loadavg() >= 0
    three = bench.loadavg3().split()
    assert len(three) == 3 and all(float(v) >= 0 for v in three)


def test_parser_takes_the_shared_options_with_each_scripts_defaults(tmp_path):
    p = bench.parser("Title line.\n\nMore.", n=100_000, keep=0.1, sizes=[100_000, 300_000], engines=["local", "ray"],
                     out=tmp_path / "a.csv", steps=("pws:20", "diversity:K"), baseline=(False, "also the baseline"),
                     f_greedy={"type": float, "default": None}, corpus_dir=tmp_path, mlflow=True)
    assert p.description == "Title line."
    defaults = p.parse_args([])
    assert (defaults.n, defaults.keep, defaults.sizes, defaults.engines) == (100_000, 0.1, [100_000, 300_000],
                                                                             ["local", "ray"])
    assert (defaults.out, defaults.steps, defaults.baseline, defaults.f_greedy, defaults.no_mlflow) == (
        tmp_path / "a.csv", "pws:20", False, None, False)
    args = p.parse_args(["--n", "2000", "--keep", "0.5", "--sizes", "10", "20", "--engines", "local-w2", "--out",
                         str(tmp_path / "b.csv"), "--baseline", "--f-greedy", "-0.2", "--corpus-dir", "/x",
                         "--no-mlflow"])
    assert (args.n, args.keep, args.sizes, args.engines, args.f_greedy) == (2000, 0.5, [10, 20], ["local-w2"], -0.2)
    assert args.out == tmp_path / "b.csv" and args.corpus_dir == Path("/x") and args.baseline and args.no_mlflow
    assert "diversity:K" in p.format_help()
    with pytest.raises(SystemExit):
        p.parse_args(["--n", "many"])


def test_commands_build_one_parser_per_step():
    p = bench.commands("Steps.", "step", prepare=dict(out={"required": True}, set={"default": "a", "choices": "ab"}),
                       run=dict(seeds=3, seed=None, lr=1e-3))
    args = p.parse_args(["run", "--seed", "2"])
    assert (args.step, args.seeds, args.seed, args.lr) == ("run", 3, 2, 1e-3)
    assert p.parse_args(["prepare", "--out", "o"]).out == Path("o")
    with pytest.raises(SystemExit):
        p.parse_args(["prepare"])  # --out is required


def test_gpu_pattern_caches_cells_fans_out_and_gathers(tmp_path):
    made = []
    make = lambda: made.append(1) or {"corpus": "raw", "seed": len(made)}  # noqa: E731
    assert bench.cell(tmp_path / "cells" / "raw-0.json", make) == {"corpus": "raw", "seed": 1}
    assert bench.cell(tmp_path / "cells" / "raw-0.json", make) == {"corpus": "raw", "seed": 1} and made == [1]
    (tmp_path / "cells" / "raw-0.items.json").write_text("{}")
    assert bench.cells(tmp_path / "cells") == [{"corpus": "raw", "seed": 1}]
    script = tmp_path / "child.py"
    script.write_text("import sys, pathlib; pathlib.Path(sys.argv[3]).write_text(sys.argv[2])\n")
    gathered = []
    bench.fan_out(str(script), [["a", str(tmp_path / "a.txt")], ["b", str(tmp_path / "b.txt")]],
                  lambda: gathered.append(sorted(p.read_text() for p in tmp_path.glob("?.txt"))))
    assert gathered == [["a", "b"]]
    assert bench.device()[0] in ("cpu", "cuda")


# --- every benchmark: compiles, answers --help -----------------------------------------------------------------

@pytest.mark.parametrize("path", SCRIPTS, ids=_name)
def test_script_compiles(path, tmp_path):
    py_compile.compile(str(path), doraise=True, cfile=str(tmp_path / "compiled.pyc"))


@pytest.mark.parametrize("path", [p for p in SCRIPTS if _name(p) not in NO_HELP], ids=_name)
def test_script_help(path, monkeypatch, capsys):
    needs = OTHER_ENV.get(_name(path))
    if needs:
        pytest.importorskip(needs, reason=f"{_name(path)} runs in {needs}'s own environment")
    monkeypatch.syspath_prepend(str(path.parent))  # as `python benchmarks/<area>/<script>.py` puts it first
    monkeypatch.setattr(sys, "argv", [str(path), "--help"])
    with pytest.raises(SystemExit) as done:
        if _name(path) == "scale/curation_side.py":  # run by module name: main(argv)
            runpy.run_path(str(path), run_name="imported")["main"](["--help"])
        else:
            runpy.run_path(str(path), run_name="__main__")
    assert done.value.code == 0 and "usage:" in capsys.readouterr().out


@pytest.mark.parametrize("path", [p for p in SCRIPTS if _name(p) in NO_HELP],
                         ids=_name)
def test_script_without_help_imports(path, monkeypatch):
    monkeypatch.syspath_prepend(str(path.parent))
    module = runpy.run_path(str(path), run_name="imported")
    assert any(callable(module.get(f)) for f in ("main", "run_measured", "write_result"))


@pytest.mark.parametrize("path", WRAPPERS, ids=_name)
def test_bash_wrapper_parses(path):
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0


def test_gpu_wrappers_source_the_shared_shell_driver():
    shell = subprocess.run(["bash", "-c", f". {BENCH / '_driver.sh'}; declare -F"], capture_output=True, text=True)
    assert {"gpu_env", "gpu_header", "load_log"} <= {line.split()[-1] for line in shell.stdout.splitlines()}
    for name in ("decide_gpu.sh", "table2_gpu.sh", "megatron_gpu.sh"):
        assert "gpu_env; gpu_header" in (BENCH / "pretraining" / name).read_text()


# --- tiny end-to-end runs (-m optin) ----------------------------------------------------------------------------

TINY = {  # script [sub-command] -> arguments of a run of a few seconds to a minute on 2 cores; outputs -> tmp
    "selection/bench_datamask.py step": ["--n", "2000", "--steps", "pws:2,fl@int8:2,disf:1", "--no-mlflow"],
    "selection/bench_datamask.py pws-scale": ["--n", "2000", "--steps", "30", "--no-mlflow"],
    "selection/bench_datamask.py pws-sweep": ["--n", "2000", "--no-mlflow", "--sweep",
                                              '[{"batch_ratio": 0.05, "lr": 10.0, "group_size": 32, "steps": 30}]'],
    "selection/bench_datamask.py long-runs": ["--n", "2000", "--steps", "20", "40", "--clusters", "10"],
    "selection/bench_datamask.py time-to-greedy": ["--sizes", "1024", "--d", "16", "--max-steps", "30",
                                                   "--timing-steps", "3", "--batch-ratios", "1.0", "--no-mlflow"],
    # the synthetic cases only: the corpus cases read a default job's pool, which a fresh clone has not made
    "selection/bench_datamask.py paper-vs-default": ["--cases", "synthetic", "--n", "10000", "--paper-steps", "20",
                                                     "--synthetic-paper-steps", "20"],
    "selection/bench_datamask.py fl-reference": ["--cases", "synthetic", "--synthetic-steps", "3", "--seeds", "0"],
    "selection/bench_disf_greedy.py greedy": ["--cases", "kept", "--batch-size", "64", "--kept-batches", "1",
                                              "--fast-repeats", "1", "--pairs-repeats", "1", "--no-mlflow"],
    "scale/bench_scale.py shards": ["--sizes", "2000", "--engines", "local", "--signals-docs", "200", "--no-mlflow"],
    "scale/bench_scale.py blocks": ["--n", "4000", "--d", "16", "--shards", "2", "--steps", "2", "--baseline",
                                    "--half-blocks", "--greedy", "--no-mlflow"],
    "dedup/bench_dedup.py": ["scale", "--sizes", "3000", "--modes", "salted", "copies", "--docs-per-bucket", "500"],
    "lm/bench_tiny_trainer.py": ["--docs", "200", "--steps", "3", "--warmup", "1", "--configs", "tiny",
                                 "--interleaved-rounds", "1"],
    "lm/bench_eval_cost.py": ["--docs", "200", "--steps", "3", "--warmup", "1", "--tasks", "arc_easy,winogrande",
                              "--limit", "3", "--repeats", "1", "--matmul-n", "256"],
    "pretraining/decide_results.py": ["recheck"],
    "metarater/run_heldout_tables.py protocols": ["--reps", "1", "--candidates", "2000", "--settings",
                                                  "official_step3"],
    "embedding/bench_backends.py": ["throughput", "--n", "24"],
}
OUTPUTS = {
    "selection/bench_datamask.py step": ["datamask_step.csv", "datamask_step.png"],
    "selection/bench_datamask.py pws-scale": ["datamask_pws_2000.csv", "datamask_pws_2000.png"],
    "selection/bench_datamask.py pws-sweep": ["datamask_pws_sweep.csv"],
    "selection/bench_datamask.py long-runs": ["datamask_long_runs.csv", "datamask_long_runs.png"],
    "selection/bench_datamask.py time-to-greedy": ["datamask_time_to_greedy.csv", "datamask_time_to_greedy.png"],
    "selection/bench_datamask.py paper-vs-default": ["datamask_paper_vs_default.csv", "datamask_paper_vs_default.png"],
    "selection/bench_datamask.py fl-reference": ["fl_reference.csv", "fl_reference.png"],
    "selection/bench_disf_greedy.py greedy": ["disf_greedy.csv", "disf_greedy.png"],
    "scale/bench_scale.py shards": ["scale.csv", "scale.png"],
    "scale/bench_scale.py blocks": ["scale/selection_blocks.csv", "scale/selection_blocks.png"],
    "dedup/bench_dedup.py": ["dedup_scale.csv", "dedup_scale.png"],
    "lm/bench_tiny_trainer.py": ["lm_tiny_trainer.csv", "lm_tiny_trainer.png", "lm_tiny_trainer_interleaved.csv"],
    "lm/bench_eval_cost.py": ["lm_eval_cost.csv", "lm_eval_cost.png"],
    "pretraining/decide_results.py": ["decide_B1_sizes/full_se_recheck.csv"],
    "metarater/run_heldout_tables.py protocols": ["metarater_regressor_protocols.csv",
                                                  "metarater_regressor_protocols_runs.csv",
                                                  "metarater_regressor_protocols.png"],
    "embedding/bench_backends.py": ["embedding_throughput.csv", "embedding_throughput.png"],
}


def _committed_columns(name: str) -> list[str] | None:
    """The header of the committed result of that name (its first non-comment line), if there is one."""
    path = BENCH / "results" / name
    if not path.is_file():
        return None
    with path.open() as handle:
        return next(csv.reader(line for line in handle if not line.startswith("#")))


@pytest.mark.optin
@pytest.mark.parametrize("script", sorted(TINY))
def test_tiny_run(script, tmp_path):
    env = {**os.environ, "BENCH_RESULTS": str(tmp_path), "MPLBACKEND": "Agg", "PYTHONPATH": str(REPO / "src")}
    args = list(TINY[script])
    if "--out" not in args and script not in ("dedup/bench_dedup.py", "metarater/run_heldout_tables.py protocols"):
        default_out = {"scale/bench_scale.py shards": tmp_path / "scale.csv",
                       "scale/bench_scale.py blocks": tmp_path / "scale" / "selection_blocks.csv",
                       "lm/bench_tiny_trainer.py": tmp_path / "lm_tiny_trainer",
                       "lm/bench_eval_cost.py": tmp_path / "lm_eval_cost",
                       "pretraining/decide_results.py": tmp_path / "decide_B1_sizes" / "full_se_recheck.csv",
                       "embedding/bench_backends.py": tmp_path / "embedding_throughput",
                       "selection/bench_datamask.py paper-vs-default": tmp_path / "datamask_paper_vs_default.csv",
                       "selection/bench_datamask.py fl-reference": tmp_path / "fl_reference.csv"}.get(script, tmp_path)
        args += ["--out", str(default_out)]
    if script == "dedup/bench_dedup.py":
        args += ["--corpus-dir", str(tmp_path / "corpus")]
    if script == "scale/bench_scale.py shards":
        args += ["--corpus-dir", str(tmp_path / "corpus")]
    if script == "scale/bench_scale.py blocks":
        args += ["--work", str(tmp_path)]
    before = subprocess.run(["git", "status", "--porcelain", "benchmarks/results"], cwd=REPO, capture_output=True,
                            text=True).stdout
    path, *command = script.split(" ")  # "<script> <sub-command>": the sub-command goes first
    run = subprocess.run([sys.executable, str(BENCH / path), *command, *args], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    for name in OUTPUTS[script]:
        assert (tmp_path / name).is_file(), name
        committed = _committed_columns(name) if name.endswith(".csv") else None
        if committed is not None:  # the same columns as the committed result (the tiny run's may lack none)
            with (tmp_path / name).open() as handle:
                mine = next(csv.reader(line for line in handle if not line.startswith("#")))
            assert set(committed) <= set(mine), sorted(set(committed) - set(mine))
    after = subprocess.run(["git", "status", "--porcelain", "benchmarks/results"], cwd=REPO, capture_output=True,
                           text=True).stdout
    assert after == before  # nothing written into the committed results


def test_megatron_logs_are_collected_into_one_table(tmp_path):
    log = tmp_path / "dense.jsonl"
    log.write_text("\n".join(json.dumps(r) for r in (
        {"iteration": 1, "lm_loss": 9.0, "device": "cpu", "extra": 1}, {"iteration": 2, "lm_loss": 8.0, "device": "cpu"},
        {"resumed_from": 2}, {"iteration": 3, "lm_loss": 7.5, "device": "cpu"})))
    script = BENCH / "pretraining" / "gpu_cells.py"
    run = subprocess.run([sys.executable, str(script), "megatron", "--logs", f"dense={log}"], cwd=REPO, env={**os.environ, "BENCH_RESULTS": str(tmp_path), "MPLBACKEND": "Agg"},
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = list(csv.DictReader((tmp_path / "megatron_gpu.csv").open()))
    assert [(r["run"], r["iteration"]) for r in rows] == [("dense", "1"), ("dense", "2"), ("dense.resumed", "3")]
    assert list(rows[0]) == _committed_columns("megatron_gpu.csv") and (tmp_path / "megatron_gpu.png").is_file()


def test_the_gpu_decide_report_counts_the_item_error_of_the_cells_that_kept_their_items(tmp_path):
    """gpu_cells.py report --experiment decide: medium cells (made up here: one task, 60 items, edu's items shifted
    up) with their .items.json beside them get decide's full SE and can be decided; the committed CPU cells kept
    no items, so their pairs are not decided."""
    rng = np.random.default_rng(0)
    (tmp_path / "cells").mkdir()
    rows, base = [], rng.uniform(0.2, 0.4, 60)
    for name in ("random", "topk_quality", "datamask", "edu"):
        for seed in range(3):
            values = base + rng.normal(0, 0.002, 60) + (0.03 if name == "edu" else 0.0)
            (tmp_path / "cells" / f"{name}-medium-{seed}.items.json").write_text(
                json.dumps({"arc_easy": {"correct_prob_per_char": values.tolist()}}))
            rows.append({"candidate": name, "size": "medium", "seed": seed,
                         "mc_correct_prob_per_char": float(values.mean())})
    pd.DataFrame(rows).to_csv(tmp_path / "cells.csv", index=False)
    run = subprocess.run([sys.executable, str(BENCH / "pretraining" / "gpu_cells.py"), "report", "--experiment",
                          "decide", "--cells", str(tmp_path / "cells.csv"), "--out", str(tmp_path / "report")],
                         cwd=REPO, env={**os.environ, "MPLBACKEND": "Agg", "PYTHONPATH": str(REPO / "src")},
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "per-item values of 12 GPU cells" in run.stdout
    table = pd.read_csv(tmp_path / "report" / "decisions.csv")
    medium = table[(table["size"] == "medium") & (table["metric"] == "mc_correct_prob_per_char")]
    assert len(medium) == 6 and medium["se_item"].notna().all()
    assert set(medium.loc[medium["decided"], "winner"]) == {"edu"} and medium["decided"].sum() == 3
    cpu = table[table["size"] != "medium"]
    assert len(cpu) and cpu["se_item"].isna().all() and not cpu["decided"].any()


def test_every_committed_result_csv_has_as_many_cells_per_row_as_its_header():
    """A cell with an unquoted comma shifts every later column of its row (found in setup_time.csv)."""
    ragged = []
    for path in sorted((BENCH / "results").rglob("*.csv")):
        with path.open(newline="") as handle:
            rows = [r for r in csv.reader(line for line in handle if not line.startswith("#")) if r]
        if rows and {len(r) for r in rows} != {len(rows[0])}:
            ragged.append(f"{path.relative_to(BENCH)}: header {len(rows[0])}, rows {sorted({len(r) for r in rows})}")
    assert not ragged, ragged
