"""``decide``'s cells as tasks on the ``data`` group's engines (issue #51): on a local 2-CPU Ray instance
(``data.engine=ray``) they write the same cells and decisions as the sequential run.

The decide_smoke configuration (a 1-layer model, 3 candidates x 2 seeds, 2 tasks x 16 items) on the default job's
250 bundled documents (the session's ``default_job_250``: documents, scores, embeddings and the pruned pool).
The sequential run and the Ray run train in separate caches, so every Ray cell really trains in a Ray worker;
then a local two-worker pool re-runs the cells over the Ray run's cache and loads every one (a killed run re-run
resumes after its finished cells, whichever engine made them). Torch runs one thread per cell in every run:
thread counts change how float sums are split, and so the last bits of a trained weight.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

# the metrics that time a cell (they differ run to run); every other column must be equal, bit for bit
TIMINGS = ["corpus_selection_seconds", "train_seconds", "train_tokens_per_s", "eval_seconds"]


def _frames(project: Path):
    from curation.decide.cells import Frames
    from curation.shards import ShardedDataset

    layer = {"documents": "02_intermediate", "scores": "04_feature", "embeddings": "04_feature",
             "pruned_scores": "05_model_input", "pruned_embeddings": "05_model_input"}

    def read(name):
        data = ShardedDataset(project / "data" / layer[name] / "default" / name)
        return data.to_frame() if data.manifest.kind == "frame" else np.concatenate([a for _, a in data.iter_arrays()])

    return Frames(*(read(n) for n in layer))


@pytest.mark.slow  # starts a Ray instance and trains 12 models
def test_decide_on_local_ray_writes_the_same_cells_and_decisions_as_the_sequential_run(default_job_250, tmp_path):
    ray = pytest.importorskip("ray")
    from curation.config_loader import compose_config
    from curation.decide.cells import run_cells
    from curation.lm import parse_config
    from curation.reporting.decide import build_report, parse_decide
    from curation.reporting.decide_stats import chance_levels

    cfg = compose_config(default_job_250 / "conf", ["experiment=decide_smoke", "pretrain.train.num_threads=1",
                                                    "eval.num_threads=1"])
    frames, decide = _frames(default_job_250), parse_decide(cfg["decide"])

    def cells(cache: str, **engine):
        made: list[tuple[str, dict]] = []  # what the node's on_cell gets (an MLflow child run each), in the driver
        table, items = run_cells(
            frames, decide.candidates, decide.sizes, decide.seeds, cfg["budget"], parse_config(cfg["pretrain"]),
            cfg["eval"], int(cfg["run"]["seed"]), {"enabled": True, "dir": str(tmp_path / cache)},
            on_cell=lambda name, params, row: made.append((name, params)), rungs=decide.rungs, draws=decide.draws,
            **engine)
        return table, items, made

    sequential, sequential_items, sequential_made = cells("sequential")  # engine local, workers 1: as before
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        on_ray, ray_items, ray_made = cells("ray", engine="ray")
    finally:
        ray.shutdown()
    assert len(sequential) == 3 * 2 and (on_ray["pretrain_cache_hit"] == 0).all()  # every Ray cell trained
    assert (on_ray["eval_cache_hit"] == 0).all() and (on_ray["torch_threads"] == 1).all()
    pd.testing.assert_frame_equal(on_ray.drop(columns=TIMINGS), sequential.drop(columns=TIMINGS), check_exact=True)
    assert list(ray_items) == list(sequential_items) and ray_items == sequential_items  # every item's value
    assert sorted(ray_made, key=str) == sorted(sequential_made, key=str)  # one child run per cell, same params

    # the report node's work (curation.nodes.decide.report_decisions) on each engine's cells
    reports = [build_report(table, items, decide, int(cfg["eval"]["limit"]), chance=chance_levels(cfg["eval"]))
               for table, items in ((sequential, sequential_items), (on_ray, ray_items))]
    decisions = reports[0].table
    assert len(decisions) > 0 and decisions["decided"].notna().all()
    pd.testing.assert_frame_equal(reports[1].table, decisions, check_exact=True)  # decisions.csv
    assert reports[1].text == reports[0].text  # recommendation.md

    # resumable across engines: two local workers over the Ray run's cache load every cell, values unchanged
    again, again_items, _ = cells("ray", engine="local", workers=2)
    hits = ["corpus_cache_hit", "pretrain_cache_hit", "eval_cache_hit"]
    assert (again[hits] == 1).all().all()
    drop = {"columns": TIMINGS + hits, "errors": "ignore"}  # a cached pick has no selection time
    pd.testing.assert_frame_equal(again.drop(**drop), on_ray.drop(**drop), check_exact=True)
    assert again_items == ray_items
