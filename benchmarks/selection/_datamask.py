"""What the DataMask benchmarks of this folder share: their command line, the synthetic problem, a timed DataMask
run, the share of a random -> target gap, and one writer of a result and its MLflow record.

A script of this folder imports it by name (``python benchmarks/selection/<script>.py`` puts the folder first on
``sys.path``); it puts ``benchmarks/`` there for the shared driver, ``bench``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch

from curation.selection import datamask, select
from curation.selection.config import parse_selection_config
from curation.selection.objectives import Objective
from curation.selection.synthetic import clustered_unit_vectors

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402

SYNTHETIC = "synthetic clustered unit vectors (timing)"


def parse(doc: str, *, mlflow: bool = True, **options):
    """The arguments of :func:`_driver.parser` (``--threads`` 1 and ``--out`` the results folder unless given);
    torch set to ``--threads``."""
    options.setdefault("threads", 1)
    options.setdefault("out", bench.RESULTS)
    args = bench.parser(doc, mlflow=mlflow, **options).parse_args()
    torch.set_num_threads(args.threads)
    return args


def write_result(args, stem: str, rows, *, metrics: dict | None = None, log_as: str | None = None, tags=None, **kw):
    """``rows`` to ``<--out>/<stem>.csv`` (``kw``: ``plot``, ``comment``, ``columns``, ``append`` of
    :func:`_driver.write_result`), logged to MLflow as ``log_as`` (default ``stem``) with ``metrics`` and the
    arguments unless there are no metrics or ``--no-mlflow``."""
    log = None if metrics is None or args.no_mlflow else dict(
        name=log_as or stem, params={**vars(args), "out": str(args.out)}, metrics=metrics,
        tags={"paper": "DATAMASK", "data": SYNTHETIC, **(tags or {})})
    return bench.write_result(rows, args.out / f"{stem}.csv", log=log, **kw)


# --- the synthetic problem and a timed run ------------------------------------------------------------------

def problem(n: int, d: int, clusters: int = 50) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` clustered unit vectors of width ``d`` and their quality (seed 0), as float32 tensors."""
    emb, q, _ = clustered_unit_vectors(n, d, n_clusters=clusters, seed=0)
    return torch.from_numpy(emb), torch.tensor(q, dtype=torch.float32)


def pws_problem(n: int, d: int, keep: float, clusters: int = 50) -> tuple[torch.Tensor, torch.Tensor, Objective,
                                                                         int, float]:
    """The PWS problem the PWS benchmarks measure: :func:`problem`, the diversity-only objective, the budget and the
    mean PWS of 5 random selections of that size."""
    emb, q = problem(n, d, clusters)
    budget = int(keep * n)
    obj = Objective(emb, q, diversity="pws", lam=0.0)
    rng = np.random.default_rng(0)
    picks = [torch.from_numpy(rng.choice(n, budget, replace=False)).unsqueeze(0) for _ in range(5)]
    return emb, q, obj, budget, float(np.mean([float(obj.pairwise_similarity(p)[0]) for p in picks]))


def gap(value, f_random: float, target: float):
    """The share of the random -> target gap that ``value`` closes."""
    return (value - f_random) / (target - f_random)


def run(emb: torch.Tensor, q: torch.Tensor, budget: int, **config) -> tuple:
    """One DataMask block (``run_block``, seed 0; lam 0 unless ``config`` sets it): (result, wall s, CPU s)."""
    cfg = parse_selection_config("datamask", {"lam": 0.0, **config})
    t, c = time.perf_counter(), time.process_time()
    res = datamask.run_block(emb, q, budget, cfg, seed=0)
    return res, time.perf_counter() - t, time.process_time() - c


def timed_select(method: str, emb, quality, budget: int, seed: int, **config) -> tuple:
    """``select(method, ...)`` with ``config``: (selection, wall s)."""
    t0 = time.perf_counter()
    sel = select(method, quality=quality, embeddings=emb, budget=budget, config=config, seed=seed)
    return sel, time.perf_counter() - t0
