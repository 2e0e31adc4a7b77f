"""The seed loop's decisions and training sets (Ultra-FineWeb Sec. 2.3, 2.5, 3.2), on hand-made gains and real
corpus rows: a pool helps only beyond z standard errors over seeds, the fallback is flagged, negatives come from
every source evenly, round 2 adds the classifier's inferred positives.

Each step is also called inside its own test on hand-made inputs whose outcome is worked out by hand (issue #28:
mutmut credits a mutant only to the tests that ran it): reading pool files (`read_texts`), the loop's
verification config (`loop_verification`), the decisions' edge cases, the draw's quotas, the classifier
(`train_classifier`) and both rounds (`run_rounds`) with a small real fastText model, and `keep_rates`.
`verify_pools` runs in full twice, with a one-layer LM, at most 2 annealing steps and 2 benchmark items (~6 s and
~3 s); the default-mix test stops it once the mix is packed."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pandas as pd
import pytest

from curation.scoring.fasttext_rater import UltraFineWebConfig
from curation.scoring.training_sets import EVAL, category_of, human_label_split
from curation.verification.config import VerificationConfig
from curation.verification.seed_loop import (
    PoolSpec,
    SeedPoolError,
    SeedLoopConfig,
    decide_pools,
    keep_rates,
    loop_verification,
    pool_gains,
    read_texts,
    run_rounds,
    second_round_set,
    seed_pools,
    seed_training_set,
    train_classifier,
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


# --- hand-made inputs, one function per test (mutmut credits a mutant only to the tests that ran it) --------


def _gains(per_pool: dict[str, list[float]]) -> pd.DataFrame:
    return pd.DataFrame([{"pool": p, "seed": s, "gain": g} for p, gs in per_pool.items() for s, g in enumerate(gs)])


# Two seeds a, b: mean (a + b) / 2, SE = |a - b| / sqrt(2) / sqrt(2) = |a - b| / 2, t = (a + b) / |a - b|.
# zeta [2, 4]: mean 3, SE 1, t 3; mid [3, 7]: mean 5, SE 2, t 2.5; flat [1, -1]: mean 0, SE 1, t 0.
# The pools are listed out of alphabetical order: the decisions keep the order the pools were verified in.
HAND_GAINS = {"zeta": [2.0, 4.0], "mid": [3.0, 7.0], "flat": [1.0, -1.0]}


def test_decisions_at_the_default_two_standard_errors_keep_pool_order_and_report_t():
    out = decide_pools(_gains(HAND_GAINS))  # default z: Sec. 2.3's "clear effectiveness" at 2 SE
    assert out["pool"].tolist() == ["zeta", "mid", "flat"]
    assert out["mean_gain"].tolist() == pytest.approx([3.0, 5.0, 0.0])
    assert out["se"].tolist() == pytest.approx([1.0, 2.0, 1.0])
    assert out["n_seeds"].tolist() == [2, 2, 2]
    assert out["t"].tolist() == pytest.approx([3.0, 2.5, 0.0])
    assert out["helps"].tolist() == [True, True, False]  # t 2.5 > 2 helps at the default, not at z = 3
    assert out["positive"].tolist() == [True, True, False]
    assert out["fallback"].tolist() == [False, False, False]  # a real decision, not a fallback


def test_a_pool_exactly_at_z_standard_errors_or_with_zero_gain_does_not_help():
    gains = _gains(HAND_GAINS)
    # zeta's mean is exactly 3 SE (3 > 3 * 1 is false): "exceeds" is strict; mid's t 2.5 is below 3 too,
    # so nothing helps and the largest mean gain (mid, 5) becomes the flagged fallback
    out = decide_pools(gains, z=3.0)
    assert out["helps"].tolist() == [False, False, False]
    assert out["positive"].tolist() == [False, True, False] and out["fallback"].tolist() == [False, True, False]
    # at a negative z every pool clears the SE bar, but a zero mean gain is no gain: flat never helps
    assert decide_pools(gains, z=-1.0)["helps"].tolist() == [True, True, False]


def test_decide_pools_errors_name_the_problem():
    with pytest.raises(ValueError, match=r"^if_none='maybe': one of \('best', 'fail'\)$"):
        decide_pools(_gains(HAND_GAINS), if_none="maybe")
    with pytest.raises(ValueError, match="^every pool needs at least 2 seeds for a standard error$"):
        decide_pools(_gains({"a": [1.0, 2.0], "b": [1.0]}))
    with pytest.raises(ValueError, match=r"^no seed pool helps \(mean gain > 3 SE\):\n") as err:
        decide_pools(_gains(HAND_GAINS), z=3.0, if_none="fail")
    lines = str(err.value).splitlines()
    # the table the user reads: every column, one row per pool, led by the pool's name (no index column)
    assert lines[1].split() == ["pool", "mean_gain", "se", "n_seeds", "t", "helps", "positive", "fallback"]
    assert [line.split()[0] for line in lines[2:]] == ["zeta", "mid", "flat"]


def test_pool_gains_without_a_control_at_some_seed_is_an_error():
    with pytest.raises(ValueError, match="^a pool was verified at a seed without its control run$"):
        pool_gains(_averages({"a": [1.0, 2.0, 3.0]}, [1.0, 2.0]), "default_only")


def _sources(counts: dict[str, int]) -> pd.DataFrame:
    # sources listed in reverse alphabetical order: the draw must not depend on the row order of the sources
    src = [s for s, k in counts.items() for _ in range(k)]
    return pd.DataFrame({"source": src, "x": range(len(src))})


def test_uniform_by_source_gives_a_remainder_to_the_first_sources_in_sorted_order():
    frame = _sources({"c": 10, "b": 10, "a": 10})
    # 5 over 3 sources: 1 each, then the 2 left go one each to a and b (not both to a)
    out = uniform_by_source(frame, 5, np.random.default_rng(0))
    assert out["source"].value_counts().sort_index().to_dict() == {"a": 2, "b": 2, "c": 1}
    # 2 over 3 sources: two different sources, never 2 from one
    out = uniform_by_source(frame, 2, np.random.default_rng(0))
    assert out["source"].value_counts().sort_index().to_dict() == {"a": 1, "b": 1}
    assert out.index.is_monotonic_increasing  # rows keep the frame's order


def test_uniform_by_source_fills_up_a_partly_drawn_source_without_overdrawing_it():
    frame = _sources({"c": 100, "b": 2, "a": 8})
    # 21 as evenly as possible: b gives its 2, a its 8, c the remaining 11
    out = uniform_by_source(frame, 21, np.random.default_rng(0))
    assert len(out) == 21 and not out.index.duplicated().any()
    assert out["source"].value_counts().sort_index().to_dict() == {"a": 8, "b": 2, "c": 11}


def _hand_docs(n: int, sources: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"id": [f"d{i}" for i in range(n)], "text": [f"text {i}" for i in range(n)],
                         "source": sources})


def _hand_pools(members: dict[str, list[int]]) -> pd.DataFrame:
    return pd.DataFrame([{"pool": p, "id": f"d{i}", "text": f"text {i}", "in_corpus": True}
                         for p, idx in members.items() for i in idx])


def test_seed_training_set_counts_a_document_of_two_positive_pools_once_and_balances_the_classes():
    docs = _hand_docs(8, ["s1", "s1", "s2", "s2", "s3", "s3", "s4", "s4"])
    pools = _hand_pools({"p1": [0, 1], "p2": [1, 2], "p3": [3]})
    decisions = pd.DataFrame({"pool": ["p1", "p2", "p3"], "positive": [True, True, False]})
    train = seed_training_set(docs, pools, decisions, SeedLoopConfig(train_docs=10))
    # positives d0, d1 (in p1 and p2: once, under the first pool), d2; 3 < the 5 raw documents d3..d7, so 3 each
    assert list(train.columns) == ["id", "text", "label", "origin"] and list(train.index) == list(range(6))
    assert train[train["label"] == 1].to_dict("list") == {
        "id": ["d0", "d1", "d2"], "text": ["text 0", "text 1", "text 2"], "label": [1, 1, 1],
        "origin": ["p1", "p1", "p2"]}
    neg = train[train["label"] == 0]
    # one from each raw source left (s2: d3, s3: d4/d5, s4: d6/d7); s1 has only positives
    assert sorted(neg["origin"]) == ["s2", "s3", "s4"] and "d3" in set(neg["id"])
    assert (neg["text"] == "text " + neg["id"].str[1:]).all()


def test_seed_training_set_balances_to_the_smaller_side_and_keeps_held_out_rows_out():
    docs = _hand_docs(8, ["s1", "s1", "s2", "s2", "s3", "s3", "s4", "s4"])
    pools = _hand_pools({"p1": [0, 1], "p2": [2], "p3": [3]})
    decisions = pd.DataFrame({"pool": ["p1", "p2", "p3"], "positive": [True, True, True]})
    held_out = pd.Series([True, False, False, False, True, True, True, False])
    # positives d1 (p1), d2 (p2), d3 (p3) (d0 held out); negatives: only d7 is neither positive nor held out
    train = seed_training_set(docs, pools, decisions, SeedLoopConfig(train_docs=10), held_out)
    # 1 of each: the one positive comes from the first pool in sorted order
    assert train[["id", "label", "origin"]].to_dict("list") == {"id": ["d1", "d7"], "label": [1, 0],
                                                                "origin": ["p1", "s4"]}
    with pytest.raises(ValueError, match="^cannot build a training set: 0 positive and 8 negative documents$"):
        seed_training_set(docs, pools, decisions.assign(positive=False), SeedLoopConfig())


def test_seed_training_set_is_reproducible_from_the_configured_seed(docs):
    cfg = SeedLoopConfig(pools={"enc": PoolSpec(category="encyclopedic")}, train_docs=30, seed=3)
    pools = seed_pools(docs, cfg)
    decisions = pd.DataFrame({"pool": ["enc"], "positive": [True]})
    first = seed_training_set(docs, pools, decisions, cfg)
    again = seed_training_set(docs, pools, decisions, cfg)
    assert first["id"].tolist() == again["id"].tolist()  # 30 of ~330 raw documents: a fresh seed would differ
    second = second_round_set(docs, first, np.where(docs["category"].eq("docs"), 0.9, 0.1), 0.5, cfg)
    assert second["id"].tolist() == second_round_set(
        docs, first, np.where(docs["category"].eq("docs"), 0.9, 0.1), 0.5, cfg)["id"].tolist()


# documents d0..d10 and their round-1 scores: d0, d1 are round 1's seeds; d2 sits exactly at the threshold
# (kept: P >= 0.5), d3 has no score (NaN: rejected), d6 and d7 are held out
R2_SOURCES = ["s1", "s1", "s1", "s1", "s2", "s2", "s3", "s3", "s3", "s4", "s3"]
R2_SCORES = np.array([0.9, 0.9, 0.5, np.nan, 0.49, 0.2, 0.7, 0.1, 0.3, 0.95, 0.0])
R2_HELD = pd.Series([False] * 6 + [True, True] + [False] * 3)


def _round1() -> pd.DataFrame:
    return pd.DataFrame({"id": ["d0", "d1", "d5"], "text": ["text 0", "text 1", "text 5"], "label": [1, 1, 0],
                         "origin": ["p1", "p1", "s2"]})


def test_second_round_keeps_at_the_threshold_rejects_unscored_and_leaves_held_out_rows_out():
    docs = _hand_docs(11, R2_SOURCES)
    out = second_round_set(docs, _round1(), R2_SCORES, 0.5, SeedLoopConfig(train_docs=10), R2_HELD)
    # positives: seeds d0, d1 + inferred d2 (= 0.5), d9; rejected: d3 (NaN), d4, d5, d8, d10 -> 4 of each
    assert list(out.columns) == ["id", "text", "label", "origin"] and list(out.index) == list(range(8))
    pos, neg = out[out["label"] == 1], out[out["label"] == 0]
    assert dict(zip(pos["id"], pos["origin"])) == {"d0": "p1", "d1": "p1", "d2": "inferred", "d9": "inferred"}
    assert (out["text"] == "text " + out["id"].str[1:]).all()
    # 4 of the 5 rejected, evenly over sources: s1 d3, s2 d4 + d5, s3 one of d8 / d10
    src = dict(zip(docs["id"], docs["source"]))
    assert {"d3", "d4", "d5"} <= set(neg["id"]) and len(neg) == 4
    assert neg["origin"].tolist() == [src[i] for i in neg["id"]]
    assert sorted(neg["origin"]) == ["s1", "s2", "s2", "s3"]


def test_second_round_is_capped_by_train_docs_and_by_the_smaller_side():
    docs = _hand_docs(11, R2_SOURCES)
    # at most 3 per class: inferred 2 (sorted first), seeds 1
    out = second_round_set(docs, _round1(), R2_SCORES, 0.5, SeedLoopConfig(train_docs=3), R2_HELD)
    assert out.groupby("label")["origin"].apply(sorted).to_dict() == {
        0: ["s1", "s2", "s3"], 1: ["inferred", "inferred", "p1"]}
    # threshold 0: every finite score is kept, only the unscored d3 is rejected -> 1 of each
    out = second_round_set(docs, _round1(), R2_SCORES, 0.0, SeedLoopConfig(train_docs=10), R2_HELD)
    assert out[["label", "origin"]].to_dict("list") == {"label": [1, 0], "origin": ["inferred", "s1"]}
    assert out["id"].tolist()[1] == "d3"
    # no seeds and nothing kept: no positive at all (9 usable raw documents rejected)
    with pytest.raises(ValueError, match="^round 2: 0 positive and 9 negative documents$"):
        second_round_set(docs, _round1().iloc[2:], np.zeros(11), 0.5, SeedLoopConfig(), R2_HELD)


def _jsonl(path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_read_texts_reads_a_folder_parquet_files_first_then_jsonl_each_in_name_order(tmp_path):
    folder = tmp_path / "pool"
    folder.mkdir()
    pd.DataFrame({"id": ["b0"], "text": ["from b"], "extra": [1]}).to_parquet(folder / "b.parquet")
    pd.DataFrame({"id": ["a0", "a1"], "text": ["from a", "again a"]}).to_parquet(folder / "a.parquet")
    _jsonl(folder / "z.jsonl", [{"id": 7, "text": "from z"}])  # a numeric id becomes a string id
    _jsonl(folder / "c.jsonl", [{"id": "c0", "text": "from c"}, {"id": "c1", "text": 5}])  # text made a string
    (folder / "notes.txt").write_text("not a pool file")
    out = read_texts(str(folder))
    assert out.to_dict("list") == {"id": ["a0", "a1", "b0", "c0", "c1", "7"],
                                   "text": ["from a", "again a", "from b", "from c", "5", "from z"]}


def test_read_texts_reads_one_file_and_makes_up_ids_from_its_name(tmp_path):
    _jsonl(tmp_path / "seeds.jsonl", [{"text": "first"}, {"text": "second"}])
    out = read_texts(str(tmp_path / "seeds.jsonl"))
    assert out.to_dict("list") == {"id": ["seeds.jsonl/0", "seeds.jsonl/1"], "text": ["first", "second"]}
    pd.DataFrame({"id": ["p0"], "text": ["parquet"]}).to_parquet(tmp_path / "one.parquet")
    assert read_texts(str(tmp_path / "one.parquet")).to_dict("list") == {"id": ["p0"], "text": ["parquet"]}


def test_read_texts_expands_a_glob_relative_to_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "pools").mkdir()
    _jsonl(tmp_path / "pools" / "y.jsonl", [{"id": "y0", "text": "why"}])
    _jsonl(tmp_path / "pools" / "x.jsonl", [{"id": "x0", "text": "ex"}])
    _jsonl(tmp_path / "pools" / "other.txt", [{"id": "o0", "text": "no"}])
    monkeypatch.chdir(tmp_path)
    assert read_texts("pools/*.jsonl").to_dict("list") == {"id": ["x0", "y0"], "text": ["ex", "why"]}
    # an absolute pattern too (pathlib's glob refuses one; a missing absolute path must still say so)
    assert read_texts(str(tmp_path / "pools" / "*.jsonl"))["id"].tolist() == ["x0", "y0"]


def test_read_texts_errors_name_the_pool_path(tmp_path):
    missing = str(tmp_path / "nothing")
    with pytest.raises(FileNotFoundError, match=f"^seed pool {re.escape(repr(missing))}: no parquet or JSONL file$"):
        read_texts(missing)
    _jsonl(tmp_path / "bodies.jsonl", [{"id": "b", "body": "no text column"}])
    path = str(tmp_path / "bodies.jsonl")
    with pytest.raises(ValueError, match=f"^seed pool {re.escape(repr(path))}: no 'text' column "
                                         r"\(columns: \['id', 'body'\]\)$"):
        read_texts(path)


def test_seed_pools_reads_file_pools_marks_corpus_ids_and_numbers_rows_afresh(tmp_path):
    docs = pd.DataFrame({"id": ["d0", "d1", "d2"], "text": ["a", "b", "c"], "category": ["web", None, "books"]},
                        index=[10, 11, 12])
    _jsonl(tmp_path / "mine.jsonl", [{"id": "d1", "text": "b"}, {"id": "elsewhere", "text": "z"}])
    cfg = SeedLoopConfig(pools={"books": PoolSpec(category="books"), "mine": PoolSpec(path=str(tmp_path / "mine.jsonl"))})
    out = seed_pools(docs, cfg)
    assert list(out.index) == [0, 1, 2]
    assert out.to_dict("list") == {"pool": ["books", "mine", "mine"], "id": ["d2", "d1", "elsewhere"],
                                   "text": ["c", "b", "z"], "in_corpus": [True, True, False]}
    with pytest.raises(SeedPoolError, match=r"^verification\.seed_loop\.pools: seed pool 'x' has no document of "
                                            r"category 'forum' in the corpus \(its category values: "
                                            r"\['books', 'web'\]\); name one of them, or a file \(path: \.\.\.\)$"):
        seed_pools(docs, SeedLoopConfig(pools={"x": PoolSpec(category="forum")}))


def test_loop_verification_takes_the_loops_scale_and_falls_back_to_verifications_tasks_and_limit():
    verification = VerificationConfig(tasks=["piqa", "arc_easy"], limit=9, anneal_epochs=4.0)
    cfg = SeedLoopConfig(base_tokens=5_000, candidate_tokens=300, ratio=0.2, default_docs=70, tasks=["hellaswag"],
                         limit=3)
    out = loop_verification(verification, cfg)
    assert (out.base_tokens, out.candidate_tokens, out.ratios, out.default_docs, out.tasks, out.limit) == (
        5_000, 300, [0.2], 70, ["hellaswag"], 3)
    assert out.anneal_epochs == 4.0 and verification.base_tokens == VerificationConfig().base_tokens  # a copy
    out = loop_verification(verification, dataclasses.replace(cfg, tasks=None, limit=None))
    assert (out.tasks, out.limit) == (["piqa", "arc_easy"], 9)
    # the result is validated like any verification config
    with pytest.raises(ValueError, match=r"^config key 'verification\.tasks': unknown task \['nope'\]; known: "):
        loop_verification(verification, dataclasses.replace(cfg, tasks=["nope"]))


def test_keep_rates_per_value_in_sorted_order_plus_all():
    frame = pd.DataFrame({"category": ["b", "a", "b", "a", "b"], "source": ["x", "x", "y", "y", "y"],
                          "keep": [True, False, False, False, True], "ufw_score": [0.9, 0.1, 0.4, 0.3, 0.8]})
    out = keep_rates(frame)
    assert list(out.columns) == ["category", "docs", "kept", "keep_rate", "mean_score"]
    assert out["category"].tolist() == ["a", "b", "all"]
    assert out["docs"].tolist() == [2, 3, 5] and out["kept"].tolist() == [0, 2, 2]
    assert out["keep_rate"].tolist() == pytest.approx([0.0, 2 / 3, 0.4])
    assert out["mean_score"].tolist() == pytest.approx([0.2, 0.7, 0.5])
    by_source = keep_rates(frame, by="source")
    assert by_source["source"].tolist() == ["x", "y", "all"] and by_source["kept"].tolist() == [1, 1, 2]
    assert by_source["mean_score"].tolist() == pytest.approx([0.5, 0.5, 0.5])


# fastText small enough for a test: a few dozen real documents separate cleanly with 50 epochs at lr 1.0
# (measured: encyclopedic vs web, P >= 0.95 for encyclopedic, mean ~0.1 elsewhere); thread 1 is reproducible
SMALL_FT = UltraFineWebConfig(bucket=10_000, dim=16, lr=1.0, epoch=50, thread=1, quantize=False)


def test_train_classifier_learns_label_one_as_the_positive_class(docs):
    enc = docs[docs["category"] == "encyclopedic"].head(20)
    web = docs[docs["category"] == "web"].head(20)
    # negatives first: the classes come from the label column, not from the row order
    training = pd.concat([pd.DataFrame({"text": web["text"], "label": 0}),
                          pd.DataFrame({"text": enc["text"], "label": 1})], ignore_index=True)
    rater = train_classifier(training, SMALL_FT)
    assert rater.cfg is SMALL_FT
    s = rater.score(training["text"].tolist())
    assert s[training["label"] == 1].min() > 0.5 > s[training["label"] == 0].mean()


@pytest.fixture(scope="module")
def small_docs(docs):
    # 120 real documents plus one that preprocessing empties (its score is NaN: never kept)
    empty = pd.DataFrame({"id": ["empty"], "text": [""], "category": ["web"], "source": ["none"]})
    return pd.concat([docs.head(120), empty], ignore_index=True)


def _enc_pools(docs: pd.DataFrame, cfg: SeedLoopConfig):
    return seed_pools(docs, cfg), pd.DataFrame({"pool": ["enc"], "positive": [True]})


def test_run_rounds_trains_two_rounds_scores_with_the_last_and_keeps_at_one_half(small_docs):
    cfg = SeedLoopConfig(pools={"enc": PoolSpec(category="encyclopedic")}, train_docs=12, rounds=2, bucket=10_000,
                         epoch=50)
    pools, decisions = _enc_pools(small_docs, cfg)
    sets, scores, metrics = run_rounds(small_docs, pools, decisions, cfg,
                                       dataclasses.replace(SMALL_FT, threshold=None))  # None: Sec. 2.5's 0.5
    assert list(sets.columns) == ["id", "label", "origin", "round"]  # no text
    assert list(scores.columns) == ["id", "category", "source", "ufw_score_round1", "ufw_score_round2",
                                    "ufw_score", "keep"]
    assert metrics["threshold"] == 0.5 and metrics["rounds_run"] == 2.0 and "round2_skipped" not in metrics
    r1, r2 = sets[sets["round"] == 1], sets[sets["round"] == 2]
    assert (r1["label"] == 1).sum() == (r1["label"] == 0).sum() == 12 == metrics["round1_positives"]
    assert set(r1.loc[r1["label"] == 1, "origin"]) == {"enc"}
    assert metrics["round2_positives"] == (r2["label"] == 1).sum() == (r2["label"] == 0).sum()
    assert metrics["round2_negatives"] == metrics["round2_positives"]
    # the held-out human-labelled rows (scoring's eval split) train neither round
    held = set(small_docs.loc[(human_label_split(small_docs) == EVAL).to_numpy(), "id"])
    assert held and not held & set(sets["id"])
    # round 1 learned its positives: the encyclopedic documents score above the web ones
    by_cat = scores.groupby("category")["ufw_score_round1"].mean()
    assert by_cat["encyclopedic"] > 0.5 > by_cat["web"]
    # the last round's scores decide, kept at P >= 0.5, the empty document never
    assert scores["ufw_score"].equals(scores["ufw_score_round2"])
    assert scores["keep"].tolist() == (scores["ufw_score"] >= 0.5).tolist()
    assert np.isnan(scores.loc[scores["id"] == "empty", "ufw_score"].item())
    for k in (1, 2):
        assert metrics[f"round{k}_keep_rate"] == pytest.approx((scores[f"ufw_score_round{k}"] >= 0.5).mean())


def test_run_rounds_skips_round_two_when_round_one_keeps_every_raw_document(docs):
    # threshold 0 keeps every scored document: no rejected one is left to be a round-2 negative
    small = docs.head(80)
    cfg = SeedLoopConfig(pools={"enc": PoolSpec(category="encyclopedic")}, train_docs=8, rounds=2, bucket=10_000,
                         epoch=50, exclude_eval_labels=False)
    pools, decisions = _enc_pools(small, cfg)
    sets, scores, metrics = run_rounds(small, pools, decisions, cfg, dataclasses.replace(SMALL_FT, threshold=0.0))
    assert metrics["round2_skipped"] == 1.0 and metrics["rounds_run"] == 1.0 and metrics["threshold"] == 0.0
    assert set(sets["round"]) == {1} and "ufw_score_round2" not in scores
    assert scores["keep"].all() and metrics["round1_keep_rate"] == 1.0
    assert scores["ufw_score"].equals(scores["ufw_score_round1"])
    assert (sets["label"] == 0).sum() == 8 == metrics["round1_negatives"] == metrics["round1_positives"]


def test_verify_pools_anneals_each_pool_per_seed_and_gains_are_against_that_seeds_control(corpus_sample):
    # a tiny LM (1 layer), 2 pools x 2 seeds, 2 annealing steps, 2 PIQA items: the loop's own plumbing, each
    # number read back from the returned results: gain = the pool's task average - the default-only run's, same seed
    from curation.lm import train_tokenizer
    from curation.verification.seed_loop import verify_pools
    from tests.verification.tiny_lm import tiny_pretrain

    texts = corpus_sample["text"].head(90).tolist()
    tokenizer = train_tokenizer(texts, vocab_size=512)
    pretrain = tiny_pretrain()
    documents = pd.DataFrame({"id": [f"d{i}" for i in range(50)], "text": texts[:50]})
    # short pool documents (150 characters), so that several fit the 200-token verification sample
    pools = pd.DataFrame({"pool": ["p"] * 20 + ["q"] * 20, "text": [t[:150] for t in texts[50:90]]})
    cfg = SeedLoopConfig(seeds=[0, 1], base_tokens=512, candidate_tokens=200, default_docs=30, tasks=["piqa"],
                         limit=2)
    verification = VerificationConfig(anneal_steps=2)
    gains, results, metrics = verify_pools(pools, documents, tokenizer, pretrain, verification, cfg,
                                           {"num_threads": 1}, {"enabled": False})
    assert list(gains.columns) == ["pool", "seed", "average", "control", "gain"]
    assert sorted(zip(gains["pool"], gains["seed"])) == [("p", 0), ("p", 1), ("q", 0), ("q", 1)]
    annealed = results[results["dataset"] != "base"]
    assert set(results["seed"]) == {0, 1} and set(annealed["ratio"]) == {0.3}  # the loop's ratio
    for row in gains.itertuples():
        at = annealed[annealed["seed"] == row.seed]
        average = 100 * at[at["dataset"] == row.pool]["value"].mean()
        control = 100 * at[at["dataset"] == "default_only"]["value"].mean()
        assert (row.average, row.control, row.gain) == pytest.approx((average, control, average - control))
    for pool in ("p", "q"):
        for seed in (0, 1):
            tokens = metrics[f"{pool}_s{seed}_verification_tokens"]
            docs = metrics[f"{pool}_s{seed}_verification_docs"]
            assert docs >= 2 and 10 * docs <= tokens <= 200  # 150 characters are more than 10 tokens
    assert metrics["base_cache_hit"] == 0.0 and "s0_anneal_steps" in metrics and "s1_anneal_steps" in metrics


# --- the survivors of the third mutation run (issue #28): each test below kills at least one -----------------


def test_the_no_pool_helps_error_prints_the_decision_table_as_read_without_an_index_column():
    # the table the user reads when the loop stops (if_none="fail"): pandas' to_string(index=False), columns
    # right-aligned with no index and no blank leading column (index=None would indent every line by one)
    with pytest.raises(ValueError) as err:
        decide_pools(_gains(HAND_GAINS), z=3.0, if_none="fail")
    assert str(err.value).splitlines()[1:] == [
        "pool  mean_gain  se  n_seeds   t  helps  positive  fallback",
        "zeta        3.0 1.0        2 3.0  False     False     False",
        " mid        5.0 2.0        2 2.5  False     False     False",
        "flat        0.0 1.0        2 0.0  False     False     False"]


class _Stop(Exception):
    """Raised by a wrapper once the real call it wraps has run and been read (the rest of the loop is not needed)."""


@pytest.fixture(scope="module")
def lm_inputs(corpus_sample):
    """A 512-token BPE tokenizer, 50 corpus documents (ids d0..d49, in corpus order) and one pool of 20 short texts."""
    from curation.lm import train_tokenizer

    texts = corpus_sample["text"].head(70).tolist()
    tokenizer = train_tokenizer(texts, vocab_size=512)
    documents = pd.DataFrame({"id": [f"d{i}" for i in range(50)], "text": texts[:50]})
    return tokenizer, documents, pd.DataFrame({"pool": ["p"] * 20, "text": [t[:150] for t in texts[50:70]]})


def _default_mix_ids(lm_inputs, monkeypatch, documents=None, default_docs=None, seed=0) -> list[str]:
    """The ids of the default mix verify_pools packs (read from the real pack_candidates, which still runs)."""
    from curation.verification import anneal
    from curation.verification.config import DEFAULT_MIX
    from curation.verification.seed_loop import verify_pools
    from tests.verification.tiny_lm import tiny_pretrain

    tokenizer, docs, pools = lm_inputs
    real = anneal.pack_candidates

    def reading(mix, candidates, *args, **kwargs):
        real(mix, candidates, *args, **kwargs)
        raise _Stop(candidates.loc[candidates["candidate"] == DEFAULT_MIX, "id"].tolist())

    monkeypatch.setattr(anneal, "pack_candidates", reading)
    cfg = SeedLoopConfig(seeds=[3, 4], base_tokens=512, candidate_tokens=200, default_docs=default_docs,
                         tasks=["piqa"], limit=1)
    with pytest.raises(_Stop) as stopped:
        verify_pools(pools, docs if documents is None else documents, tokenizer, tiny_pretrain(),
                     VerificationConfig(anneal_steps=1, seed=seed), cfg, {"num_threads": 1}, {"enabled": False})
    return stopped.value.args[0]


def test_verify_pools_default_mix_is_a_seeded_sample_of_default_docs_in_corpus_order_or_the_whole_corpus(
        lm_inputs, monkeypatch):
    # Sec. 2.2 / App. A: the base model and every annealing run mix in the same default data; the loop's
    # default_docs draws it from the corpus with the verification's seed (a rerun draws the same documents)
    ids = [f"d{i}" for i in range(50)]
    mix = _default_mix_ids(lm_inputs, monkeypatch, default_docs=30)
    assert len(mix) == len(set(mix)) == 30 and set(mix) <= set(ids)
    assert mix == sorted(mix, key=lambda i: int(i[1:]))  # corpus order, not the draw's order
    assert _default_mix_ids(lm_inputs, monkeypatch, default_docs=30) == mix  # seeded: reproducible
    assert _default_mix_ids(lm_inputs, monkeypatch, default_docs=30, seed=1) != mix  # 30 of 50: the seed matters
    # None, or at least as many as there are: the whole corpus, as given (here in reverse row order, so a
    # needless draw re-sorted by index would show)
    assert _default_mix_ids(lm_inputs, monkeypatch, default_docs=None) == ids
    reverse = lm_inputs[1].iloc[::-1]
    assert _default_mix_ids(lm_inputs, monkeypatch, documents=reverse, default_docs=50) == ids[::-1]
    assert _default_mix_ids(lm_inputs, monkeypatch, documents=reverse, default_docs=80) == ids[::-1]


def _recording_train_classifier(monkeypatch) -> list:
    """seed_loop.train_classifier wrapped: each round's real rater is kept (it still trains and scores)."""
    from curation.verification import seed_loop

    raters, real = [], seed_loop.train_classifier

    def train(training, fasttext_cfg):
        raters.append(real(training, fasttext_cfg))
        return raters[-1]

    monkeypatch.setattr(seed_loop, "train_classifier", train)
    return raters


