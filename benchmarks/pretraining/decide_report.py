"""Rebuild a decide run's report from its namespace's outputs and the content cache (issue #43).

    PYTHONPATH=src .venv/bin/python benchmarks/pretraining/decide_report.py \
        --namespace ladder_B1 --out benchmarks/results/decide_ladder_B1 experiment=decide_ladder [overrides...]

Composes the config as ``curate`` would, runs :func:`curation.decide.cells.run_cells` on the namespace's outputs
(finished cells come from the cache) and writes what the job's report node writes (decide_cells.csv, decisions.csv,
..., recommendation.md): an interim report of a long ladder, or a run reported with today's statistics.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)

    from curation.config_loader import compose_config
    from curation.lm import parse_config
    from curation.decide.cells import Frames, run_cells
    from curation.paths import project_root
    from curation.reporting.decide import build_report, parse_decide
    from curation.reporting.decide_items import items_frame
    from curation.reporting.decide_stats import chance_levels
    from curation.shards import ShardedDataset

    root = project_root()
    cfg = compose_config(root / "conf", [*args.overrides, f"run.namespace={args.namespace}"])
    layer = {"documents": "02_intermediate", "scores": "04_feature", "embeddings": "04_feature",
             "pruned_scores": "05_model_input", "pruned_embeddings": "05_model_input"}

    def read(name: str):
        data = ShardedDataset(root / "data" / layer[name] / args.namespace / name)
        return data.to_frame() if data.manifest.kind == "frame" else np.concatenate([a for _, a in data.iter_arrays()])

    frames = Frames(*(read(n) for n in layer))
    decide = parse_decide(cfg["decide"])
    cache = {**cfg["cache"], "dir": str(root / cfg["cache"]["dir"])}
    cells, items = run_cells(frames, decide.candidates, decide.sizes, decide.seeds, cfg["budget"],
                             parse_config(cfg["pretrain"]), cfg["eval"], int(cfg["run"]["seed"]), cache,
                             rungs=decide.rungs, draws=decide.draws)
    report = build_report(cells, items, decide, int(cfg["eval"].get("limit") or 0),
                          corpus=str(cfg["data"].get("path") or ""), chance=chance_levels(cfg["eval"]))
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    cells.to_csv(out / "decide_cells.csv", index=False)
    items_frame(items).to_parquet(out / "decide_items.parquet", index=False)
    for name, table in (("decisions", report.table), ("size_agreement", report.agreement),
                        ("item_vs_seed", report.errors), ("snr", report.snr), ("tasks", report.tasks)):
        table.to_csv(out / f"{name}.csv", index=False)
    report.figure.savefig(out / "decisions.png", dpi=110)
    if report.ladder_figure is not None:
        report.ladder_figure.savefig(out / "ladder.png", dpi=110)
    (out / "recommendation.md").write_text(report.text)
    print(report.text)
    print(f"cached cells: {int(cells['pretrain_cache_hit'].sum())} of {len(cells)} trained models, "
          f"{int(cells['eval_cache_hit'].sum())} evaluations", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
