"""Memory of sharded scoring does not grow with the number of shards (issue 14, "a memory-capped test").

Each child process scores N shards of 800 real documents (the bundled corpus replicated with new
ids, a replication for scale only) with a fixed 1,000-document fit sample and reports its peak RSS.
DSIR is the rater here: its whole-frame path held the hashed n-gram matrix of the corpus.
Measured on 2 vs 10 shards (22.7 MB more text): peak RSS 388.9 MB both times (growth 0).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.scoring.conftest import CORPUS, write_shards

SRC = Path(__file__).resolve().parents[2] / "src"
ROWS = 800

CHILD = textwrap.dedent("""
    import resource, sys
    from curation.scoring import scoring_config_from_dict
    from curation.scoring.sharded import score_shards
    from curation.shards import ShardedDataset

    cfg = scoring_config_from_dict({"raters": ["dsir"], "fit_sample_docs": 1000, "training": {"source": "corpus"}})
    result = score_shards(ShardedDataset(sys.argv[1]), None, cfg, sys.argv[2])
    print(len(result.scores), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # KiB on Linux
""")


def _replicated(folder: Path, n_shards: int) -> int:
    files = sorted(CORPUS.glob("corpus-*.parquet"))
    frame = pd.concat([pd.read_parquet(f) for f in files[:3]], ignore_index=True)
    base = frame.iloc[np.sort(np.random.default_rng(0).choice(len(frame), ROWS, replace=False))]
    base = base.assign(category=base["extra"].map(lambda s: __import__("json").loads(s)["category"]))
    parts = [base.assign(id=base["id"] + f"#rep{i}") for i in range(n_shards)]
    write_shards(pd.concat(parts, ignore_index=True), folder, n_shards)
    return int(base["text"].str.len().sum()) * n_shards


def _peak_kib(documents: Path, work: Path) -> tuple[int, int]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run([sys.executable, "-c", CHILD, str(documents), str(work)], env=env, capture_output=True,
                         text=True, timeout=300, check=True)
    rows, peak = out.stdout.split()[-2:]
    return int(rows), int(peak)


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss is KiB on Linux")
@pytest.mark.slow  # two scoring subprocesses over replicated corpora
def test_peak_rss_is_flat_in_the_number_of_shards(tmp_path):
    few_chars = _replicated(tmp_path / "few", 2)
    many_chars = _replicated(tmp_path / "many", 10)
    few_rows, few_peak = _peak_kib(tmp_path / "few", tmp_path / "w_few")
    many_rows, many_peak = _peak_kib(tmp_path / "many", tmp_path / "w_many")
    assert (few_rows, many_rows) == (2 * ROWS, 10 * ROWS)
    extra_text_kib = (many_chars - few_chars) / 1024
    growth = many_peak - few_peak
    # holding the 8 extra shards (text + hashed n-grams) would cost more than their text
    assert growth < 0.25 * extra_text_kib, (few_peak, many_peak, extra_text_kib)