def test_run_rounds_trains_with_the_loops_bucket_quantize_and_epoch_overrides(docs, monkeypatch):
    # the loop's own fastText overrides (bucket sized to thousands of documents, no quantization, 20 epochs:
    # SeedLoopConfig's comment) replace the scoring group's; here set apart from SMALL_FT's 10,000 / False / 50
    # and read back from the trained fastText model itself
    raters = _recording_train_classifier(monkeypatch)
    small = docs.head(60)
    cfg = SeedLoopConfig(pools={"enc": PoolSpec(category="encyclopedic")}, train_docs=8, rounds=1, bucket=20_000,
                         quantize=True, epoch=7)
    pools, decisions = _enc_pools(small, cfg)
    run_rounds(small, pools, decisions, cfg, SMALL_FT)
    (rater,) = raters
    args = rater.model.f.getArgs()
    assert (args.bucket, args.epoch, rater.model.is_quantized()) == (20_000, 7, True)
    assert args.dim == 16 and rater.cfg.lr == 1.0  # the rest stays the scoring group's recipe


def test_run_rounds_keeps_a_document_scoring_exactly_the_threshold(docs):
    # Sec. 2.5 keeps P >= 0.5; the rule at the threshold itself: score once (rounds = 1, thread 1: the same
    # model every time), then run again with the threshold set to one of the recorded scores
    small = docs.head(60)
    cfg = SeedLoopConfig(pools={"enc": PoolSpec(category="encyclopedic")}, train_docs=8, rounds=1, bucket=10_000,
                         epoch=50)
    pools, decisions = _enc_pools(small, cfg)
    _, first, _ = run_rounds(small, pools, decisions, cfg, dataclasses.replace(SMALL_FT, threshold=0.5))
    at = float(np.sort(first["ufw_score"].to_numpy())[40])  # a score in the upper third
    assert np.isfinite(at)
    _, scores, metrics = run_rounds(small, pools, decisions, cfg, dataclasses.replace(SMALL_FT, threshold=at))
    assert scores["ufw_score"].tolist() == first["ufw_score"].tolist()
    expected = (scores["ufw_score"] >= at).to_numpy()
    assert expected[(scores["ufw_score"] == at).to_numpy()].all() and 0 < expected.sum() < len(small)
    assert scores["keep"].tolist() == expected.tolist()
    assert metrics["round1_keep_rate"] == pytest.approx(expected.mean())  # the round's own keep rate too
    assert metrics["threshold"] == at


