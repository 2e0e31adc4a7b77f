"""Per-shard stage functions give the whole-frame result, aligned row for row with their document shards."""

from __future__ import annotations

import pandas as pd

from curation.scoring.redpajama import RedPajamaSignals
from curation.shards import ShardedDataset, ShardTask, ShardWriter, run_shards, shard_names
from curation.scoring.stages import signals_shard

from tests.shards.conftest import CORPUS


def test_signals_per_shard_equal_the_whole_frame_signals_and_keep_ids(tmp_path):
    docs = pd.read_parquet(sorted(CORPUS.glob("*.parquet"))[2], columns=["id", "text"]).iloc[:240]
    parts = [docs.iloc[:100], docs.iloc[100:130], docs.iloc[130:]]
    names = shard_names(len(parts))
    tasks = [ShardTask(n, part.copy) for n, part in zip(names, parts)]
    stats = run_shards(signals_shard, tasks, {"signals": (tmp_path / "signals", "frame")})
    assert [s["rows"] for s in stats] == [100, 30, 110]
    ShardWriter(tmp_path / "signals").finalize(names, stage="signals")
    signals = ShardedDataset(tmp_path / "signals")
    assert [s.rows for s in signals.manifest.shards] == [100, 30, 110]  # aligned with the document shards
    expected = RedPajamaSignals().score_frame(docs["text"].tolist())
    got = signals.to_frame()
    assert got["id"].tolist() == docs["id"].tolist()
    pd.testing.assert_frame_equal(got.drop(columns="id"), expected, check_dtype=False)
