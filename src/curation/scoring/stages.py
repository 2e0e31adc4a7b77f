"""Per-shard stage functions (``fn(frame, shard_name) -> ShardResult``) for the executor.

Each returns attribute rows aligned with its document shard (same order, same ``id``), so
the output is a sharded attribute dataset in dolma's convention. Only stateless stages live
here for now; raters that are fitted once (fastText, DSIR, Edu/Wiki heads) take their fitted
model as a ``functools.partial`` argument when they are moved onto shards.
"""

from __future__ import annotations

import pandas as pd

from curation.shards.executor import ShardResult


def signals_shard(frame: pd.DataFrame, name: str) -> ShardResult:
    """The 11 RedPajama signals (Meta-rater Table 5; :mod:`curation.scoring.redpajama`) of one shard."""
    from curation.scoring.redpajama import RedPajamaSignals

    out = RedPajamaSignals().score_frame(frame["text"].tolist())
    out.insert(0, "id", frame["id"].astype(str).to_numpy())
    return ShardResult({"signals": out}, {"rows": len(out)})