# scoring's held-out human labels in docs.head(120): 3 eval-split rows, all web (human_label_split's salted hash)
EVAL_IDS = {"dclm_human_labeled/0356", "dclm_human_labeled/0489", "dclm_human_labeled/0121"}


def test_run_rounds_keeps_the_eval_split_out_of_training_unless_told_not_to(docs):
    # the human-labelled eval rows score the classifier's ROC-AUC (scoring's held-out split): with
    # exclude_eval_labels they train no round, even as members of a positive pool; without it they are
    # ordinary documents. The web pool (50 documents, the 3 eval rows among them) fits within train_docs,
    # so every usable member becomes a positive.
    small = docs.head(120)
    assert set(small.loc[(human_label_split(small) == EVAL).to_numpy(), "id"]) == EVAL_IDS
    web = set(small.loc[small["category"] == "web", "id"])
    assert len(web) == 50 and EVAL_IDS <= web
    cfg = SeedLoopConfig(pools={"web": PoolSpec(category="web")}, train_docs=60, rounds=1, bucket=10_000, epoch=5)
    pools, decisions = seed_pools(small, cfg), pd.DataFrame({"pool": ["web"], "positive": [True]})
    sets, _, metrics = run_rounds(small, pools, decisions, cfg, SMALL_FT)
    assert set(sets.loc[sets["label"] == 1, "id"]) == web - EVAL_IDS and metrics["round1_positives"] == 47
    assert not EVAL_IDS & set(sets["id"])
    sets, _, metrics = run_rounds(small, pools, decisions, dataclasses.replace(cfg, exclude_eval_labels=False),
                                  SMALL_FT)
    assert set(sets.loc[sets["label"] == 1, "id"]) == web and metrics["round1_positives"] == 50


