"""DiSF Fig. 3 before and after issue #26: two definitions of the dominance score x two selection settings.

Scores the selections a `curate -m experiment=disf_fig3_dominance` sweep wrote with ``covariance`` (the score
before issue #26) and ``official`` (DiSF's dominance_score.py: correlation eigenvalues): the top-10 eigenvalue share.

    python benchmarks/selection/fig3_dominance_before_after.py \
        "before=data/07_model_output/default/multirun/<sweep of the old setting>" \
        "after=data/07_model_output/default/multirun/<sweep of the new setting>"

Writes benchmarks/results/disf_fig3_dominance_before_after.csv.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from curation.selection import dominance_scores

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402
from _driver import ROOT  # noqa: E402

ORDER = ["random", "topk_quality", "semdedup", "greedy_disf", "datamask_disf"]


def covariance_dominance(x: np.ndarray, k: int = 10) -> float:
    x = np.asarray(x, np.float64)
    x = x - x.mean(0)
    eig = np.sort(np.clip(np.linalg.eigvalsh(x.T @ x / (len(x) - 1)), 0.0, None))[::-1]
    return float(eig[:k].sum() / eig.sum())


def main() -> None:
    feats = ROOT / "data" / "04_feature" / "default"
    ids = pd.concat([pd.read_parquet(p, columns=["id"])
                     for p in sorted((feats / "scores" / "shards").glob("*.parquet"))])
    emb = np.concatenate([np.load(p) for p in sorted((feats / "embeddings" / "shards").glob("*.npy"))])
    row_of = pd.Series(np.arange(len(ids)), index=ids["id"].to_numpy())
    rows = []
    for arg in sys.argv[1:]:
        setting, sweep = arg.split("=", 1)
        for job in sorted(Path(sweep).iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 99):
            f = job / "selected_ids.parquet"
            if not f.exists():
                continue
            sel = pd.read_parquet(f)["id"].to_numpy()
            method = ORDER[int(job.name)] if job.name.isdigit() and int(job.name) < len(ORDER) else job.name
            x = emb[row_of.loc[sel].to_numpy()]
            rows.append({"setting": setting, "method": method, "size": len(sel),
                         "dominance_top10_covariance": covariance_dominance(x),
                         "dominance_top10_official": dominance_scores(x, (10,))[10], "sweep": sweep})
            print(rows[-1], flush=True)
    bench.write_result(pd.DataFrame(rows), bench.RESULTS / "disf_fig3_dominance_before_after.csv")


if __name__ == "__main__":
    main()
