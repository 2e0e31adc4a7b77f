"""The seed loop's decisions and training sets (Ultra-FineWeb Sec. 2.3, 2.5, 3.2), on hand-made gains and real
corpus rows: a pool helps only beyond z standard errors over seeds, the fallback is flagged, negatives come from
every source evenly, round 2 adds the classifier's inferred positives."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from curation.scoring.training_sets import category_of
from curation.verification.seed_loop import (
    PoolSpec,
    SeedLoopConfig,
    decide_pools,
    pool_gains,
    second_round_set,
    seed_pools,
    seed_training_set,
    uniform_by_source,
)


def _averages(per_pool: dict[str, list[float]], control: list[float]) -> pd.DataFrame:
    rows = [{"dataset": "default_only", "seed": s, "average": v} for s, v in enumerate(control)]
    rows += [{"dataset": p, "seed": s, "average": v} for p, vals in per_pool.items() for s, v in enumerate(vals)]
    return pd.DataFrame(rows)


def test_gains_are_paired_by_seed_and_a_pool_helps_only_beyond_z_standard_errors():
    control = [30.0, 31.0, 29.0]
    gains = pool_gains(_averages({"clear": [32.0, 33.1, 30.9],  # +2.0, +2.1, +1.9: SE 0.058
                                  "noisy": [33.0, 30.0, 29.5],  # +3, -1, +0.5: mean 0.83, SE 1.17
                                  "worse": [29.0, 30.0, 28.0]}, control), "default_only")
    assert gains.loc[(gains["pool"] == "clear") & (gains["seed"] == 1), "gain"].item() == pytest.approx(2.1)
    out = decide_pools(gains, z=2.0).set_index("pool")
    assert out.loc["clear", "mean_gain"] == pytest.approx(2.0)
    assert out.loc["clear", "se"] == pytest.approx(np.std([2.0, 2.1, 1.9], ddof=1) / np.sqrt(3))
    assert out["helps"].to_dict() == {"clear": True, "noisy": False, "worse": False}
    assert out["positive"].to_dict() == out["helps"].to_dict() and not out["fallback"].any()
    # z = 0: any positive mean gain helps
    assert decide_pools(gains, z=0.0).set_index("pool")["helps"].to_dict() == {
        "clear": True, "noisy": True, "worse": False}


def test_when_no_pool_helps_the_best_is_flagged_or_the_loop_stops():
    gains = pool_gains(_averages({"a": [30.5, 29.0], "b": [29.0, 30.5], "c": [31.0, 27.0]}, [30.0, 30.0]),
                       "default_only")
    out = decide_pools(gains, z=2.0, if_none="best").set_index("pool")
    assert not out["helps"].any()
    assert out["positive"].to_dict() == {"a": True, "b": False, "c": False}  # mean -0.25, -0.25, -1.0: first max
    assert out.loc["a", "fallback"] and out["fallback"].sum() == 1
    with pytest.raises(ValueError, match="no seed pool helps"):
        decide_pools(gains, if_none="fail")
    with pytest.raises(ValueError, match="without its control"):
        pool_gains(_averages({"a": [1.0, 2.0, 3.0]}, [1.0, 2.0]), "default_only")


def test_uniform_by_source_takes_equal_quotas_and_lets_small_sources_give_all():
    frame = pd.DataFrame({"source": ["big"] * 50 + ["mid"] * 20 + ["tiny"] * 3, "x": range(73)})
    out = uniform_by_source(frame, 30, np.random.default_rng(0))
    assert out["source"].value_counts().to_dict() == {"big": 14, "mid": 13, "tiny": 3}
    assert len(uniform_by_source(frame, 100, np.random.default_rng(0))) == 73


@pytest.fixture(scope="module")
def docs(corpus_sample):
    docs = corpus_sample.head(400).reset_index(drop=True)  # ingest adds the category column; so do we
    return docs.assign(category=category_of(docs["extra"]))


def test_training_set_positives_from_helping_pools_negatives_from_every_other_source(docs):
    cfg = SeedLoopConfig(pools={"enc": PoolSpec(category="encyclopedic"), "books": PoolSpec(category="books"),
                                "web": PoolSpec(category="web")}, train_docs=60)
    pools = seed_pools(docs, cfg)
    assert set(pools["pool"]) == {"enc", "books", "web"} and pools["in_corpus"].all()
    decisions = pd.DataFrame({"pool": ["enc", "books", "web"], "positive": [True, True, False]})
    held_out = pd.Series(docs["quality_label"].notna().to_numpy(), index=docs.index)
    train = seed_training_set(docs, pools, decisions, cfg, held_out)
    pos, neg = train[train["label"] == 1], train[train["label"] == 0]
    assert len(pos) == len(neg) == 60
    assert pos["origin"].value_counts().to_dict() == {"books": 30, "enc": 30}
    cats = docs.set_index("id")["category"]
    assert set(cats[neg["id"]]) <= {"web", "docs", "forum"}  # never a positive pool's document
    labelled = set(docs.loc[held_out.to_numpy(), "id"])
    assert not labelled & set(train["id"])
    available = docs[~docs["id"].isin(pools.loc[pools["pool"].isin(["enc", "books"]), "id"]) & ~held_out]
    quota = uniform_by_source(available, 60, np.random.default_rng(0))["source"].value_counts()
    assert neg["origin"].nunique() == quota.size  # every raw source that has documents left


def test_second_round_adds_inferred_positives_and_takes_rejected_negatives(docs):
    cfg = SeedLoopConfig(pools={"enc": PoolSpec(category="encyclopedic")}, train_docs=40)
    pools = seed_pools(docs, cfg)
    first = seed_training_set(docs, pools, pd.DataFrame({"pool": ["enc"], "positive": [True]}), cfg)
    scores = np.where(docs["category"].eq("docs"), 0.9, 0.1)  # the classifier keeps the docs category
    second = second_round_set(docs, first, scores, 0.5, cfg)
    pos, neg = second[second["label"] == 1], second[second["label"] == 0]
    assert set(pos["origin"]) == {"enc", "inferred"}
    cats = docs.set_index("id")["category"]
    assert set(cats[pos.loc[pos["origin"] == "inferred", "id"]]) == {"docs"}
    assert "docs" not in set(cats[neg["id"]]) and len(pos) == len(neg)


def test_pool_specs_are_checked():
    with pytest.raises(ValueError, match="exactly one"):
        SeedLoopConfig(pools={"x": PoolSpec()}).validate()
    with pytest.raises(ValueError, match="seeds"):
        SeedLoopConfig(seeds=[0]).validate()