def test_verify_pools_gives_each_loop_seed_its_own_sample_and_annealing_seed_and_records_its_peak_rates(
        lm_inputs, monkeypatch):
    # Table 7: each verification seed is a separate run of the whole check (its pool sample, its annealing
    # runs), so the loop's seeds 3 and 4 must reach the pool's seeded sample (App. A's verification data) and
    # the annealing runs' own seed; the base model is trained once, at the verification's seed (0). Each
    # seed's schedule peaks are recorded (App. A: the annealing peak is 0.1 x the base run's).
    import curation.lm.cached
    from curation.verification import anneal
    from curation.verification.anneal import sample_tokens
    from curation.verification.seed_loop import verify_pools
    from tests.verification.tiny_lm import tiny_pretrain

    tokenizer, documents, pools = lm_inputs
    packed, train_seeds = [], []
    real_pack, real_train = curation.lm.cached.pack_texts, anneal.train_cached

    def pack(texts, *args, **kwargs):
        packed.append(list(texts))
        return real_pack(texts, *args, **kwargs)

    def train(cfg_, *args, **kwargs):
        train_seeds.append(cfg_.train.seed)
        return real_train(cfg_, *args, **kwargs)

    monkeypatch.setattr(curation.lm.cached, "pack_texts", pack)  # verify_pools' packing of each pool's sample
    monkeypatch.setattr(anneal, "train_cached", train)
    pretrain = tiny_pretrain()
    cfg = SeedLoopConfig(seeds=[3, 4], base_tokens=512, candidate_tokens=200, default_docs=None, tasks=["piqa"],
                         limit=1)
    gains, _, metrics = verify_pools(pools, documents, tokenizer, pretrain, VerificationConfig(anneal_steps=1), cfg,
                                     {"num_threads": 1}, {"enabled": False})
    assert gains[["pool", "seed"]].values.tolist() == [["p", 3], ["p", 4]]
    texts = pools["text"].tolist()
    assert packed == [sample_tokens(texts, tokenizer, 200, 3), sample_tokens(texts, tokenizer, 200, 4)]
    assert packed[0] != packed[1]
    # the base run, then per seed the default-only control and the pool
    assert train_seeds == [0, 3, 3, 4, 4]
    for seed in (3, 4):
        assert metrics[f"s{seed}_base_peak_lr"] == pretrain.train.lr
        assert metrics[f"s{seed}_anneal_peak_lr"] == pytest.approx(0.1 * pretrain.train.lr)
